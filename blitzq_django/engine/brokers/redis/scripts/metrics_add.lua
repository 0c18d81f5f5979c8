-- metrics_add: add one folded batch of events to a queue's metrics (engine/metrics.py)
-- with the cursor it was folded up to, in one step: a folder that dies before it leaves
-- the counts and the cursor as they were, and the next fold counts those events once.
--
-- KEYS[1] metrics hash (QueueKeys.metrics)  KEYS[2] enqueue times (QueueKeys.metrics_starts)
-- ARGV[1] cursor  ARGV[2] most enqueue times kept (beyond: all forgotten)
-- ARGV[3] n: counter pairs, then n x (name, increment)
-- then m: ids to forget, then m ids; then the rest: (id, enqueued ms) pairs to keep
-- Reply: 1
local i = 4
for _ = 1, tonumber(ARGV[3]) do
  redis.call("HINCRBY", KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call("HSET", KEYS[1], "cursor", ARGV[1])
local gone = tonumber(ARGV[i])
i = i + 1
if gone > 0 then
  redis.call("HDEL", KEYS[2], unpack(ARGV, i, i + gone - 1))
end
i = i + gone
if i <= #ARGV then
  redis.call("HSET", KEYS[2], unpack(ARGV, i, #ARGV))
  if redis.call("HLEN", KEYS[2]) > tonumber(ARGV[2]) then
    redis.call("DEL", KEYS[2])  -- messages that never start: forget them all
  end
end
return 1
