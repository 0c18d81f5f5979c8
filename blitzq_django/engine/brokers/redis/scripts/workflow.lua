-- workflow.lua: one atomic step of one workflow: start it, record a member's outcome
-- and advance, or cancel it. engine/core/workflow.py has the same steps in Python (the
-- memory store's) and the fields of the hash; docs/architecture.md "Workflows" the
-- protocol. Every key is the workflow's (one hash tag); nothing here touches a queue.
--
-- KEYS[1]  the workflow's hash        bq:{ns:wf:<id>}
-- KEYS[2]  its channel                bq:{ns:wf:<id>}:done  (published when final)
-- ARGV[1]  the step:
--   "start"   ARGV[2] workflow id, ARGV[3] now ms, ARGV[4] home queue, ARGV[5] on_error
--             member or "", ARGV[6] n (nodes), ARGV[7 .. 6+n] node shapes, then
--             (node, member) pairs
--   "settle"  ARGV[2] node, ARGV[3] its record state, ARGV[4] value, ARGV[5] outcome,
--             ARGV[6] failure, ARGV[7] now ms, ARGV[8] seconds kept once final
--   "cancel"  ARGV[2] now ms, ARGV[3] seconds kept once final
-- Reply (start, settle): {status (new | again | gone), state, {node, member, input
--   index (0: none), ...}, {input, ...}, finished (0/1), home, root kind, created ms}
-- Reply (cancel): {state before ("" when unknown), {member, ...}}

local W = KEYS[1]
local op = ARGV[1]

local shapes = {}
local function shape(n)
  local s = shapes[n]
  if s then return s end
  local t = redis.call("HGET", W, "t:" .. n)
  local k, p, pos, ch, size, prev, flags =
    string.match(t, "(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)")
  s = {kind = k, parent = tonumber(p), pos = tonumber(pos), children = tonumber(ch),
       size = tonumber(size), prev = tonumber(prev), af = (flags == "a")}
  shapes[n] = s
  return s
end

local function children(n)
  local out, c = {}, n + 1
  for i = 1, shape(n).children do
    out[i] = c
    c = c + shape(c).size
  end
  return out
end

local function array_head(n)
  if n < 16 then return string.char(0x90 + n) end
  if n < 65536 then return string.char(0xdc, math.floor(n / 256), n % 256) end
  return string.char(0xdd, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end

local values = {}
local function value(n)
  local v = values[n]
  if v then return v end
  v = redis.call("HGET", W, "v:" .. n)
  if not v then
    local s = shape(n)
    if s.kind == "C" then
      local ch = children(n)
      v = value(ch[#ch])
    elseif s.kind == "G" then
      local parts = {}
      for i, c in ipairs(children(n)) do parts[i] = value(c) end
      v = array_head(#parts) .. table.concat(parts)
    elseif s.kind == "D" then
      v = value(n + 1 + shape(n + 1).size)
    else
      v = "\192"  -- msgpack nil
    end
  end
  values[n] = v
  return v
end

local inputs_of = {}
local function input_of(n)  -- the value of the step before n, or false
  local v = inputs_of[n]
  if v ~= nil then return v end
  local s = shape(n)
  if s.parent < 0 then
    v = false
  else
    local p = shape(s.parent)
    if p.kind == "C" and s.pos > 0 then
      v = value(s.prev)
    elseif p.kind == "D" and s.pos == 1 then
      v = value(s.parent + 1)
    else
      v = input_of(s.parent)
    end
  end
  inputs_of[n] = v
  return v
end

local function task_nodes(n, out)  -- what a launch of n starts now
  local s = shape(n)
  if s.kind == "T" then
    out[#out + 1] = n
  elseif s.kind == "G" then
    for _, c in ipairs(children(n)) do task_nodes(c, out) end
  else
    task_nodes(n + 1, out)
  end
  return out
end

local function store_launches(at, ids)
  local text = {}
  for i, n in ipairs(ids) do
    text[i] = tostring(n)
    redis.call("HSET", W, "l:" .. n, "1")
  end
  redis.call("HSET", W, "L:" .. at, table.concat(text, ","))
end

local function stored_launches(at)
  local ids = {}
  local text = redis.call("HGET", W, "L:" .. at)
  if text then
    for id in string.gmatch(text, "[^,]+") do
      ids[#ids + 1] = tonumber(id) or id
    end
  end
  return ids
end

local function reply(status, state, ids, finished)
  local flat, inputs, index = {}, {}, {}
  for _, n in ipairs(ids) do
    -- A step that has its outcome already is not sent again: only a late replay of the
    -- step before it (a dead letter replayed) asks for it after that.
    if redis.call("HEXISTS", W, "s:" .. n) == 0 then
    local member, input
    if n == "e" then
      member = redis.call("HGET", W, "m:e")
      input = redis.call("HGET", W, "fail")
    else
      member = redis.call("HGET", W, "m:" .. n)
      input = input_of(n)
    end
    local at = 0
    if input then
      at = index[input]
      if not at then
        inputs[#inputs + 1] = input
        at = #inputs
        index[input] = at
      end
    end
    flat[#flat + 1] = tostring(n)
    flat[#flat + 1] = member
    flat[#flat + 1] = at
    end
  end
  local about = redis.call("HMGET", W, "home", "created")
  return {status, state, flat, inputs, finished, about[1] or "", shape(0).kind,
          tonumber(about[2]) or 0}
end

-- Complete node n (ok or failed) and its ancestors as far as it goes, adding the task
-- nodes to launch to ids; the workflow's final state when the root completes, else "".
local function walk(n, ok, failure, ids)
  while true do
    local s = shape(n)
    if s.parent < 0 then
      if ok then return "succeeded" end
      return "failed"
    end
    local p = s.parent
    local ps = shape(p)
    if ps.kind == "C" then
      if ok and s.pos < ps.children - 1 then
        task_nodes(n + s.size, ids)
        return ""
      end
    elseif ps.kind == "G" then
      local counted = true
      if not ok then
        local g = nil
        if ps.parent >= 0 then g = shape(ps.parent) end
        if g == nil or g.kind ~= "D" or ps.pos ~= 0 or not g.af then
          counted = false
        else
          redis.call("HSETNX", W, "v:" .. n, failure)  -- its error in place of its result
          ok = true
        end
      end
      if counted then
        local done = redis.call("HINCRBY", W, "c:" .. p, 1)
        if done < ps.children then return "" end
      end
    elseif ps.kind == "D" and s.pos == 0 and ok then
      task_nodes(n + s.size, ids)
      return ""
    end
    n = p
  end
end

if op == "start" then
  if redis.call("HEXISTS", W, "state") == 1 then
    return reply("again", redis.call("HGET", W, "state"), stored_launches("start"), 0)
  end
  local n = tonumber(ARGV[6])
  local total = 0
  redis.call("HSET", W, "id", ARGV[2], "state", "running", "created", ARGV[3],
             "home", ARGV[4], "done", 0)
  for i = 0, n - 1 do
    local t = ARGV[7 + i]
    redis.call("HSET", W, "t:" .. i, t)
    if string.sub(t, 1, 1) == "T" then total = total + 1 end
  end
  redis.call("HSET", W, "total", total)
  local j = 7 + n
  while j < #ARGV do
    redis.call("HSET", W, "m:" .. ARGV[j], ARGV[j + 1])
    j = j + 2
  end
  if ARGV[5] ~= "" then redis.call("HSET", W, "m:e", ARGV[5]) end
  local ids = task_nodes(0, {})
  store_launches("start", ids)
  return reply("new", "running", ids, 0)
end

if op == "settle" then
  if redis.call("HEXISTS", W, "state") == 0 then
    return {"gone", "", {}, {}, 0, "", "", 0}
  end
  local at, state = ARGV[2], ARGV[3]
  if redis.call("HSETNX", W, "s:" .. at, state) == 0 then
    -- Recorded before: this step ran again. The same launches, again (deduplicated).
    local finished = 0
    if redis.call("HGET", W, "F") == at then finished = 1 end
    return reply("again", redis.call("HGET", W, "state"), stored_launches(at), finished)
  end
  redis.call("HSET", W, "o:" .. at, ARGV[5])
  if state == "succeeded" then
    redis.call("HSET", W, "v:" .. at, ARGV[4])
  else
    redis.call("HSET", W, "v:" .. at, ARGV[6])
  end
  local current = redis.call("HGET", W, "state")
  if at == "e" then
    return reply("new", current, {}, 0)
  end
  redis.call("HINCRBY", W, "done", 1)
  if current ~= "running" then
    store_launches(at, {})
    return reply("new", current, {}, 0)
  end
  local ids = {}
  local final = walk(tonumber(at), state == "succeeded", ARGV[6], ids)
  local finished = 0
  if final ~= "" then
    finished = 1
    redis.call("HSET", W, "state", final, "finished", ARGV[7], "F", at)
    if final == "failed" then
      redis.call("HSETNX", W, "fail", ARGV[6])
      if redis.call("HEXISTS", W, "m:e") == 1 then ids[#ids + 1] = "e" end
    end
    redis.call("EXPIRE", W, tonumber(ARGV[8]))
    redis.call("PUBLISH", KEYS[2], final)
    current = final
  end
  store_launches(at, ids)
  return reply("new", current, ids, finished)
end

if op == "cancel" then
  local before = redis.call("HGET", W, "state")
  if not before then return {"", {}} end
  if before ~= "running" then return {before, {}} end
  redis.call("HSET", W, "state", "cancelled", "finished", ARGV[2])
  redis.call("EXPIRE", W, tonumber(ARGV[3]))
  redis.call("PUBLISH", KEYS[2], "cancelled")
  -- The steps sent and not finished, read from the launch marks (not the tree, so a
  -- workflow whose state is damaged can still be cancelled).
  local out = {}
  for _, field in ipairs(redis.call("HKEYS", W)) do
    if string.sub(field, 1, 2) == "l:" then
      local n = string.sub(field, 3)
      if redis.call("HEXISTS", W, "s:" .. n) == 0 then
        local member = redis.call("HGET", W, "m:" .. n)
        if member then out[#out + 1] = member end
      end
    end
  end
  return {before, out}
end

return redis.error_reply("workflow.lua: unknown step " .. tostring(op))
