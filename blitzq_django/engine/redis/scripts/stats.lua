-- stats: one queue's counts in one call (read only).
--
-- KEYS[1] stream  KEYS[2] schedule zset  KEYS[3] dead letters zset
-- ARGV[1] group  ARGV[2] now ms
-- Reply: {ready, in flight, scheduled, dead letters, consumers, age of the oldest
-- ready message in ms or -1}
-- Acknowledged entries are deleted at once (XDEL), so the stream holds exactly the
-- ready and the in-flight ones; the oldest ready one is the first past the group's
-- last-delivered id.
local length = redis.call("XLEN", KEYS[1])
local in_flight, consumers, last = 0, 0, "0-0"
local ok, groups = pcall(redis.call, "XINFO", "GROUPS", KEYS[1])
if ok then
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f["name"] == ARGV[1] then
      in_flight, consumers, last = f["pending"], f["consumers"], f["last-delivered-id"]
    end
  end
end
local age = -1
local first = redis.call("XRANGE", KEYS[1], "(" .. last, "+", "COUNT", 1)
if #first > 0 then
  local ms = tonumber(string.match(first[1][1], "^(%d+)"))
  age = math.max(0, tonumber(ARGV[2]) - ms)
end
return {length - in_flight, in_flight, redis.call("ZCARD", KEYS[2]),
        redis.call("ZCARD", KEYS[3]), consumers, age}
