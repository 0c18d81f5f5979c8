-- rate: take tokens from a rate limit's token bucket, shared by every worker. The
-- bucket refills continuously at ARGV[2] tokens per ms up to ARGV[1] tokens, by the
-- Redis server's clock (TIME), so the workers' clocks do not matter. One call takes
-- tokens for a batch of messages of the bucket: up to ARGV[3], as many as it holds.
--
-- Refusing reserves nothing: no token is ever taken for a message that does not run.
-- It only moves the bucket's deferral horizon (field d), a hint: the refused messages
-- are told to come back one token interval apart, after the ones refused before them,
-- so that a backlog comes back at the rate instead of all at once when the next token
-- is due (when all but one would be refused again: polling in disguise). A message
-- that comes back takes a token like any other, or is refused again.
--
-- A token due within GRACE_MS counts as there already: it absorbs the rounding of due
-- times to whole ms and small differences between a worker's clock (which schedules a
-- deferred message) and the server's. Borrowed time is paid back by the next take.
--
-- TIME before a write is fine: scripts replicate their effects (the default since
-- Redis 5, the only mode since 7). Only KEYS[1] is touched, so it is cluster-safe.
--
-- KEYS[1] the bucket: a hash {t tokens, ts ms of the last refill, d deferral horizon ms}
-- ARGV[1] capacity in tokens (>= 1)  ARGV[2] refill in tokens per ms (> 0)
-- ARGV[3] tokens wanted (>= 0)
-- Reply: {granted, wait ms}. The first `granted` of the wanted ones may run now; the
-- rest should come back in `wait` ms, one token interval (1 / ARGV[2] ms) apart.
-- wait is 0 when every wanted token was granted, else at least 1.
local GRACE_MS = 5
local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local capacity, rate, wanted = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local held = redis.call("HMGET", KEYS[1], "t", "ts", "d")
local tokens = tonumber(held[1]) or capacity
local last = tonumber(held[2]) or now
local horizon = tonumber(held[3]) or 0
-- A server clock that went back (a failover) refills nothing until it moves on again.
if now > last then tokens = tokens + (now - last) * rate end
if tokens > capacity then tokens = capacity end
local granted = math.floor(tokens + GRACE_MS * rate)
if granted > wanted then granted = wanted end
if granted < 0 then granted = 0 end
tokens = tokens - granted
local wait = 0
local refused = wanted - granted
if refused > 0 then
  local due = now + (1 - tokens) / rate
  if horizon > due then due = horizon end
  horizon = due + refused / rate
  wait = math.max(1, math.ceil(due - now))
end
redis.call("HSET", KEYS[1], "t", string.format("%.6f", tokens), "ts", string.format("%.3f", now),
           "d", string.format("%.3f", horizon))
-- Kept while it means something: until full again, and past the horizon.
local keep = (capacity - tokens) / rate
if horizon - now > keep then keep = horizon - now end
redis.call("PEXPIRE", KEYS[1], string.format("%d", math.min(math.ceil(keep), 315360000000) + 1000))
return {granted, wait}
