-- enqueue_plain: plain messages of one lane (no delay, idempotency key, record or
-- unique key) with their "enqueued" events, when events are on: each message and its
-- event in one step. One call per message, or per chunk of a bulk enqueue.
-- (enqueue.lua does everything else; with events off a plain message is a bare XADD.)
-- Two arguments per message instead of enqueue.lua's nine: most of a script call's
-- cost is turning its arguments into Lua values.
--
-- KEYS[1] ready stream or list   KEYS[2] events stream
-- ARGV[1] mode: "s" stream | "l" list   ARGV[2] events maxlen
-- ARGV[3..] pairs (encoded message, its encoded "enqueued" event)
-- Reply: how many messages were written
local list = ARGV[1] == "l"
for i = 3, #ARGV, 2 do
  if list then
    redis.call("LPUSH", KEYS[1], ARGV[i])
  else
    redis.call("XADD", KEYS[1], "*", "m", ARGV[i])
  end
  redis.call("XADD", KEYS[2], "*", "e", ARGV[i + 1])
end
redis.call("XTRIM", KEYS[2], "MAXLEN", "~", ARGV[2])
return (#ARGV - 2) / 2
