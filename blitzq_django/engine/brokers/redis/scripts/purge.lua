-- purge: drop a queue's ready and scheduled messages, in every lane (and its dead
-- letters when asked), atomically. Messages workers hold (in flight) are never
-- touched: they finish and settle as usual. Without force, a queue with messages
-- in flight is refused, since a worker may be about to put a retry on the schedule.
--
-- Fast mode: the lanes are lists; popped messages are not in Redis, so nothing is in
-- flight here and purge never refuses.
--
-- KEYS[1] dead letters zset  KEYS[2] dead letter data hash, then per lane:
--   stream (fast mode: list), schedule zset, schedule data hash
-- ARGV[1] group  ARGV[2] force 0|1  ARGV[3] dead letters too 0|1
-- ARGV[4] mode: "s" stream | "l" list
-- Reply: {ready removed, scheduled removed, dead letters removed, in flight}, or
-- {-1, 0, 0, in flight} when refused, or {-2, 0, 0, 0} when the queue has no key.
local exists = redis.call("EXISTS", KEYS[1])
for k = 3, #KEYS, 3 do exists = exists + redis.call("EXISTS", KEYS[k], KEYS[k + 1]) end
if exists == 0 then return {-2, 0, 0, 0} end
local in_flight, lasts = 0, {}
for k = 3, #KEYS, 3 do
  lasts[k] = "0-0"
  local ok, groups = pcall(redis.call, "XINFO", "GROUPS", KEYS[k])
  if ok then
    for _, g in ipairs(groups) do
      local f = {}
      for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
      if f["name"] == ARGV[1] then
        in_flight, lasts[k] = in_flight + f["pending"], f["last-delivered-id"]
      end
    end
  end
end
if in_flight > 0 and ARGV[2] ~= "1" then return {-1, 0, 0, in_flight} end
-- The ready entries are those past the group's last-delivered id: delete them in
-- chunks (unpack() fails beyond a few thousand values).
local ready, scheduled = 0, 0
for k = 3, #KEYS, 3 do
  local last = lasts[k]
  if ARGV[4] == "l" then
    ready = ready + redis.call("LLEN", KEYS[k])
    redis.call("DEL", KEYS[k])
    last = nil
  end
  while last do
    local entries = redis.call("XRANGE", KEYS[k], "(" .. last, "+", "COUNT", 1000)
    if #entries == 0 then break end
    local ids = {}
    for i, e in ipairs(entries) do ids[i] = e[1] end
    ready = ready + redis.call("XDEL", KEYS[k], unpack(ids))
    last = ids[#ids]
  end
  scheduled = scheduled + redis.call("ZCARD", KEYS[k + 1])
  redis.call("DEL", KEYS[k + 1], KEYS[k + 2])
end
local dead = 0
if ARGV[3] == "1" then
  dead = redis.call("ZCARD", KEYS[1])
  redis.call("DEL", KEYS[1], KEYS[2])
end
return {ready, scheduled, dead, in_flight}
