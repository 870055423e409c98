-- Restores timers of a partition from its state topic (a rebuild after Redis lost the
-- partition), applying the last checkpoint's fire watermark: a fire due at or before it
-- was acknowledged unless it was listed in flight.
-- KEYS: 1 epoch, 2 slice index, 3 in-flight set, 4 cron index, 5 dirty set,
--       6 applied offset, 7 checkpoint sequence, 8 live timers per application, 9 layout
--       version, 10 replay fence
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), 3 slice key prefix,
--       4 acked through ms, 5 retention ms, 6 applied offset to record ('' until the last
--       call), 7 checkpoint sequence to record, 8 layout version (recorded by every call),
--       9 the number k of replay fence strings that follow (field, value pairs; the last
--       call replaces the fence with them: keys.rs replay_fence), then per timer: id, m,
--       m due instants of its in-flight fires, n, n field/value pairs
-- Returns the number of timers restored, or -1 when fenced.
-- A call applied twice (retried after its reply was lost) leaves what the first left.
-- Rules (the state records are written at checkpoints, so they may trail the fires):
-- * a scheduled one-shot timer due at or before the watermark and not in flight fired;
--   it is restored fired (and its tombstone is owed: dirty);
-- * a scheduled cron timer is materialised again from the latest of the watermark, its
--   last acknowledged fire and its in-flight fires (the migrator does it at once);
-- * in-flight fires go back in flight: the trigger's recovery delivers them again.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
rec_init(ARGV[2], ARGV[5], KEYS[8])
redis.call('SET', KEYS[9], ARGV[8])
local through = tonumber(ARGV[4])
local done = 0
local fence = tonumber(ARGV[9])
local i = 10 + fence
while i <= #ARGV do
  local id = ARGV[i]
  local m = tonumber(ARGV[i + 1])
  local flights = i + 2
  local n = tonumber(ARGV[flights + m])
  local first = flights + m + 1
  i = first + 2 * n
  local old = rec_get(id)
  -- The marks of the record already there (a restore call retried after its reply was
  -- lost finds its own writes): where it is, its minute, its state.
  local t = {_bucket = old and old._bucket, _own = old and old._own, _done = old and old._done,
    _m = old and old._m, _st0 = old and old.st}
  for j = first, first + 2 * n - 1, 2 do
    t[ARGV[j]] = ARGV[j + 1]
  end
  local v, st, kind, due = t.v, t.st, t.k, t.due
  local latest = through
  for j = flights, flights + m - 1 do
    local d = tonumber(ARGV[j])
    redis.call('ZADD', KEYS[3], d, v .. ':' .. ARGV[j] .. ':' .. id)
    latest = math.max(latest, d)
  end
  if st == 'scheduled' and kind == 'o' and m == 0 then
    if tonumber(due) <= through then
      t.st = 'fired'
      redis.call('ZADD', KEYS[5], 'NX', 'inf', id)
    else
      rec_slice_add(ARGV[3], KEYS[2], due, tonumber(due), slice_member('o', v, due, id))
    end
  elseif st == 'scheduled' and kind == 'c' then
    if t.last then
      latest = math.max(latest, tonumber(t.last))
    end
    t.hz = string.format('%d', latest)
    t.lst, t.fin = nil, nil
    redis.call('ZADD', KEYS[4], 0, id)
  end
  rec_put(id, t)
  done = done + 1
end
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[6], ARGV[6])
  redis.call('SET', KEYS[7], ARGV[7])
  redis.call('DEL', KEYS[10])
  for j = 10, 9 + fence, 1000 do
    redis.call('HSET', KEYS[10], unpack(ARGV, j, math.min(j + 999, 9 + fence)))
  end
end
rec_flush()
return done
