-- lease_release: give a lease up, only if the token still holds it
-- (engine/redis/lease.py): compare and delete in one step.
--
-- KEYS[1] the lease
-- ARGV[1] token
-- Reply: 1 when released, 0 when the token did not hold it (nothing changed).
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
