-- Creates new one-shot timers (the intake's common command: the owner
-- sends a run of them here instead of to apply.lua, src/store/apply.rs), atomically: a
-- timer is written as apply.lua writes a one-shot timer it holds no record of, with what
-- the owner packed (rec_put_fresh), and only that. Seven arguments and two look-ups per
-- timer, none of apply.lua's general path: about 0.7 of its instructions per command.
-- KEYS: 1 epoch, 2 applied offset, 3 slice index, 4 dirty set, 5 deferred timers by
--       first offset, 6 live timers per application, 7 the states the caller writes
--       (writing.lua's hash)
-- ARGV: 1 expected epoch, 2 retention ms, 3 slice key prefix, 4 the applied offset Redis
--       must hold at least (-1 unknown), 5 now ms, 6 defer ms, 7 the partition's key
--       prefix, 8 '1' when the caller writes the states of the timers created (else the
--       checkpoint does), then per timer 7: command offset, timer id, due ms, stored
--       definition, head and tail of its record (src/store/fresh.rs), application ('':
--       the previous timer's)
-- Returns {'fenced'} (as apply.lua), or {n, i, j, ...}: n timers whose states the caller
-- writes (with ARGV[8] = '1': those due after now + defer, in order; their entry in KEYS[7]
-- is named by the offset of the first timer created), then the group numbers (1-based)
-- of the timers Redis holds a record of: nothing was done for them; the owner applies
-- them through apply.lua, which decides (the owner sends here only timers no other
-- command of the batch names, so they can follow the rest).
-- The state of a new timer goes where apply.lua sends it: due within the defer time, the
-- deferred set; else to the caller (ARGV[8] = '1'), else the dirty set.
if rec_fenced(KEYS[1], ARGV[1], KEYS[2], ARGV[4]) then
  return {'fenced'}
end
rec_init(ARGV[7], ARGV[2], KEYS[6])
local app, writing = nil, ARGV[8] == '1'
local soon = tonumber(ARGV[5]) + tonumber(ARGV[6])
local out = {0}
-- (offset, id) pairs for the deferred and the dirty sets; ids the caller writes.
local deferred, dirty, owed = {}, {}, {}
-- The highest offset created (a decimal string), and the first.
local top, first = nil, nil
for a = 9, #ARGV, 7 do
  local off, id, due_arg = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if ARGV[a + 6] ~= '' then
    app = ARGV[a + 6]
  end
  if redis.call('EXISTS', REC.base .. 't:' .. id) == 1
      or redis.call('HEXISTS', REC.bucket, id) == 1 then
    out[#out + 1] = (a - 9) / 7 + 1
  else
    local due = tonumber(due_arg)
    rec_put_fresh(id, due, app, ARGV[a + 4], ARGV[a + 3], ARGV[a + 5])
    rec_slice_add(ARGV[3], KEYS[3], due_arg, due, id)
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
for key, list in pairs({[KEYS[5]] = deferred, [KEYS[4]] = dirty}) do
  for i = 1, #list, 1000 do
    redis.call('ZADD', key, 'LT', unpack(list, i, math.min(i + 999, #list)))
  end
end
if #owed > 0 then
  redis.call('HSET', KEYS[7], first, table.concat(owed, '\n'))
end
if top and tonumber(top) > tonumber(redis.call('GET', KEYS[2]) or '-1') then
  redis.call('SET', KEYS[2], top)
end
rec_flush()
out[1] = #owed
return out
