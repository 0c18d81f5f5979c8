-- complete: settle a batch of deliveries of one queue (group commit). Each item
-- is atomic on its own: ownership check, then either
--   running -> no ack; the "running" record (track_state), the "started" event and the
--              attempt's entry in this worker's running index (core/running.py), each
--              when given
-- or an ack and exactly one of
--   done    -> record + notification
--   retry   -> next attempt on the schedule (+ record)
--   dead    -> dead letter (+ record + notification)
--   requeue -> back on the stream at once (graceful shutdown)
-- Fast mode (ARGV[14] "l": the queue's lane is a list, its messages were popped): no
-- ownership and no ack, since a popped message is the worker's alone; a requeue is an
-- RPUSH, so the message is next in line. Records, retries, dead letters, events,
-- unique markers and notifications are written exactly as in reliable mode.
-- An item whose entry this consumer no longer owns (lease lost and recovered by
-- another worker) changes nothing: a stale worker cannot ack another's delivery.
-- With events on, each settled item appends its events (core/events.py) in the same
-- step: its "started" event first when it carries one (an attempt's start riding on
-- its outcome), then its own (running: "started"). The worker packs them (msgpack
-- costs the worker a fifth of what cmsgpack costs Redis); they are appended as they
-- are, and the stream is trimmed once per batch. A final item (done, dead: not retry,
-- requeue or running) releases its message's unique marker if it still holds its id.
--
-- Appending an event (the canonical snippet; copy it into a script that makes a
-- transition. maxlen 0: events off. Absent values nil; numbers may be strings):
--
--   local function event(stream, maxlen, kind, id, task, time_ms, attempt, worker,
--                        duration_ms, error_type)
--     if maxlen > 0 then
--       redis.call("XADD", stream, "MAXLEN", "~", maxlen, "*", "e", cmsgpack.pack({
--         kind, id, task or false, tonumber(time_ms), tonumber(attempt) or false,
--         worker or false, tonumber(duration_ms) or false, error_type or false}))
--     end
--   end
--
-- KEYS[1] stream (fast mode: list)  KEYS[2] schedule  KEYS[3] schedule data  KEYS[4] dead letters
-- KEYS[5] dead letter data  KEYS[6] this batch's receipt  KEYS[7] events stream
-- KEYS[8] this consumer's running index in this queue (a hash: message id -> entry)
-- KEYS[9..] per item, in order: its record key when it carries a record (not ""), then
-- its unique marker when it has a unique key (neither: no key)
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] record ttl s  ARGV[4] dead_letter_max
-- ARGV[5] now ms  ARGV[6] unused  ARGV[7] notification channel prefix (+ message id)
-- ARGV[8] msgpack array of items, each an array:
--   {kind, entry id, message id, encoded record or "", notify 0|1,
--    encoded message (retry/requeue) or dead letter (dead) or "",
--    due ms (retry) or dead-letter time ms (dead) or 0, unique key or nil,
--    and with events on: its event (an encoded "e" field, or nil: none), and its
--    attempt's encoded "started" event to append first, or "";
--    then 1 when its attempt is listed in the running index (its entry is removed,
--    owned or not: the entry is this consumer's own), else absent}
-- A running item's encoded message is its running index entry ("" none) and its due
-- ms how long that entry's hash is kept (PEXPIRE, renewed by the worker's heartbeat).
-- (One msgpack argument instead of seven per item: encoding arguments was the
-- worker's biggest per-message cost.) Every key touched is in KEYS; the notification
-- channels are prefix .. id, the prefix carrying the queue's hash tag (this slot).
-- ARGV[9] lowest and ARGV[10] highest entry id of the batch
-- ARGV[11] seconds the receipt is kept  ARGV[12] events maxlen (0: no events)
-- ARGV[13] unused
-- ARGV[14] mode: "s" stream (reliable) | "l" list (fast); entry ids of a fast batch are
-- the worker's own names of its deliveries, and ARGV[9], ARGV[10] are unused
-- ARGV[15] how notifications are published: "PUBLISH", or "SPUBLISH" on a Redis Cluster
-- Ownership is read once per batch (the consumer's pending entries in that id range)
-- and acks and deletes go in one XACK and one XDEL: per-message commands were the
-- settle script's main cost.
-- Reply: one integer per item: 1 settled, 0 not owned (nothing written).
--
-- The receipt (KEYS[6]) keeps that reply for a while. A batch sent again (redis-py
-- after a dropped connection, the flusher after an error it could not see through)
-- gets the first run's reply back and changes nothing: without it, the second run
-- found its own acks and reported "not owned", a false lease loss.
-- Lists are unpacked in chunks: Lua's unpack() fails beyond a few thousand values.
local receipt = redis.call("GET", KEYS[6])
if receipt then
  local replies = {}
  for i = 1, #receipt do replies[i] = string.byte(receipt, i) - 48 end
  return replies
end
local CHUNK = 1000
local function each_chunk(list, call)
  for first = 1, #list, CHUNK do
    call(unpack(list, first, math.min(first + CHUNK - 1, #list)))
  end
end
local group, consumer, ttl = ARGV[1], ARGV[2], ARGV[3]
local dlq_max, now = tonumber(ARGV[4]), ARGV[5]
local channel_prefix, publish = ARGV[7], ARGV[15]
local items = cmsgpack.unpack(ARGV[8])
local maxlen = tonumber(ARGV[12]) or 0
local k = 8  -- the last of KEYS taken: each item's keys follow, in item order
-- Events are appended without MAXLEN and trimmed once when the script ends (MAXLEN on
-- each XADD cost a quarter of an event's time): the cap holds all the same.
local appended = 0
-- pcall: with no group (Redis restarted empty) nothing is owned, and the batch
-- must still be answered, or the worker would retry it forever.
local owned = {}
local fast = ARGV[14] == "l"
if fast then
  for _, item in ipairs(items) do owned[item[2]] = true end
else
  local ok, pending = pcall(redis.call, "XPENDING", KEYS[1], group, ARGV[9], ARGV[10],
                            1000000, consumer)
  if ok then
    for _, p in ipairs(pending) do owned[p[1]] = true end
  end
end
local replies, acks = {}, {}
for i, item in ipairs(items) do
  local kind, entry, id, record, notify, body, due =
    item[1], item[2], item[3], item[4], item[5], item[6], item[7]
  local record_key, marker
  if record ~= "" then k = k + 1; record_key = KEYS[k] end
  if item[8] and item[8] ~= "" then k = k + 1; marker = KEYS[k] end
  if item[11] then
    redis.call("HDEL", KEYS[8], id)
  end
  if not owned[entry] then
    replies[i] = 0
  elseif kind == "running" then
    if record ~= "" then
      redis.call("SET", record_key, record, "EX", ttl)
    end
    if body ~= "" then
      redis.call("HSET", KEYS[8], id, body)
      redis.call("PEXPIRE", KEYS[8], due)
    end
    if maxlen > 0 and item[9] then
      redis.call("XADD", KEYS[7], "*", "e", item[9])
      appended = appended + 1
    end
    replies[i] = 1
  else
    owned[entry] = nil  -- settled once, even if the batch names it twice
    acks[#acks + 1] = entry
    if kind == "retry" then
      redis.call("ZADD", KEYS[2], due, id)
      redis.call("HSET", KEYS[3], id, body)
    elseif kind == "requeue" then
      if fast then
        redis.call("RPUSH", KEYS[1], body)
      else
        redis.call("XADD", KEYS[1], "*", "m", body)
      end
    elseif kind == "dead" then
      -- scored by the dead letter's own time (due), so lists and age filters match it
      if due == 0 then due = now end
      redis.call("ZADD", KEYS[4], due, id)
      redis.call("HSET", KEYS[5], id, body)
      local excess = redis.call("ZCARD", KEYS[4]) - dlq_max
      if excess > 0 then
        local oldest = redis.call("ZRANGE", KEYS[4], 0, excess - 1)
        redis.call("ZREMRANGEBYRANK", KEYS[4], 0, excess - 1)
        each_chunk(oldest, function(...) redis.call("HDEL", KEYS[5], ...) end)
      end
    end
    if record ~= "" then
      redis.call("SET", record_key, record, "EX", ttl)
    end
    if marker and kind ~= "retry" and kind ~= "requeue" then
      -- final: the next enqueue of its unique key makes a new message
      if redis.call("GET", marker) == id then redis.call("DEL", marker) end
    end
    if maxlen > 0 and item[9] then
      if item[10] ~= "" then
        redis.call("XADD", KEYS[7], "*", "e", item[10])
      end
      redis.call("XADD", KEYS[7], "*", "e", item[9])
      appended = appended + 2
    end
    if notify == 1 then
      redis.call(publish, channel_prefix .. id, kind)
    end
    replies[i] = 1
  end
end
if not fast then
  each_chunk(acks, function(...)
    redis.call("XACK", KEYS[1], group, ...)
    redis.call("XDEL", KEYS[1], ...)
  end)
end
if appended > 0 then
  redis.call("XTRIM", KEYS[7], "MAXLEN", "~", maxlen)
end
redis.call("SET", KEYS[6], table.concat(replies), "EX", ARGV[11])
return replies
