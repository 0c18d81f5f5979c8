-- events_read: a consumer group's next events (the history writer's read), in one step
-- with counting the events the stream lost before the group read them, and with
-- trimming what the group has read.
--
-- With task history on, the scripts that append events cap the stream only at a hard cap
-- (MAXLEN ~ the broker's events_maxlen): a writer that falls behind finds its events.
-- This script trims the stream to its newest ARGV[4] events, but never one the group has
-- not read (nor one delivered and not acknowledged).
--
-- Lost events (Redis 7: entries-added of XINFO STREAM, entries-read of XINFO GROUPS):
-- events are never XDEL'ed, so the stream dropped E - L entries from its head (E added,
-- L kept); the group's entries-read R is the position of its last delivered entry. R <
-- E - L: the E - L - R entries after it were trimmed unread. They are counted in the
-- health hash and R set to E - L, so each is counted once. This must happen in the same
-- step as the read: a group read across a gap counts only the entries it delivers, and
-- R would no longer tell the gap. Entries delivered and not acknowledged that were
-- trimmed since are counted too, and acknowledged (nothing is left to deliver). Before
-- Redis 7 there are no counters: nothing is counted; the trim still keeps what the group
-- has not read.
--
-- KEYS[1] events stream  KEYS[2] history health hash (bq:{ns:queue}:hh)
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] events to read (0: none, only count and trim)
-- ARGV[4] events to keep once read (0: no trim)  ARGV[5] now ms
-- ARGV[6] most entries the trim looks at in one call when Redis has no counters
-- Reply: {lost, trimmed, unread, last delivered id, entries}: unread is -1 when Redis
-- cannot tell (before Redis 7, or before the group's first read); entries as XRANGE
-- gives them. The group is created (at the oldest entry) when it does not exist.
local stream_key, group_name = KEYS[1], ARGV[1]
local function fields_of(raw)
  local out = {}
  for i = 1, #raw, 2 do out[raw[i]] = raw[i + 1] end
  return out
end

if redis.call("EXISTS", stream_key) == 0 then return {0, 0, 0, "0-0", {}} end
local stream = fields_of(redis.call("XINFO", "STREAM", stream_key))
local group = nil
for _, raw in ipairs(redis.call("XINFO", "GROUPS", stream_key)) do
  local info = fields_of(raw)
  if info["name"] == group_name then group = info end
end
if group == nil then
  redis.call("XGROUP", "CREATE", stream_key, group_name, "0")
  group = {["pending"] = 0, ["last-delivered-id"] = "0-0", ["entries-read"] = false}
end

local length = stream["length"]
local first = stream["recorded-first-entry-id"]  -- Redis 7; "0-0" when empty
if first == nil then
  first = stream["first-entry"] and stream["first-entry"][1] or false
elseif length == 0 then
  first = false
end
local lost = 0

-- Delivered, not acknowledged, and trimmed since: gone before they were written. Those
-- before the first kept entry ("(" excludes it); all of them if none is kept.
local pending = group["pending"]
if pending > 0 then
  local gone = redis.call("XPENDING", stream_key, group_name, "-",
                          first and ("(" .. first) or "+", pending)
  local ids = {}
  for _, entry in ipairs(gone) do ids[#ids + 1] = entry[1] end
  for i = 1, #ids, 1000 do
    redis.call("XACK", stream_key, group_name, unpack(ids, i, math.min(i + 999, #ids)))
  end
  lost = lost + #ids
  pending = pending - #ids
end

-- Trimmed before they were delivered (Redis 7's counters).
local added, read = stream["entries-added"], group["entries-read"]
local unread = -1
if added and read then
  local removed = added - length
  if read < removed then
    lost = lost + (removed - read)
    redis.call("XGROUP", "SETID", stream_key, group_name, group["last-delivered-id"],
               "ENTRIESREAD", removed)
    read = removed
  end
  unread = added - read
end
if lost > 0 then
  redis.call("HINCRBY", KEYS[2], "lost", lost)
  redis.call("HSET", KEYS[2], "lost_last_ms", ARGV[5])
end

-- Trim: keep the newest `keep`, and whatever the group has not read (nor acknowledged).
local keep = tonumber(ARGV[4])
local trimmed = 0
if keep > 0 and length > keep then
  if unread >= 0 and pending == 0 then
    local target = math.max(keep, unread)
    if length > target then
      trimmed = redis.call("XTRIM", stream_key, "MAXLEN", "~", target)
    end
  else
    -- Without the counters: the entries up to the group's floor (its last delivered
    -- entry, which is read; else just before its oldest pending one), at most ARGV[6].
    local floor = group["last-delivered-id"]
    if pending > 0 then
      floor = "(" .. redis.call("XPENDING", stream_key, group_name)[2]
    end
    local most = math.min(length - keep, tonumber(ARGV[6]))
    local before = #redis.call("XRANGE", stream_key, "-", floor, "COUNT", most)
    if before > 0 then
      trimmed = redis.call("XTRIM", stream_key, "MAXLEN", "~", length - before)
    end
  end
end

local entries = {}
if tonumber(ARGV[3]) > 0 then
  local reply = redis.call("XREADGROUP", "GROUP", group_name, ARGV[2], "COUNT", ARGV[3],
                           "STREAMS", stream_key, ">")
  if reply then entries = reply[1][2] end
end
local last = group["last-delivered-id"]
if #entries > 0 then last = entries[#entries][1] end
return {lost, trimmed, unread, last, entries}
