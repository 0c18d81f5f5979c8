-- heartbeat: a worker's entry in the registry of its namespace, written or removed
-- together with its place in the registry's expiry index.
--
-- KEYS[1] registry zset (worker name scored by the time its entry expires)
-- KEYS[2] this worker's info key
-- ARGV[1] "beat" | "leave"  ARGV[2] worker name  ARGV[3] now ms
-- ARGV[4] (beat) encoded info  ARGV[5] (beat) ttl ms
-- Entries of workers that stopped beating leave the index here, at the next beat of
-- any worker; their info keys expire on their own.
if ARGV[1] == "leave" then
  redis.call("ZREM", KEYS[1], ARGV[2])
  redis.call("DEL", KEYS[2])
  return 1
end
redis.call("SET", KEYS[2], ARGV[4], "PX", ARGV[5])
redis.call("ZADD", KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[5]), ARGV[2])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", ARGV[3])
return 1
