-- recover: claim entries whose lease expired (idle longer than the visibility
-- timeout) for this consumer. The claim returns bodies, so delivery counts rise
-- and the worker can dead-letter poison messages past max_deliveries.
--
-- Entries already recovered before (delivery count >= 2) are claimed at most one
-- per call: a message that kills its worker then dies alone, instead of taking
-- the messages recovered in the same batch past max_deliveries with it.
--
-- With events on, each entry claimed from another consumer appends a "recovered"
-- event (core/events.py) in the same step; its id and task are read off the head of
-- the encoded message ("malformed:<entry id>" when it is not one, as its dead letter's). An entry this consumer
-- claims back from itself (its process was paused) is no recovery: no event.
--
-- KEYS[1] stream  KEYS[2] events stream
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] min idle ms  ARGV[4] count
-- ARGV[5] events maxlen (0 or absent: no events)  ARGV[6] now ms
-- Reply: {{entry id, encoded message, delivery count}..., deleted ids}
-- Deleted ids are entries removed from the stream while pending: nothing to run.
local ok, pending = pcall(redis.call, "XPENDING", KEYS[1], ARGV[1], "IDLE", ARGV[3],
                          "-", "+", ARGV[4])
if not ok then return {{}, {}} end  -- no group (Redis restarted empty): nothing to recover
local ids, counts, owners, suspect = {}, {}, {}, false
for _, p in ipairs(pending) do
  if p[4] < 2 or not suspect then
    if p[4] >= 2 then suspect = true end
    ids[#ids + 1] = p[1]
    counts[p[1]] = p[4]
    owners[p[1]] = p[2]
  end
end
local maxlen = tonumber(ARGV[5]) or 0
-- The id and task at the head of an encoded message [v, id, task, ...]; nil if not one.
local function head(body)
  local b = string.byte(body, 1)
  local pos
  if not b then return nil
  elseif b >= 0x90 and b <= 0x9f then pos = 2
  elseif b == 0xdc then pos = 4
  elseif b == 0xdd then pos = 6
  else return nil end
  local v = string.byte(body, pos)
  if not v or v > 0x7f then return nil end  -- the version: a positive fixint
  pos = pos + 1
  local out = {}
  for n = 1, 2 do
    local c, len = string.byte(body, pos), nil
    if not c then return nil
    elseif c >= 0xa0 and c <= 0xbf then len, pos = c - 0xa0, pos + 1
    elseif c == 0xd9 then len, pos = string.byte(body, pos + 1), pos + 2
    elseif c == 0xda then
      local hi, lo = string.byte(body, pos + 1, pos + 2)
      if not lo then return nil end
      len, pos = hi * 256 + lo, pos + 3
    else return nil end
    if not len or pos + len - 1 > #body then return nil end
    out[n] = string.sub(body, pos, pos + len - 1)
    pos = pos + len
  end
  return out[1], out[2]
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
    if maxlen > 0 and owners[id] ~= ARGV[2] then
      local message_id, task = head(body)
      redis.call("XADD", KEYS[2], "MAXLEN", "~", maxlen, "*", "e", cmsgpack.pack({
        "recovered", message_id or ("malformed:" .. id), task or false, tonumber(ARGV[6]), false, ARGV[2],
        false, false}))
    end
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
