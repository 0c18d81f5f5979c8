-- dead_letters: replay or remove dead letters of one queue, atomically. An id
-- no longer in the store (replayed or purged meanwhile) is skipped, so two
-- concurrent replays never run a message twice.
--
-- A replay appends a "replayed" event (core/events.py) per message, in the same step.
--
-- KEYS[1] ready stream or list  KEYS[2] dead letters zset  KEYS[3] dead letter data hash
-- KEYS[4] (replay) events stream
-- KEYS[4+i] (replay) record key of the i-th replayed message, deleted so that
--           get_result waits for the new attempt instead of the old dead letter
-- ARGV[1] action: "replay" | "remove" | "purge" (all)   ARGV[2] mode: "s" stream | "l" list
-- ARGV[3] (replay) events maxlen (0: no events)
-- ARGV[3..] remove: ids
-- ARGV[4..] replay: triples (dead letter id, encoded message to enqueue, its encoded
--           "replayed" event, or "" when events are off)
-- Reply: the number of dead letters replayed or removed.
if ARGV[1] == "purge" then
  local count = redis.call("ZCARD", KEYS[2])
  redis.call("DEL", KEYS[2], KEYS[3])
  return count
end
local done = 0
local step, first = 1, 3
if ARGV[1] == "replay" then step, first = 3, 4 end
local maxlen = tonumber(ARGV[3]) or 0
for i = first, #ARGV, step do
  local id = ARGV[i]
  if redis.call("HDEL", KEYS[3], id) == 1 then
    redis.call("ZREM", KEYS[2], id)
    if step == 3 then
      redis.call("DEL", KEYS[4 + (i - 1) / 3])
      if ARGV[2] == "l" then
        redis.call("LPUSH", KEYS[1], ARGV[i + 1])
      else
        redis.call("XADD", KEYS[1], "*", "m", ARGV[i + 1])
      end
      if maxlen > 0 then
        redis.call("XADD", KEYS[4], "MAXLEN", "~", maxlen, "*", "e", ARGV[i + 2])
      end
    end
    done = done + 1
  end
end
return done
