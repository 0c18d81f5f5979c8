-- start: a worker is about to start a recovered entry (delivery count >= 2). If this
-- consumer still owns it, count the start and renew the lease (it may have waited
-- for a slot); if not, another worker took it meanwhile and it must not start here.
--
-- Poison detection counts these starts, not deliveries: a recovered entry that its
-- worker held without starting (prefetched, waiting for a slot) when that worker died
-- did not kill it, and is not brought closer to max_deliveries by that death.
--
-- KEYS[1] stream  KEYS[2] the entry's start counter
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] entry id  ARGV[4] counter TTL s
-- Reply: the starts counted so far (this one included), 0 if the entry is not owned.
local ok, owned = pcall(redis.call, "XPENDING", KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if not ok or #owned == 0 then return 0 end
redis.call("XCLAIM", KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], "JUSTID")
local starts = redis.call("INCR", KEYS[2])
redis.call("EXPIRE", KEYS[2], ARGV[4])
return starts
