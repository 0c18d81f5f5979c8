-- recover: claim entries whose lease expired (idle longer than the visibility
-- timeout) for this consumer. The claim returns bodies, so delivery counts rise
-- and the worker can dead-letter poison messages past max_deliveries.
--
-- Entries already recovered before (delivery count >= 2) are claimed at most one
-- per call: a message that kills its worker then dies alone, instead of taking
-- the messages recovered in the same batch past max_deliveries with it.
--
-- KEYS[1] stream
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] min idle ms  ARGV[4] count
-- Reply: {{entry id, encoded message, delivery count}..., deleted ids}
-- Deleted ids are entries removed from the stream while pending: nothing to run.
local ok, pending = pcall(redis.call, "XPENDING", KEYS[1], ARGV[1], "IDLE", ARGV[3],
                          "-", "+", ARGV[4])
if not ok then return {{}, {}} end  -- no group (Redis restarted empty): nothing to recover
local ids, counts, suspect = {}, {}, false
for _, p in ipairs(pending) do
  if p[4] < 2 or not suspect then
    if p[4] >= 2 then suspect = true end
    ids[#ids + 1] = p[1]
    counts[p[1]] = p[4]
  end
end
if #ids == 0 then return {{}, {}} end
local claimed, deleted, seen = {}, {}, {}
for _, entry in ipairs(redis.call("XCLAIM", KEYS[1], ARGV[1], ARGV[2], ARGV[3], unpack(ids))) do
  -- Redis 6.2 answers a deleted entry with nil (false here) or a nil body.
  if type(entry) == "table" and type(entry[2]) == "table" then
    local id, fields = entry[1], entry[2]
    seen[id] = true
    local body = ""
    for j = 1, #fields, 2 do
      if fields[j] == "m" then body = fields[j + 1] end
    end
    claimed[#claimed + 1] = {id, body, counts[id] + 1}
  end
end
for _, id in ipairs(ids) do
  if not seen[id] then
    -- Deleted from the stream while pending: Redis >= 7 already dropped it from the
    -- pending list; 6.2 kept it (now ours), so ack it.
    deleted[#deleted + 1] = id
    redis.call("XACK", KEYS[1], ARGV[1], id)
  end
end
return {claimed, deleted}
