-- Timer helpers, prepended to apply.lua, claim.lua, recover.lua, ack.lua and
-- materialize.lua (one source for all).
-- `t` holds a timer's fields in this order: v, st, d, k, n, mx, mp, lf, fin, lfd.
local TIMER_FIELDS = {'v', 'st', 'd', 'k', 'n', 'mx', 'mp', 'lf', 'fin', 'lfd'}

-- Whether a cron occurrence due at `d` that was missed still fires, by the timer's
-- policy: skip drops it; once fires the first occurrence missed in an outage and drops
-- the others missed by then (lf: when that late fire was taken, lfd: its due, which
-- still fires when a new owner re-drives it from the in-flight set); all fires it.
local function missed_fires(tkey, t, d, now)
  if t[7] == 'skip' then
    return false
  end
  if t[7] == 'once' then
    if t[10] and d == tonumber(t[10]) then
      return true
    end
    if t[8] and d <= tonumber(t[8]) then
      return false
    end
    redis.call('HSET', tkey, 'lf', now, 'lfd', d)
  end
  return true
end

-- A live timer (scheduled or paused) is done: one fewer for its application (`apps`,
-- the partition's per-application count of live timers).
local function done(tkey, apps)
  local app = redis.call('HGET', tkey, 'a')
  if app then
    redis.call('HINCRBY', apps, app, -1)
  end
end

-- No occurrence of the live timer will fire any more (the next checkpoint writes its
-- tombstone: `dirty` is the partition's dirty set).
local function complete(tkey, id, retention, cron_index, dirty, apps)
  done(tkey, apps)
  redis.call('ZADD', dirty, 'NX', 'inf', id)
  redis.call('HSET', tkey, 'st', 'completed')
  redis.call('PEXPIRE', tkey, retention)
  redis.call('ZREM', cron_index, id)
end
