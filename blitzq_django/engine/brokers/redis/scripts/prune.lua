-- prune: remove from the group the consumers of workers that died without retiring:
-- those that own no pending entry and have been idle for more than ARGV[2] ms.
--
-- "idle" is the time since the consumer last tried to read or claim (Redis 7.2 added
-- "inactive", the time since it last got an entry: a live worker on an empty queue is
-- inactive but never idle for long, so "inactive" is not what is wanted here).
-- Ownership is checked again with XPENDING before each delete: a consumer that owns an
-- entry is never deleted (XGROUP DELCONSUMER would make its entries unclaimable).
--
-- KEYS[1] stream
-- ARGV[1] group  ARGV[2] min idle ms
-- Reply: how many consumers were removed (0 when the stream or the group is missing)
local ok, consumers = pcall(redis.call, "XINFO", "CONSUMERS", KEYS[1], ARGV[1])
if not ok then return 0 end
local min_idle = tonumber(ARGV[2])
local removed = 0
for _, fields in ipairs(consumers) do
  local info = {}
  for i = 1, #fields, 2 do info[fields[i]] = fields[i + 1] end
  if info["pending"] == 0 and info["idle"] > min_idle
      and #redis.call("XPENDING", KEYS[1], ARGV[1], "-", "+", 1, info["name"]) == 0 then
    redis.call("XGROUP", "DELCONSUMER", KEYS[1], ARGV[1], info["name"])
    removed = removed + 1
  end
end
return removed
