-- retire: remove a stopping worker's consumer from the group, but only when it
-- owns no pending entry (XGROUP DELCONSUMER would make those unclaimable).
--
-- KEYS[1] stream
-- ARGV[1] group  ARGV[2] consumer
-- Reply: 1 removed, 0 kept (it still owns entries, or the group is gone)
local ok, owned = pcall(redis.call, "XPENDING", KEYS[1], ARGV[1], "-", "+", 1, ARGV[2])
if not ok or #owned > 0 then return 0 end
redis.call("XGROUP", "DELCONSUMER", KEYS[1], ARGV[1], ARGV[2])
return 1
