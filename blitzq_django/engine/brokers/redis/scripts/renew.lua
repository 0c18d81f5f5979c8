-- renew: extend this consumer's leases by resetting the idle time of entries it
-- still owns (XCLAIM JUSTID keeps the delivery count). Entries it no longer owns
-- were recovered by another worker: they are reported, never taken back.
--
-- KEYS[1] stream
-- ARGV[1] group  ARGV[2] consumer  ARGV[3..] entry ids
-- Reply: the entry ids whose lease is lost.
local lost = {}
for i = 3, #ARGV do
  local ok, owned = pcall(redis.call, "XPENDING", KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if not ok or #owned == 0 then
    lost[#lost + 1] = ARGV[i]
  else
    redis.call("XCLAIM", KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], "JUSTID")
  end
end
return lost
