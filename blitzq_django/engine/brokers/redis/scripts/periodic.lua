-- periodic: claim the occurrences of one schedule and dispatch them, in one atomic step,
-- so any number of schedulers dispatch each occurrence once (engine/scheduler).
-- The claim is a compare-and-set on the latest occurrence handled: a call whose
-- occurrences are all at or before the stored one writes nothing; otherwise the stored
-- one becomes ARGV[2] and each occurrence after the old one is put on the queue now.
--
-- KEYS[1] claims hash (schedule name -> latest occurrence ms handled)
-- KEYS[2] last dispatch hash (schedule name -> packed info)
-- KEYS[3] ready stream or list of the lane   KEYS[4] events stream
-- KEYS[4+i] record key of the i-th occurrence (i = 1, 2, ...; any key of the slot when unused)
-- ARGV[1] schedule name   ARGV[2] latest occurrence ms handled by this call
-- ARGV[3] mode: "s" stream | "l" list   ARGV[4] record ttl s   ARGV[5] events maxlen (0: off)
-- ARGV[6] packed info of the last dispatch, written when anything is dispatched
-- then 4 per occurrence to dispatch, ascending: occurrence ms, encoded message,
-- encoded record or "", encoded event or ""
-- Reply: {dispatched count, the latest occurrence handled before this call or -1}
local last = tonumber(redis.call("HGET", KEYS[1], ARGV[1]) or "-1")
if last >= tonumber(ARGV[2]) then
  return {0, last}
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
local dispatched, maxlen = 0, tonumber(ARGV[5])
for i = 7, #ARGV, 4 do
  if tonumber(ARGV[i]) > last then
    if ARGV[3] == "l" then
      redis.call("LPUSH", KEYS[3], ARGV[i + 1])
    else
      redis.call("XADD", KEYS[3], "*", "m", ARGV[i + 1])
    end
    if ARGV[i + 2] ~= "" then
      redis.call("SET", KEYS[4 + (i - 3) / 4], ARGV[i + 2], "EX", ARGV[4])
    end
    if maxlen > 0 and ARGV[i + 3] ~= "" then
      redis.call("XADD", KEYS[4], "*", "e", ARGV[i + 3])
    end
    dispatched = dispatched + 1
  end
end
if dispatched > 0 then
  if ARGV[6] ~= "" then redis.call("HSET", KEYS[2], ARGV[1], ARGV[6]) end
  if maxlen > 0 then redis.call("XTRIM", KEYS[4], "MAXLEN", "~", maxlen) end
end
return {dispatched, last}
