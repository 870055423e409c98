-- Materialises cron occurrences computed by the migrator into the minute slices.
-- KEYS: 1 epoch, 2 slice index, 3 cron index, 4 in-flight set, 5 dirty set, 6 live
--       timers per application
-- ARGV: 1 expected epoch, 2 slice key prefix, 3 the partition's key prefix (record.lua),
--       4 retention ms,
--       then per timer: id, version, materialised through ms, next materialisation ms
--       ('' when the schedule is exhausted), number of occurrences k, k occurrences
-- Returns the number of timers extended, or -1 when fenced.
-- A timer whose version moved since the migrator read it is left alone (the command
-- that moved it materialised its own occurrences). An exhausted schedule records its
-- last occurrence (fin), whose acknowledgement completes the timer; when that one is no
-- longer pending, the timer completes now (complete, misfire.lua, prepended).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
rec_init(ARGV[3], ARGV[4], KEYS[6])
local extended = 0
local i = 5
while i <= #ARGV do
  local id, ver, covered, refill, k = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
  local first = i + 5
  i = first + k
  local t = rec_get(id)
  if t and t.v == ver and t.st == 'scheduled' then
    local last = t.lst
    for j = first, first + k - 1 do
      local d = ARGV[j]
      rec_slice_add(ARGV[2], KEYS[2], d, tonumber(d), slice_member('c', ver, d, id))
      last = d
    end
    if k > 0 and not t.due then
      t.due = ARGV[first]
    end
    t.hz, t.lst = covered, last
    if refill ~= '' then
      redis.call('ZADD', KEYS[3], refill, id)
      rec_put(id, t)
    else
      redis.call('ZREM', KEYS[3], id)
      local pending = last and (
        redis.call('ZSCORE', ARGV[2] .. math.floor(tonumber(last) / 60000), slice_member('c', ver, last, id))
        or redis.call('ZSCORE', KEYS[4], ver .. ':' .. last .. ':' .. id))
      if pending then
        t.fin = last
        rec_put(id, t)
      else
        complete(t, id, KEYS[3], KEYS[5])
      end
    end
    extended = extended + 1
  elseif not t or t.st ~= 'scheduled' then
    redis.call('ZREM', KEYS[3], id)
  end
end
rec_flush()
return extended
