-- Timer helpers, prepended (after record.lua) to apply.lua, claim.lua, recover.lua,
-- ack.lua and materialize.lua (one source for all). `t` is a timer's fields (rec_get).

-- Whether a cron timer has fired as often as it may (its max fires).
local function fired_out(t)
  return t.mx and tonumber(t.n or '0') >= tonumber(t.mx)
end

-- Whether a cron occurrence due at `d` that was missed still fires, by the timer's
-- policy: skip drops it; once fires the first occurrence missed in an outage and drops
-- the others missed by then (lf: when that late fire was taken, lfd: its due, which
-- still fires when a new owner re-drives it from the in-flight set); all fires it.
-- Changes `t` (the caller writes it).
local function missed_fires(t, d, now)
  if t.mp == 'skip' then
    return false
  end
  if t.mp == 'once' then
    if t.lfd and d == tonumber(t.lfd) then
      return true
    end
    if t.lf and d <= tonumber(t.lf) then
      return false
    end
    t.lf, t.lfd = now, string.format('%d', d)
  end
  return true
end

-- No occurrence of the live timer will fire any more (the next checkpoint writes its
-- tombstone: `dirty` is the partition's dirty set). Writes the timer.
local function complete(t, id, cron_index, dirty)
  redis.call('ZADD', dirty, 'NX', 'inf', id)
  t.st = 'completed'
  rec_put(id, t)
  redis.call('ZREM', cron_index, id)
end

-- The minute slice member of a fire: a one-shot timer's id (it has one pending fire),
-- or, for a cron occurrence, "\1version:due:id" (ids hold no control characters).
local function slice_member(kind, v, due, id)
  if kind == 'c' then
    return '\1' .. v .. ':' .. due .. ':' .. id
  end
  return id
end
