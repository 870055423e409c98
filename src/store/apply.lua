-- Applies one timer command to a partition, atomically and idempotently.
-- KEYS: 1 epoch, 2 applied offset, 3 timer hash, 4 slice index, 5 in-flight set
-- ARGV: 1 expected epoch, 2 command offset, 3 op (create | cancel), 4 timer id,
--       5 request id, 6 due ms, 7 stored definition, 8 retention ms, 9 slice key prefix
-- Returns {code, version, state, due, reason}; code is fenced | accepted | duplicate | rejected.
-- Invariants: a scheduled timer has exactly one slice member "version:due:id" (or an
-- in-flight one once claimed); the version is the offset of the command that created it,
-- so a replay of the same record recreates the same fire ids.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced', '', '', '', 'partition epoch moved: another instance owns it'}
end
local cur = tonumber(redis.call('GET', KEYS[2]) or '-1')
if tonumber(ARGV[2]) > cur then
  redis.call('SET', KEYS[2], ARGV[2])
end
local t = redis.call('HMGET', KEYS[3], 'v', 'st', 'rq', 'due')
local v, st, rq, due = t[1], t[2], t[3], t[4]
local op = ARGV[3]
if op == 'create' then
  if v and rq == ARGV[5] then
    return {'duplicate', v, st, due, ''}
  end
  if st == 'scheduled' then
    return {'rejected', v, st, due, 'a timer with this id is already scheduled; cancel it first'}
  end
  local minute = math.floor(tonumber(ARGV[6]) / 60000)
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'v', ARGV[2], 'st', 'scheduled', 'rq', ARGV[5], 'due', ARGV[6], 'd', ARGV[7])
  redis.call('ZADD', ARGV[9] .. minute, ARGV[6], ARGV[2] .. ':' .. ARGV[6] .. ':' .. ARGV[4])
  redis.call('ZADD', KEYS[4], minute, minute)
  return {'accepted', ARGV[2], 'scheduled', ARGV[6], ''}
elseif op == 'cancel' then
  if not v then
    return {'rejected', '', '', '', 'unknown timer'}
  end
  if st == 'cancelled' then
    return {'duplicate', v, st, due, ''}
  end
  if st == 'fired' then
    return {'rejected', v, st, due, 'the timer has already fired'}
  end
  local member = v .. ':' .. due .. ':' .. ARGV[4]
  local minute = math.floor(tonumber(due) / 60000)
  local skey = ARGV[9] .. minute
  redis.call('ZREM', skey, member)
  if redis.call('EXISTS', skey) == 0 then
    redis.call('ZREM', KEYS[4], minute)
  end
  redis.call('ZREM', KEYS[5], member)
  redis.call('HSET', KEYS[3], 'st', 'cancelled')
  redis.call('PEXPIRE', KEYS[3], ARGV[8])
  return {'accepted', v, 'cancelled', due, ''}
end
return {'rejected', '', '', '', 'unknown operation ' .. op}
