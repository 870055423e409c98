-- Applies one timer command to a partition, atomically and idempotently.
-- KEYS: 1 epoch, 2 applied offset, 3 timer hash, 4 slice index, 5 in-flight set, 6 cron index
-- ARGV: 1 expected epoch, 2 command offset, 3 op (create | update | pause | resume | cancel),
--       4 timer id, 5 request id, 6 retention ms, 7 slice key prefix,
--       8 kind (o one-shot | c cron), 9 due ms (one-shot due, or first cron occurrence),
--       10 stored definition ('' keeps the current one on update), 11 cron spec (JSON),
--       12 misfire (once | all | skip), 13 max fires (''), 14 materialised through ms,
--       15 next materialisation ms ('' when the schedule is exhausted), 16 origin ms (resume),
--       17.. cron occurrences to materialise
-- Returns {code, version, state, due, reason}; code is fenced | accepted | duplicate | rejected.
-- Invariants:
-- * the version of a timer is the offset of the last command that changed it, so every
--   fire member "version:due:id" of an older version is stale and never claimed;
-- * a command at or below the timer's version, or repeating its last request id, is a
--   duplicate: a replayed batch changes nothing;
-- * a scheduled one-shot timer has exactly one member (in a slice or in flight); cron
--   members of older versions are dropped lazily when their minute is claimed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced', '', '', '', 'partition epoch moved: another instance owns it'}
end
local off = tonumber(ARGV[2])
if off > tonumber(redis.call('GET', KEYS[2]) or '-1') then
  redis.call('SET', KEYS[2], ARGV[2])
end
local id, tkey = ARGV[4], KEYS[3]
local t = redis.call('HMGET', tkey, 'v', 'st', 'rq', 'due', 'k')
local v, st, rq, due, kind = t[1], t[2], t[3], t[4], t[5]
local op = ARGV[3]
if not ({create = 1, update = 1, pause = 1, resume = 1, cancel = 1})[op] then
  return {'rejected', '', '', '', 'unknown operation ' .. op}
end

local function reply(code, reason)
  local r = redis.call('HMGET', tkey, 'v', 'st', 'due')
  return {code, r[1] or '', r[2] or '', r[3] or '', reason or ''}
end

local function slice_add(d, member)
  local minute = math.floor(tonumber(d) / 60000)
  redis.call('ZADD', ARGV[7] .. minute, d, member)
  redis.call('ZADD', KEYS[4], minute, minute)
end

-- Removes the pending member of a scheduled one-shot timer (cron members go lazily).
local function drop_current()
  if st ~= 'scheduled' or kind == 'c' or not due then
    return
  end
  local member = v .. ':' .. due .. ':' .. id
  local skey = ARGV[7] .. math.floor(tonumber(due) / 60000)
  redis.call('ZREM', skey, member)
  redis.call('ZREM', KEYS[5], member)
end

-- Stores the schedule of the command; materialises it when `live`.
local function install(live)
  redis.call('HSET', tkey, 'k', ARGV[8])
  if ARGV[8] == 'o' then
    redis.call('HSET', tkey, 'due', ARGV[9])
    redis.call('HDEL', tkey, 'sc', 'mp', 'mx', 'hz', 'lst', 'fin')
    redis.call('ZREM', KEYS[6], id)
    if live then
      slice_add(ARGV[9], ARGV[2] .. ':' .. ARGV[9] .. ':' .. id)
    end
    return
  end
  redis.call('HSET', tkey, 'sc', ARGV[11], 'mp', ARGV[12], 'hz', ARGV[14], 'due', ARGV[9])
  redis.call('HDEL', tkey, 'fin', 'lst')
  if ARGV[13] ~= '' then
    redis.call('HSET', tkey, 'mx', ARGV[13])
  else
    redis.call('HDEL', tkey, 'mx')
  end
  if not live then
    return
  end
  local last
  for i = 17, #ARGV do
    slice_add(ARGV[i], ARGV[2] .. ':' .. ARGV[i] .. ':' .. id)
    last = ARGV[i]
  end
  if last then
    redis.call('HSET', tkey, 'lst', last)
  end
  if ARGV[15] == '' then
    redis.call('ZREM', KEYS[6], id)
    if last then
      redis.call('HSET', tkey, 'fin', last)
    end
  else
    redis.call('ZADD', KEYS[6], ARGV[15], id)
  end
end

if v then
  if rq == ARGV[5] then
    return reply('duplicate', 'request ' .. rq .. ' was applied already')
  end
  if off <= tonumber(v) then
    return reply('duplicate', 'the timer is at version ' .. v .. ', newer than this command')
  end
end
local live = st == 'scheduled' or st == 'paused'
if op == 'create' then
  if live then
    return reply('rejected', 'a timer with this id is ' .. st .. '; update or cancel it first')
  end
  redis.call('DEL', tkey)
  redis.call('HSET', tkey, 'v', ARGV[2], 'st', 'scheduled', 'rq', ARGV[5], 'd', ARGV[10], 'n', 0)
  install(true)
  return reply('accepted')
end
if not v then
  return {'rejected', '', '', '', 'unknown timer'}
end
if op == 'cancel' and st == 'cancelled' then
  return reply('duplicate', 'the timer was cancelled already')
end
if op == 'pause' and st == 'paused' then
  return reply('duplicate', 'the timer is paused already')
end
if op == 'resume' and st == 'scheduled' then
  return reply('duplicate', 'the timer is not paused')
end
if not live then
  return reply('rejected', 'the timer is ' .. st .. '; create it again')
end
drop_current()
redis.call('HSET', tkey, 'v', ARGV[2], 'rq', ARGV[5])
if op == 'update' then
  if ARGV[10] ~= '' then
    redis.call('HSET', tkey, 'd', ARGV[10])
  end
  install(st == 'scheduled')
elseif op == 'pause' then
  redis.call('HSET', tkey, 'st', 'paused')
  redis.call('ZREM', KEYS[6], id)
elseif op == 'resume' then
  redis.call('HSET', tkey, 'st', 'scheduled')
  if kind == 'c' then
    -- Occurrences from the resume on; the migrator materialises them at once.
    redis.call('HSET', tkey, 'hz', tonumber(ARGV[16]) - 1)
    redis.call('HDEL', tkey, 'fin', 'due')
    redis.call('ZADD', KEYS[6], 0, id)
  else
    slice_add(due, ARGV[2] .. ':' .. due .. ':' .. id)
  end
elseif op == 'cancel' then
  redis.call('HSET', tkey, 'st', 'cancelled')
  redis.call('ZREM', KEYS[6], id)
  redis.call('PEXPIRE', tkey, ARGV[6])
end
return reply('accepted')
