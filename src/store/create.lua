-- Creates new one-shot timers (the intake's common command: the owner sends a run of
-- them here instead of to apply.lua, src/store/apply.rs), atomically: a timer is written
-- as apply.lua writes a one-shot timer it holds no record of, with the record the owner
-- packed whole (src/store/fresh.rs, its definition's prefix numbered as the partition's
-- `dp` numbers it), and only that. Redis is called per run of timers, not per timer: one
-- look-up of the own keys and one of the bucket, then one write per place, per minute's
-- slice and per list.
-- KEYS: 1 epoch, 2 applied offset, 3 slice index, 4 dirty set, 5 deferred timers by
--       first offset, 6 live timers per application, 7 the states the caller writes
--       (writing.lua's hash)
-- ARGV: 1 expected epoch, 2 retention ms, 3 slice key prefix, 4 the applied offset Redis
--       must hold at least (-1 unknown), 5 now ms, 6 defer ms, 7 the partition's key
--       prefix, 8 '1' when the caller writes the states of the timers created (else the
--       checkpoint does), 9 the number k of definition prefixes, then k pairs: the
--       number the records use ('': number it now), the prefix; then per timer 5: command
--       offset, timer id, due ms, record, application ('': the previous timer's)
-- Returns {'fenced'} (as apply.lua); {'prefixes'} when a prefix's number is not the
-- partition's (nothing was done: the owner drops what it knew); else {n, {m...}, i, j,
-- ...}: n timers whose states the caller writes (with ARGV[8] = '1': those due after
-- now + defer, in order; their entry in KEYS[7] is named by the offset of the first timer
-- created), the number of each prefix (0: the partition numbers no more), then the group
-- numbers (1-based) of the timers Redis holds a record of: nothing was done for them;
-- the owner applies them through apply.lua, which decides (the owner sends here only
-- timers no other command of the batch names, so they can follow the rest).
-- The state of a new timer goes where apply.lua sends it: due within the defer time, the
-- deferred set; else to the caller (ARGV[8] = '1'), else the dirty set.
if rec_fenced(KEYS[1], ARGV[1], KEYS[2], ARGV[4]) then
  return {'fenced'}
end
rec_init(ARGV[7], ARGV[2], KEYS[6])
local dp, k = REC.base .. 'dp', tonumber(ARGV[9])
local numbers = {}
for i = 10, 8 + 2 * k, 2 do
  if ARGV[i] ~= '' and redis.call('HGET', dp, '#' .. ARGV[i]) ~= ARGV[i + 1] then
    return {'prefixes'}
  end
end
for i = 10, 8 + 2 * k, 2 do
  numbers[#numbers + 1] = ARGV[i] ~= '' and tonumber(ARGV[i]) or rec_dp_id(ARGV[i + 1]) or 0
end
local at = 10 + 2 * k

-- Redis calls `cmd` (with `key`, then `opt`, when given) with the items of `list` after
-- them, 1000 at a time (Lua's unpack is bounded); answers the sum of the integer replies.
local function batched(cmd, key, opt, list)
  local n = 0
  for i = 1, #list, 1000 do
    local j, r = math.min(i + 999, #list), nil
    if opt then
      r = redis.call(cmd, key, opt, unpack(list, i, j))
    elseif key then
      r = redis.call(cmd, key, unpack(list, i, j))
    else
      r = redis.call(cmd, unpack(list, i, j))
    end
    n = n + (tonumber(r) or 0)
  end
  return n
end

-- The timers Redis holds a record of (by group number), in their own keys or the bucket.
local ids, own_keys, held = {}, {}, {}
local own_prefix = REC.base .. 't:'
for a = at, #ARGV, 5 do
  ids[#ids + 1] = ARGV[a + 1]
  own_keys[#own_keys + 1] = own_prefix .. ARGV[a + 1]
end
if #ids > 0 and batched('EXISTS', nil, nil, own_keys) > 0 then
  for i, key in ipairs(own_keys) do
    held[i] = redis.call('EXISTS', key) == 1
  end
end
for i = 1, #ids, 1000 do
  local found = redis.call('HMGET', REC.bucket, unpack(ids, i, math.min(i + 999, #ids)))
  for j = 1, #found do
    held[i + j - 1] = held[i + j - 1] or found[j] ~= false
  end
end

local out = {0, numbers}
local app, n_app, writing = nil, 0, ARGV[8] == '1'
local soon, pm = tonumber(ARGV[5]) + tonumber(ARGV[6]), rec_meta().pm
-- Field/value pairs for the bucket and key/value pairs for own keys; per minute (its
-- decimal string) its slice's score/member pairs, and the minutes in order.
local bucket, own, slices, minutes = {}, {}, {}, {}
-- (offset, id) pairs for the deferred and the dirty sets; ids the caller writes.
local deferred, dirty, owed = {}, {}, {}
-- The highest offset created (a decimal string), and the first; the minute of the last.
local top, first, m, slice = nil, nil, nil, nil
for i, id in ipairs(ids) do
  local a = at + (i - 1) * 5
  if ARGV[a + 4] ~= '' and ARGV[a + 4] ~= app then
    if n_app > 0 then
      rec_tally(app, nil, 'scheduled', n_app)
    end
    app, n_app = ARGV[a + 4], 0
  end
  if held[i] then
    out[#out + 1] = i
  else
    local off, due_arg = ARGV[a], ARGV[a + 2]
    local due = tonumber(due_arg)
    n_app = n_app + 1
    if math.floor(due / 60000) ~= m then
      m = math.floor(due / 60000)
      local ms = string.format('%d', m)
      slice = slices[ms]
      if not slice then
        slice = {}
        slices[ms] = slice
        minutes[#minutes + 1] = ms
        minutes[#minutes + 1] = ms
      end
    end
    slice[#slice + 1] = due_arg
    slice[#slice + 1] = id
    if m > pm then
      bucket[#bucket + 1] = id
      bucket[#bucket + 1] = ARGV[a + 3]
      rec_count(m, 1)
    else
      own[#own + 1] = own_keys[i]
      own[#own + 1] = ARGV[a + 3]
    end
    local list = due <= soon and deferred or (not writing and dirty)
    if list then
      list[#list + 1] = off
      list[#list + 1] = id
    else
      owed[#owed + 1] = id
    end
    first = first or off
    if not top or #off > #top or (#off == #top and off > top) then
      top = off
    end
  end
end
if n_app > 0 then
  rec_tally(app, nil, 'scheduled', n_app)
end

batched('HSET', REC.bucket, nil, bucket)
batched('MSET', nil, nil, own)
for ms, list in pairs(slices) do
  batched('ZADD', ARGV[3] .. ms, nil, list)
end
batched('ZADD', KEYS[3], nil, minutes)
batched('ZADD', KEYS[5], 'LT', deferred)
batched('ZADD', KEYS[4], 'LT', dirty)
if #owed > 0 then
  redis.call('HSET', KEYS[7], first, table.concat(owed, '\n'))
end
if top and tonumber(top) > tonumber(redis.call('GET', KEYS[2]) or '-1') then
  redis.call('SET', KEYS[2], top)
end
rec_flush()
out[1] = #owed
return out
