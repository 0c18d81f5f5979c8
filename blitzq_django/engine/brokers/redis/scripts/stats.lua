-- stats: one queue's counts in one call (read only), over all of its lanes.
--
-- KEYS[1] dead letters zset, then per lane: stream (fast mode: list), schedule zset
-- ARGV[1] group  ARGV[2] now ms  ARGV[3] mode: "s" stream | "l" list
-- Reply: {ready, in flight, scheduled, dead letters, consumers, age of the oldest
-- ready message in ms or -1}, and in fast mode a 7th: the oldest ready message of each
-- non-empty lane (the client reads its age from it)
-- Fast mode: ready is LLEN; in flight and consumers are 0 (popped messages leave
-- Redis: only the workers know them).
-- Acknowledged entries are deleted at once (XDEL), so a stream holds exactly the
-- ready and the in-flight ones; the oldest ready one is the first past the group's
-- last-delivered id. Consumers: the most of any lane (a worker reads every lane).
local ready, in_flight, scheduled, consumers, age = 0, 0, 0, 0, -1
if ARGV[3] == "l" then
  local oldest = {}
  for k = 2, #KEYS, 2 do
    ready = ready + redis.call("LLEN", KEYS[k])
    local tail = redis.call("LINDEX", KEYS[k], -1)
    if tail then oldest[#oldest + 1] = tail end
    scheduled = scheduled + redis.call("ZCARD", KEYS[k + 1])
  end
  return {ready, 0, scheduled, redis.call("ZCARD", KEYS[1]), 0, -1, oldest}
end
for k = 2, #KEYS, 2 do
  local stream = KEYS[k]
  local pending, readers, last = 0, 0, "0-0"
  local ok, groups = pcall(redis.call, "XINFO", "GROUPS", stream)
  if ok then
    for _, g in ipairs(groups) do
      local f = {}
      for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
      if f["name"] == ARGV[1] then
        pending, readers, last = f["pending"], f["consumers"], f["last-delivered-id"]
      end
    end
  end
  ready = ready + redis.call("XLEN", stream) - pending
  in_flight = in_flight + pending
  consumers = math.max(consumers, readers)
  local first = redis.call("XRANGE", stream, "(" .. last, "+", "COUNT", 1)
  if #first > 0 then
    local ms = tonumber(string.match(first[1][1], "^(%d+)"))
    age = math.max(age, math.max(0, tonumber(ARGV[2]) - ms))
  end
  scheduled = scheduled + redis.call("ZCARD", KEYS[k + 1])
end
return {ready, in_flight, scheduled, redis.call("ZCARD", KEYS[1]), consumers, age}
