-- enqueue: put messages of one queue lane on it (now) or on its schedule (later),
-- each optionally deduplicated by an idempotency key or held unique, with a first
-- record, and its event ("enqueued" or "scheduled") when events are on. One call per
-- message, or per chunk of a bulk enqueue; each message is atomic with its event.
-- The plain case (no key, no record, no delay, no unique key, events off) is a bare
-- XADD, not this script.
--
-- KEYS[1] ready stream or list   KEYS[2] schedule zset   KEYS[3] schedule data hash
-- KEYS[4] events stream
-- then 3 keys per message i = 0, 1, ...: KEYS[5+3i] record key, KEYS[6+3i] idempotency
-- key, KEYS[7+3i] unique marker (the last two: any key of this slot when unused)
-- ARGV[1] mode: "s" stream | "l" list   ARGV[2] record ttl s   ARGV[3] idempotency ttl s
-- (the unique marker's too)   ARGV[4] events maxlen (0: no events)
-- ARGV[5] wake channel, or "": a delayed message that becomes the earliest of the
-- schedule is published there (its due ms), so sleeping promoters wake at once
-- ARGV[6] how: "PUBLISH", or "SPUBLISH" on a Redis Cluster (the channel is this slot's)
-- then 6 args per message i: ARGV[7+6i] encoded message, ARGV[8+6i] message id,
-- ARGV[9+6i] due ms (0 = run now), ARGV[10+6i] encoded record or "",
-- ARGV[11+6i] "i" idempotency key, "u" unique marker, "iu" both or "",
-- ARGV[12+6i] its event, encoded by the client ("enqueued" or "scheduled"; "" when off)
-- Reply: two values per message: 1, id when written; 0, the existing id when its
-- idempotency key or unique marker already held one (then nothing of it is written).
--
-- The unique marker (unique=True, or a chosen task_id) holds the id of the message
-- while it is unfinished: complete.lua deletes it with the message's final settlement.
-- Its TTL (the idempotency TTL) only bounds a marker whose message vanished.
local maxlen = tonumber(ARGV[4])
local reply, appended, earliest = {}, 0, nil
for i = 0, (#ARGV - 6) / 6 - 1 do
  local a, k = 7 + 6 * i, 5 + 3 * i
  local payload, id, due, record, flags = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
                                          ARGV[a + 4]
  local existing = false
  if flags ~= "" then
    if string.find(flags, "i", 1, true) then existing = redis.call("GET", KEYS[k + 1]) end
    if not existing and string.find(flags, "u", 1, true) then
      existing = redis.call("GET", KEYS[k + 2])
    end
  end
  if existing then
    reply[#reply + 1] = 0
    reply[#reply + 1] = existing
  else
    if flags ~= "" then
      if string.find(flags, "i", 1, true) then
        redis.call("SET", KEYS[k + 1], id, "EX", ARGV[3])
      end
      if string.find(flags, "u", 1, true) then
        redis.call("SET", KEYS[k + 2], id, "EX", ARGV[3])
      end
    end
    if due ~= "0" then
      redis.call("ZADD", KEYS[2], due, id)
      redis.call("HSET", KEYS[3], id, payload)
      if earliest == nil or tonumber(due) < earliest then earliest = tonumber(due) end
    elseif ARGV[1] == "l" then
      redis.call("LPUSH", KEYS[1], payload)
    else
      redis.call("XADD", KEYS[1], "*", "m", payload)
    end
    if record ~= "" then
      redis.call("SET", KEYS[k], record, "EX", ARGV[2])
    end
    if maxlen > 0 then  -- trimmed once, at the end
      redis.call("XADD", KEYS[4], "*", "e", ARGV[a + 5])
      appended = appended + 1
    end
    reply[#reply + 1] = 1
    reply[#reply + 1] = id
  end
end
if appended > 0 then
  redis.call("XTRIM", KEYS[4], "MAXLEN", "~", maxlen)
end
if earliest ~= nil and ARGV[5] ~= "" then
  local head = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
  if tonumber(head[2]) >= earliest then redis.call(ARGV[6], ARGV[5], earliest) end
end
return reply
