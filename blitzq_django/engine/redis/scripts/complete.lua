-- complete: settle a batch of deliveries of one queue (group commit). Each item
-- is atomic on its own: ownership check, ack, and exactly one of
--   done    -> record + notification
--   retry   -> next attempt on the schedule (+ record)
--   dead    -> dead letter (+ record + notification)
--   requeue -> back on the stream at once (graceful shutdown, cancelled early)
-- An item whose entry this consumer no longer owns (lease lost and recovered by
-- another worker) changes nothing: a stale worker cannot ack another's delivery.
--
-- KEYS[1] stream  KEYS[2] schedule  KEYS[3] schedule data  KEYS[4] dead letters
-- KEYS[5] dead letter data  KEYS[5+i] record key of item i
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] record ttl s  ARGV[4] dead_letter_max
-- ARGV[5] now ms, then 7 values per item:
--   kind, entry id, message id, encoded record or "", channel or "",
--   encoded message (retry/requeue) or dead letter (dead) or "", due ms (retry)
-- Reply: one integer per item: 1 settled, 0 not owned (nothing written).
local group, consumer, ttl = ARGV[1], ARGV[2], ARGV[3]
local dlq_max, now = tonumber(ARGV[4]), ARGV[5]
local replies = {}
local n = (#ARGV - 5) / 7
for i = 0, n - 1 do
  local b = 5 + i * 7
  local kind, entry, id = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local record, channel, body, due = ARGV[b + 4], ARGV[b + 5], ARGV[b + 6], ARGV[b + 7]
  local owned = redis.call("XPENDING", KEYS[1], group, entry, entry, 1, consumer)
  if #owned == 0 then
    replies[i + 1] = 0
  else
    redis.call("XACK", KEYS[1], group, entry)
    redis.call("XDEL", KEYS[1], entry)
    if kind == "retry" then
      redis.call("ZADD", KEYS[2], due, id)
      redis.call("HSET", KEYS[3], id, body)
    elseif kind == "requeue" then
      redis.call("XADD", KEYS[1], "*", "m", body)
    elseif kind == "dead" then
      redis.call("ZADD", KEYS[4], now, id)
      redis.call("HSET", KEYS[5], id, body)
      local excess = redis.call("ZCARD", KEYS[4]) - dlq_max
      if excess > 0 then
        local oldest = redis.call("ZRANGE", KEYS[4], 0, excess - 1)
        redis.call("ZREMRANGEBYRANK", KEYS[4], 0, excess - 1)
        redis.call("HDEL", KEYS[5], unpack(oldest))
      end
    end
    if record ~= "" then
      redis.call("SET", KEYS[5 + i + 1], record, "EX", ttl)
    end
    if channel ~= "" then
      redis.call("PUBLISH", channel, kind)
    end
    replies[i + 1] = 1
  end
end
return replies
