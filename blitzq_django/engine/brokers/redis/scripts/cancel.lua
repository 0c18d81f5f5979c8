-- cancel: cancel one message of one queue, in one atomic step.
--   scheduled (in any lane's schedule: delayed, ETA, retry backoff) -> removed, its
--     record set to cancelled (+ its unique marker released, its waiters notified):
--     reply {"cancelled", "scheduled"}. Certain: it will not run.
--   else its record is final (or it is a dead letter) -> {"finished", state}
--   else (queued, running, or nothing known with ARGV[9] "0") -> a revocation is kept
--     until ARGV[3] and published: {"revoked", record state or ""}. The worker that
--     receives the message settles it cancelled without running it; the one running it
--     cancels an async attempt (a thread attempt sees current_task().cancelled).
--   else (no record, ARGV[9] "1": with track_state every message has one) -> {"unknown", ""}
-- The cancelled record is built by the client from the scheduled message, which it
-- reads with a first call: a scheduled body other than ARGV[6] (none given, or it was
-- replaced meanwhile) changes nothing and replies {"scheduled", body}; the client
-- builds the record from that body and calls again.
--
-- KEYS[1] record  KEYS[2] revocations zset  KEYS[3] dead letter data hash
-- KEYS[4] the scheduled message's unique marker (a dummy when it has none)
-- KEYS[5] events stream
-- KEYS[6..] schedule zset and schedule data hash of each lane, in pairs
-- ARGV[1] message id  ARGV[2] now ms  ARGV[3] revocation expiry ms  ARGV[4] record ttl s
-- ARGV[5] encoded cancelled record or "" (none is stored)
-- ARGV[6] the scheduled body ARGV[5] was built from, or ""
-- ARGV[7] revocation channel  ARGV[8] payload published there ("<queue> <id>")
-- ARGV[9] "1": no record means unknown (track_state); "0": revoke anyway
-- ARGV[10] final record states, space separated
-- ARGV[11] this message's notification channel (get_result waiters)
-- ARGV[12] events maxlen (0: no events)  ARGV[13] task name (for the event) or ""
-- ARGV[14] attempt (for the event) or ""
-- ARGV[15] how ARGV[11] is published: "PUBLISH", or "SPUBLISH" on a Redis Cluster (it is
-- this slot's channel). The revocation channel (ARGV[7]) is the namespace's, in another
-- slot: always PUBLISH, which a cluster forwards to every node.

-- event(): the canonical appender of core/events.py.
local function event(stream, maxlen, kind, id, task, time_ms, attempt, worker,
                     duration_ms, error_type)
  if maxlen > 0 then
    redis.call("XADD", stream, "MAXLEN", "~", maxlen, "*", "e", cmsgpack.pack({
      kind, id, task or false, tonumber(time_ms), tonumber(attempt) or false,
      worker or false, tonumber(duration_ms) or false, error_type or false}))
  end
end

-- The state of an encoded record without decoding it (its results may hold msgpack
-- types Lua's cmsgpack cannot read): a record is a map whose first entries are the
-- strings id, task, queue and state (core/record.py field order). nil if not found.
local function str_at(s, pos)
  local b = string.byte(s, pos)
  if not b then return nil end
  local len, start
  if b >= 0xa0 and b <= 0xbf then
    len, start = b - 0xa0, pos + 1
  elseif b == 0xd9 then
    len, start = string.byte(s, pos + 1), pos + 2
  elseif b == 0xda then
    len, start = string.byte(s, pos + 1) * 256 + string.byte(s, pos + 2), pos + 3
  else
    return nil
  end
  if not len then return nil end
  return string.sub(s, start, start + len - 1), start + len
end

local function record_state(record)
  local b = string.byte(record, 1)
  local pos
  if b and b >= 0x80 and b <= 0x8f then pos = 2
  elseif b == 0xde then pos = 4
  else return nil end
  for _ = 1, 4 do
    local key, value
    key, pos = str_at(record, pos)
    if not key then return nil end
    value, pos = str_at(record, pos)
    if not value then return nil end
    if key == "state" then return value end
  end
  return nil
end

local id = ARGV[1]
for i = 6, #KEYS, 2 do
  local body = redis.call("HGET", KEYS[i + 1], id)
  if body then
    if body ~= ARGV[6] then return {"scheduled", body} end
    redis.call("ZREM", KEYS[i], id)
    redis.call("HDEL", KEYS[i + 1], id)
    if ARGV[5] ~= "" then
      redis.call("SET", KEYS[1], ARGV[5], "EX", ARGV[4])
      redis.call(ARGV[15], ARGV[11], "cancelled")
    end
    if redis.call("GET", KEYS[4]) == id then redis.call("DEL", KEYS[4]) end
    local task, attempt = nil, nil
    if ARGV[13] ~= "" then task = ARGV[13] end
    if ARGV[14] ~= "" then attempt = ARGV[14] end
    event(KEYS[5], tonumber(ARGV[12]), "cancelled", id, task, ARGV[2], attempt)
    return {"cancelled", "scheduled"}
  end
end

local state = nil
local record = redis.call("GET", KEYS[1])
if record then
  state = record_state(record)
  if state then
    for final in string.gmatch(ARGV[10], "%S+") do
      if state == final then return {"finished", state} end
    end
  end
elseif redis.call("HEXISTS", KEYS[3], id) == 1 then
  return {"finished", "dead_lettered"}
elseif ARGV[9] == "1" then
  return {"unknown", ""}
end
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", ARGV[2])
redis.call("ZADD", KEYS[2], ARGV[3], id)
redis.call("PUBLISH", ARGV[7], ARGV[8])
return {"revoked", state or ""}
