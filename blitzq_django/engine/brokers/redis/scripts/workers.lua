-- workers: the info of every worker whose entry has not expired, in one call.
--
-- KEYS[1] registry zset
-- ARGV[1] now ms  ARGV[2] info key prefix (the name follows; same hash tag as KEYS[1])
-- Reply: the encoded infos (an entry whose key already expired is skipped)
local names = redis.call("ZRANGEBYSCORE", KEYS[1], ARGV[1], "+inf")
local out = {}
for _, name in ipairs(names) do
  local info = redis.call("GET", ARGV[2] .. name)
  if info then out[#out + 1] = info end
end
return out
