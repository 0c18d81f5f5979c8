-- promote: move due scheduled messages onto their queue. Atomic, so any number
-- of workers and schedulers may run it: no entry is promoted twice.
--
-- KEYS[1] ready stream or list  KEYS[2] schedule zset  KEYS[3] schedule data hash
-- ARGV[1] now ms  ARGV[2] limit  ARGV[3] mode: "s" stream | "l" list
-- Reply: {number moved, due ms of the earliest remaining entry or -1}
local due = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", ARGV[1], "LIMIT", 0, ARGV[2])
for _, id in ipairs(due) do
  local body = redis.call("HGET", KEYS[3], id)
  redis.call("ZREM", KEYS[2], id)
  redis.call("HDEL", KEYS[3], id)
  if body then
    if ARGV[3] == "l" then
      redis.call("LPUSH", KEYS[1], body)
    else
      redis.call("XADD", KEYS[1], "*", "m", body)
    end
  end
end
local nxt = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
local next_due = -1
if #nxt > 0 then next_due = tonumber(nxt[2]) end
return {#due, next_due}
