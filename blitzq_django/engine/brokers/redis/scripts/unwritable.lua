-- unwritable: count one event the database refused in a queue's history health
-- (blitzq_django/history/health.py), and keep its description as the last one.
--
-- KEYS[1] history health hash (QueueKeys.history_health)
-- ARGV[1] time ms  ARGV[2] description
-- Reply: the count of unwritable events
local n = redis.call("HINCRBY", KEYS[1], "unwritable", 1)
redis.call("HSET", KEYS[1], "unwritable_last_ms", ARGV[1], "unwritable_last", ARGV[2])
return n
