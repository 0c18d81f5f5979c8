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
-- Redis 7 there are no counters: the trim keeps what the group has not read and its last
-- delivered entry, and a read that finds that entry trimmed (by the cap) counts a gap
-- of an unknown number of events ("gaps" in the health hash).
--
-- KEYS[1] events stream  KEYS[2] history health hash (bq:{ns:queue}:hh)
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] events to read (0: none, only count and trim)
-- ARGV[4] events to keep once read (0: no trim)  ARGV[5] now ms
-- ARGV[6] most entries the trim looks at in one call when Redis has no counters
-- Reply: {lost, trimmed, unread, last delivered id, entries, gaps}: unread is -1 when
-- Redis cannot tell (before Redis 7, or before the group's first read); entries as XRANGE
-- gives them; gaps 1 when a gap of unknown size was found (before Redis 7). The group is
-- created (at the oldest entry) when it does not exist.
local stream_key, group_name = KEYS[1], ARGV[1]
local function fields_of(raw)
  local out = {}
  for i = 1, #raw, 2 do out[raw[i]] = raw[i + 1] end
  return out
end

if redis.call("EXISTS", stream_key) == 0 then return {0, 0, 0, "0-0", {}, 0} end
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
local last_id = group["last-delivered-id"]
local unread = -1
local gaps = 0
if added and read then
  local removed = added - length
  if read < removed then
    lost = lost + (removed - read)
    redis.call("XGROUP", "SETID", stream_key, group_name, last_id, "ENTRIESREAD", removed)
    read = removed
  end
  unread = added - read
elseif tonumber(ARGV[3]) > 0 and first and last_id ~= "0-0" then
  -- No counters: the group's last delivered entry is kept in the stream (the trim below
  -- stops before it), so only the cap can have trimmed it; then what followed it may be
  -- gone too, how much cannot be told. A gap, found by the read that crosses it.
  local lm, ls = string.match(last_id, "^(%d+)-(%d+)$")
  local fm, fs = string.match(first, "^(%d+)-(%d+)$")
  lm, ls, fm, fs = tonumber(lm), tonumber(ls), tonumber(fm), tonumber(fs)
  if lm < fm or (lm == fm and ls < fs) then gaps = 1 end
end
if lost > 0 then
  redis.call("HINCRBY", KEYS[2], "lost", lost)
end
if gaps > 0 then
  redis.call("HINCRBY", KEYS[2], "gaps", gaps)
end
if lost > 0 or gaps > 0 then
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
  elseif last_id ~= "0-0" or pending > 0 then  -- "0-0": the group has read nothing yet
    -- Without the counters: the entries before the group's floor (its last delivered
    -- entry, kept to tell a gap; else its oldest pending one), at most ARGV[6].
    local floor = "(" .. last_id
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
local last = last_id
if #entries > 0 then last = entries[#entries][1] end
return {lost, trimmed, unread, last, entries, gaps}
