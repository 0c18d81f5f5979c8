-- enqueue: put one message on its queue (now) or on its schedule (later),
-- optionally deduplicated by an idempotency key and with a first record.
-- The plain case (no key, no record, no delay) is a bare XADD, not this script.
--
-- KEYS[1] ready stream or list   KEYS[2] schedule zset   KEYS[3] schedule data hash
-- KEYS[4] record key             KEYS[5] idempotency key (may be a dummy when unused)
-- ARGV[1] encoded message        ARGV[2] message id      ARGV[3] due ms (0 = run now)
-- ARGV[4] encoded record or ""   ARGV[5] record ttl s    ARGV[6] idempotency ttl s or ""
-- ARGV[7] mode: "s" stream | "l" list
-- Reply: {1, id} when written; {0, existing id} when the idempotency key already held one.
if ARGV[6] ~= "" then
  local existing = redis.call("GET", KEYS[5])
  if existing then return {0, existing} end
  redis.call("SET", KEYS[5], ARGV[2], "EX", ARGV[6])
end
if ARGV[3] ~= "0" then
  redis.call("ZADD", KEYS[2], ARGV[3], ARGV[2])
  redis.call("HSET", KEYS[3], ARGV[2], ARGV[1])
elseif ARGV[7] == "l" then
  redis.call("LPUSH", KEYS[1], ARGV[1])
else
  redis.call("XADD", KEYS[1], "*", "m", ARGV[1])
end
if ARGV[4] ~= "" then
  redis.call("SET", KEYS[4], ARGV[4], "EX", ARGV[5])
end
return {1, ARGV[2]}
