-- fetch: read up to ARGV[3] new entries of one queue without blocking, higher
-- priority lanes first, so under a backlog a worker always takes higher first.
-- (XREADGROUP over several streams would take COUNT from each: no order, and up to
-- three times the count.)
--
-- KEYS the queue's lane streams, highest priority first
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] count
-- Reply: {{lane index (1-based), {{entry id, {field, value...}}...}}...}
local left = tonumber(ARGV[3])
local out = {}
for i, stream in ipairs(KEYS) do
  local reply = redis.call("XREADGROUP", "GROUP", ARGV[1], ARGV[2], "COUNT", left,
                           "STREAMS", stream, ">")
  if reply then
    local entries = reply[1][2]
    out[#out + 1] = {i, entries}
    left = left - #entries
    if left <= 0 then break end
  end
end
return out
