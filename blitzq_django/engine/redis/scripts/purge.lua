-- purge: drop a queue's ready and scheduled messages (and its dead letters when
-- asked), atomically. Messages workers hold (in flight) are never touched: they
-- finish and settle as usual. Without force, a queue with messages in flight is
-- refused, since a worker may be about to put a retry on the schedule.
--
-- KEYS[1] stream  KEYS[2] schedule zset  KEYS[3] schedule data hash
-- KEYS[4] dead letters zset  KEYS[5] dead letter data hash
-- ARGV[1] group  ARGV[2] force 0|1  ARGV[3] dead letters too 0|1
-- Reply: {ready removed, scheduled removed, dead letters removed, in flight}, or
-- {-1, 0, 0, in flight} when refused, or {-2, 0, 0, 0} when the queue has no key.
if redis.call("EXISTS", KEYS[1], KEYS[2], KEYS[4]) == 0 then return {-2, 0, 0, 0} end
local in_flight, last = 0, "0-0"
local ok, groups = pcall(redis.call, "XINFO", "GROUPS", KEYS[1])
if ok then
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f["name"] == ARGV[1] then in_flight, last = f["pending"], f["last-delivered-id"] end
  end
end
if in_flight > 0 and ARGV[2] ~= "1" then return {-1, 0, 0, in_flight} end
-- The ready entries are those past the group's last-delivered id: delete them in
-- chunks (unpack() fails beyond a few thousand values).
local ready = 0
while true do
  local entries = redis.call("XRANGE", KEYS[1], "(" .. last, "+", "COUNT", 1000)
  if #entries == 0 then break end
  local ids = {}
  for i, e in ipairs(entries) do ids[i] = e[1] end
  ready = ready + redis.call("XDEL", KEYS[1], unpack(ids))
  last = ids[#ids]
end
local scheduled = redis.call("ZCARD", KEYS[2])
redis.call("DEL", KEYS[2], KEYS[3])
local dead = 0
if ARGV[3] == "1" then
  dead = redis.call("ZCARD", KEYS[4])
  redis.call("DEL", KEYS[4], KEYS[5])
end
return {ready, scheduled, dead, in_flight}
