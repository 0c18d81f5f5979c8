-- recover: claim entries whose lease expired (idle longer than the visibility
-- timeout) for this consumer, with bodies, so their delivery count rises, and
-- report each one's delivery count so the worker can dead-letter poison messages.
--
-- KEYS[1] stream
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] min idle ms  ARGV[4] count  ARGV[5] cursor
-- Reply: {next cursor, {entry id, encoded message, delivery count}..., deleted ids}
-- Deleted ids are entries removed from the stream while pending (Redis >= 7 lists
-- them as a third element; 6.2 returns them with a nil body).
local res = redis.call("XAUTOCLAIM", KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[5], "COUNT", ARGV[4])
local claimed, deleted = {}, res[3] or {}
for _, entry in ipairs(res[2]) do
  local id, fields = entry[1], entry[2]
  if type(fields) ~= "table" then
    deleted[#deleted + 1] = id
    redis.call("XACK", KEYS[1], ARGV[1], id)
  else
    local body = ""
    for j = 1, #fields, 2 do
      if fields[j] == "m" then body = fields[j + 1] end
    end
    local info = redis.call("XPENDING", KEYS[1], ARGV[1], id, id, 1)
    local count = 1
    if #info > 0 then count = info[1][4] end
    claimed[#claimed + 1] = {id, body, count}
  end
end
return {res[1], claimed, deleted}
