-- fetch: take up to ARGV[3] new messages of one queue without blocking, higher
-- priority lanes first, so under a backlog a worker always takes higher first.
-- (XREADGROUP over several streams would take COUNT from each: no order, and up to
-- three times the count.)
--
-- Reliable mode (ARGV[4] "s"): XREADGROUP from each lane's stream; the entries stay
-- pending, owned by the consumer, until settled. Fast mode (ARGV[4] "l"): RPOP with a
-- count from each lane's list; what is popped is the worker's alone and is lost if it
-- dies before settling it (at-most-once).
--
-- KEYS the queue's lane streams (reliable) or lists (fast), highest priority first
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] count  ARGV[4] mode: "s" stream | "l" list
-- Reply: {{lane index (1-based), entries}...}, entries {{entry id, {field, value...}}...}
-- for streams, {payload...} for lists
local left = tonumber(ARGV[3])
local list = ARGV[4] == "l"
local out = {}
for i, key in ipairs(KEYS) do
  if list then
    local popped = redis.call("RPOP", key, left)
    if popped then
      out[#out + 1] = {i, popped}
      left = left - #popped
      if left <= 0 then break end
    end
  else
    local reply = redis.call("XREADGROUP", "GROUP", ARGV[1], ARGV[2], "COUNT", left,
                             "STREAMS", key, ">")
    if reply then
      local entries = reply[1][2]
      out[#out + 1] = {i, entries}
      left = left - #entries
      if left <= 0 then break end
    end
  end
end
return out
