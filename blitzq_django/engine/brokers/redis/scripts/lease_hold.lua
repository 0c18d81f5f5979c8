-- lease_hold: take a lease that is free, or renew it for the token that holds it
-- (engine/redis/lease.py). One step: a holder whose lease expired and was taken by
-- another can never renew its successor's.
--
-- KEYS[1] the lease (QueueKeys.history_lease, QueueKeys.metrics_lease)
-- ARGV[1] token  ARGV[2] ttl ms
-- Reply: 1 when the token holds the lease now (taken or renewed), 0 when another does.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 1
end
return 0
