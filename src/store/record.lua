-- Timer records, part 1 of 2 (this file, then place.lua), prepended to every script that
-- reads or writes timers (one source): what a record holds and how it is packed.
-- A record is a timer's fields packed with cmsgpack in the order of REC_FIELDS (rec_pack).
-- Invariants:
-- * rec_get answers the fields as strings, as HMGET would (integers in decimal);
-- * the partition's live count per application (`apps` hash) moves with rec_tally (a
--   timer becoming live or done) and is written by rec_flush;
-- * `BASE ac` counts timers per state and application (field `STATE:APP`): scheduled and
--   paused are the timers in that state now; a done state counts the timers that reached
--   it since the partition was last rebuilt (done records expire unseen). Every state
--   change goes through rec_put or rec_done_raw, which tally it (rec_get remembers the
--   state read in `_st0`);
-- * a record's history is `h` (packed list of entries, rec_hist_add), then `lx`, the last
--   fire's entry (packed), which is not in `h`: the fire path writes `lx` alone, and the
--   next entry folds it into `h` (rec_hist_push, rec_fire_push). `h` holds at most the
--   last REC.hist.n entries, none older than REC.hist.ttl ms when it was written.
-- Every script that calls rec_put, rec_done_raw or rec_live_move calls rec_flush before it
-- returns.
-- (`h`: the history; `lx`: the last fire, a history entry.)
-- (`fo`: the offset of the last FIRE_NOW applied.)
-- The standard globals the scripts use, as locals of the whole library: a function's
-- global is looked up in its library's table and then, through a metatable, in Redis's
-- (about 1,000 instructions per claimed fire). A library's top level runs before they
-- exist (only `redis` is there, and not the one calls see), so rec_fresh sets them at the
-- first call from rec_globals, which is compiled before the locals shadow the globals.
local function rec_globals()
  return redis, tonumber, tostring, string, math, table, unpack, cmsgpack, cjson, ipairs,
    pairs, next, type, assert, error
end
-- What registers the library's functions (src/store/scripts.rs; nil in a plain script).
local rec_register = redis.register_function
local redis, tonumber, tostring, string, math, table, unpack, cmsgpack, cjson, ipairs,
  pairs, next, type, assert, error
local REC_FIELDS = {'v', 'st', 'rq', 'k', 'due', 'a', 'd', 'p', 'h', 'lx', 'sc', 'mp', 'mx', 'n',
  'hz', 'lst', 'fin', 'lf', 'lfd', 'last', 'dl', 'dlr', 'dlx', 'fo'}
local REC_STATES = {'scheduled', 'paused', 'fired', 'cancelled', 'completed', 'dead_lettered'}
local REC_STATE_CODE = {}
-- (A numeric loop: a library's top level runs before `ipairs` is there, Redis 7.0.)
for i = 1, #REC_STATES do
  REC_STATE_CODE[REC_STATES[i]] = i
end
local REC_LIVE = {scheduled = true, paused = true}
-- The dirty-set score of a one-shot timer whose state was written and that a delivered
-- fire made done, no command since (ack.lua; landed.lua's are in the owed list,
-- owed.lua, unless the intake's write held one): its tombstone is owed, and a
-- checkpoint answers it without reading the record. Above every command offset (2^53:
-- Lua's numbers are exact below it), so a command lowers it (`ZADD ... LT` its offset)
-- and the timer is read again; as Redis formats the score (%.17g).
local REC_TOMB = '9007199254740992'
-- base: the partition's key prefix `PREFIX:{topic:p}:`; meta: read once per call.
-- hist: the history's bound (rec_history; nil: no history written). last_prefix: the
-- definition prefix rec_def_split found last. slice: rec_slice_add's minutes (place.lua).
-- The helpers are defined once per library (src/store/scripts.rs), so REC would outlive
-- a call: every function begins with rec_fresh(), which makes it new.
local REC
local function rec_fresh()
  if not redis then
    redis, tonumber, tostring, string, math, table, unpack, cmsgpack, cjson, ipairs,
      pairs, next, type, assert, error = rec_globals()
  end
  REC = {base = nil, retention = nil, meta = nil, apps = nil, moved = {},
    minutes = {}, tally = {}, hist = nil, dp_ids = {}, dp_by = {}, slice = {indexed = {}}}
end

-- Sets the partition (`base`, its key prefix), the retention of done timers (ms) and
-- the key of the live count per application (nil when the script moves none).
local function rec_init(base, retention, apps)
  REC.base, REC.retention, REC.apps = base, retention, apps
  REC.bucket = base .. 'r'
end

-- History entries are kept: at most `n` (0: none), none older than `ttl` ms.
local function rec_history(n, ttl)
  REC.hist = {n = tonumber(n), ttl = tonumber(ttl)}
end

-- History entry kinds (an entry's first element) and codes. A command entry:
-- {HIST_COMMAND, at ms, op, outcome, offset, request id (true: the timer id), reason};
-- a fire entry: {HIST_FIRE, fired ms, due ms, attempt, outcome, reason}. A new one-shot
-- timer's history is the short {HIST_CREATED, due - at ms}: the accepted create that made
-- its current version with its current request id, `at` ms (about 13 bytes fewer per
-- pending timer); it is expanded before anything changes the version, request or due.
local HIST_CREATED, HIST_COMMAND, HIST_FIRE = 0, 1, 2
local HIST_OPS = {create = 1, update = 2, pause = 3, resume = 4, cancel = 5, fire = 6}
local HIST_OUTCOMES = {accepted = 1, rejected = 2, delivered = 3, dead_lettered = 4}

-- The history entries of timer fields `t` (`h` unpacked, the short create expanded).
local function rec_hist_list(t)
  local list = t.h and cmsgpack.unpack(t.h) or {}
  local e = list[1]
  if e and e[1] == HIST_CREATED then
    list[1] = {HIST_COMMAND, tonumber(t.due) - e[2], HIST_OPS.create, HIST_OUTCOMES.accepted,
      tonumber(t.v), t.rq}
  end
  return list
end

-- The packed history of timer fields `t`, its short create expanded with the fields'
-- own version, due and request id: for fields that are about to take another timer's
-- (a timer created again keeps the history of its earlier life).
local function rec_hist_own(t)
  return t.h and cmsgpack.pack(rec_hist_list(t))
end

-- The packed history of timer fields `t` with entry `e` appended, `e[2]` its time in ms:
-- the last REC.hist.n entries, none older than the TTL at `e[2]`. Unchanged without
-- rec_history.
local function rec_hist_add(t, e)
  local H = REC.hist
  if not H or H.n <= 0 then
    return t.h
  end
  local list = rec_hist_list(t)
  list[#list + 1] = e
  local first = math.max(1, #list - H.n + 1)
  while first < #list and list[first][2] < e[2] - H.ttl do
    first = first + 1
  end
  if first > 1 then
    local kept = {}
    for i = first, #list do
      kept[#kept + 1] = list[i]
    end
    list = kept
  end
  return cmsgpack.pack(list)
end

-- Appends entry `e` to the history of timer fields `t` (the last fire folded in first).
local function rec_hist_push(t, e)
  if t.lx then
    t.h = rec_hist_add(t, cmsgpack.unpack(t.lx))
    t.lx = nil
  end
  t.h = rec_hist_add(t, e)
end

-- Fire entry `e` becomes the last fire of timer fields `t` (the one before folded in).
local function rec_fire_push(t, e)
  if t.lx then
    t.h = rec_hist_add(t, cmsgpack.unpack(t.lx))
  end
  t.lx = cmsgpack.pack(e)
end

-- Application `app` has `n` more live timers (written by rec_flush, in one call per
-- application).
local function rec_live_move(app, n)
  REC.moved[app] = (REC.moved[app] or 0) + n
end

-- The live timers of `app`, with this call's moves.
local function rec_live_count(app)
  return tonumber(redis.call('HGET', REC.apps, app) or '0') + (REC.moved[app] or 0)
end

-- A timer of application `app` went from state `from` (nil: new) to `to` (`n` timers:
-- default 1): the counts per state (`BASE ac`; done states only ever count up) and, when
-- it became live or stopped being live, the live count (`apps`); both written by
-- rec_flush. The one place a state change is counted.
local function rec_tally(app, from, to, n)
  if not app or from == to then
    return
  end
  n = n or 1
  local per = REC.tally[app]
  if not per then
    per = {}
    REC.tally[app] = per
  end
  if REC_LIVE[from] then
    per[from] = (per[from] or 0) - n
  end
  per[to] = (per[to] or 0) + n
  if REC_LIVE[from] and not REC_LIVE[to] then
    rec_live_move(app, -n)
  elseif REC_LIVE[to] and not REC_LIVE[from] then
    rec_live_move(app, n)
  end
end

-- Positions in a packed record (rec_pack) read by the fire path's raw access.
local REC_V, REC_ST, REC_K, REC_DUE, REC_A, REC_D, REC_P, REC_H, REC_LX = 1, 2, 4, 5, 6, 7, 8, 9, 10
local REC_DL, REC_DLR, REC_DLX = 21, 22, 23

-- The Avro long (zigzag varint, at most 4 bytes, not negative) at byte `i` of `s`: its
-- value and the index after it; nil if there is none.
local function rec_varint(s, i)
  local v, shift = 0, 1
  for j = i, i + 3 do
    local b = string.byte(s, j)
    if not b then
      return nil
    end
    v = v + (b % 128) * shift
    if b < 128 then
      if v % 2 == 1 then
        return nil
      end
      return v / 2, j + 1
    end
    shift = shift * 128
  end
  return nil
end

-- The application named at the start of a stored definition `d` (schemas/stored_timer.avsc:
-- its first field, an Avro string: a zigzag varint length, then the bytes); nil if `d` is
-- not one. A record leaves out an application its definition names (most do).
local function rec_app_of(d)
  local len, i = rec_varint(d or '', 1)
  if not len or i + len - 1 > #d then
    return nil
  end
  return string.sub(d, i, i + len - 1)
end

-- Definition prefixes. A stored definition starts with the application and the callback
-- topic, the same for most timers of an application: a record holds the prefix's number
-- in `BASE dp` ({n, rest of d}), not the prefix (about 45 bytes fewer per timer with a
-- 30-character topic). `BASE dp` maps `#n` to the prefix and `=prefix` to n; it only
-- grows, up to REC_DP_MAX prefixes (beyond: definitions kept whole), and is rebuilt with
-- the records (a rebuild wipes both; the state topic holds whole definitions).
local REC_DP_MAX = 4096

-- Definition `d` split after its callback topic: prefix, rest; nil if it is not one.
local function rec_def_split(d)
  -- The last prefix found, when `d` starts with it (a batch mostly shares one): parsing
  -- the same bytes would end at the same place.
  local last = REC.last_prefix
  if last and string.sub(d, 1, #last) == last then
    return last, string.sub(d, #last + 1)
  end
  local len, i = rec_varint(d, 1)
  if not len then
    return nil
  end
  local u, j = rec_varint(d, i + len)
  if u == 1 then
    local tl, k = rec_varint(d, j)
    j = tl and k + tl
  elseif u ~= 0 then
    return nil
  end
  if not j or j - 1 > #d then
    return nil
  end
  REC.last_prefix = string.sub(d, 1, j - 1)
  return REC.last_prefix, string.sub(d, j)
end

-- The number of definition prefix `prefix` (numbered now if new); false when the
-- partition has REC_DP_MAX already.
local function rec_dp_id(prefix)
  local n = REC.dp_ids[prefix]
  if n ~= nil then
    return n
  end
  local key = REC.base .. 'dp'
  n = tonumber(redis.call('HGET', key, '=' .. prefix))
  if not n then
    n = redis.call('HLEN', key) / 2 + 1
    if n > REC_DP_MAX then
      n = false
    else
      redis.call('HSET', key, '#' .. n, prefix, '=' .. prefix, n)
    end
  end
  REC.dp_ids[prefix] = n
  return n
end

-- Definition `d` as a record holds it: {prefix number, rest}, or whole.
local function rec_def_pack(d)
  if not d then
    return false
  end
  local prefix, rest = rec_def_split(d)
  local n = prefix and #prefix > 3 and rec_dp_id(prefix)
  if not n then
    return d
  end
  return {n, rest}
end

-- Definition prefix number `n` (cached for the call).
local function rec_dp_prefix(n)
  local prefix = REC.dp_by[n]
  if not prefix then
    prefix = redis.call('HGET', REC.base .. 'dp', '#' .. n)
    if not prefix then
      error('ktimer: definition prefix ' .. n .. ' missing from ' .. REC.base .. 'dp')
    end
    REC.dp_by[n] = prefix
  end
  return prefix
end

-- The whole definition a record holds as `x` (rec_def_pack's result); nil if none.
local function rec_def(x)
  if type(x) ~= 'table' then
    return x or nil
  end
  return rec_dp_prefix(x[1]) .. x[2]
end

-- The application of raw record `a` (rec_raw): from its prefix when numbered.
local function rec_app_raw(a)
  local x = a[REC_A]
  if x then
    return x
  end
  x = a[REC_D]
  if type(x) == 'table' then
    x = rec_dp_prefix(x[1])
  end
  return rec_app_of(x)
end

-- Packs `t` as a MessagePack array in the order of REC_FIELDS (absent: false; trailing
-- absent fields left out). The version and the due time are packed as integers (both
-- are always decimal integers), the state as its index in REC_STATES, a request id equal
-- to the timer id as true, a one-shot kind and an application its definition names as
-- absent; the rest as strings. (Table constructors, not loops: in Lua 5.1 the loop and
-- the table's growth cost more than the packing.)
local function rec_pack(id, t)
  local a = {
    tonumber(t.v),
    REC_STATE_CODE[t.st] or t.st,
    (t.rq == id) or t.rq or false,
    t.k ~= 'o' and t.k or false,
    tonumber(t.due) or false,
    t.a ~= rec_app_of(t.d) and t.a or false,
    rec_def_pack(t.d),
    t.p or false,
    t.h or false,
    t.lx or false,
    t.sc or false,
    t.mp or false,
    t.mx or false,
    t.n or false,
    t.hz or false,
    t.lst or false,
    t.fin or false,
    t.lf or false,
    t.lfd or false,
    t.last or false,
    t.dl or false,
    t.dlr or false,
    t.dlx or false,
    t.fo or false,
  }
  local n = #REC_FIELDS
  while n > 1 and a[n] == false do
    a[n] = nil
    n = n - 1
  end
  return cmsgpack.pack(a)
end

-- The fields of a record unpacked into array `a` (rec_pack's order), as strings.
local function rec_fields(id, a)
  return {
    v = string.format('%d', a[1]),
    st = REC_STATES[a[2]] or a[2],
    rq = (a[3] == true and id) or a[3] or nil,
    k = a[4] or 'o',
    due = a[5] and string.format('%d', a[5]) or nil,
    a = rec_app_raw(a),
    d = rec_def(a[7]),
    p = a[8] or nil,
    h = a[9] or nil,
    lx = a[10] or nil,
    sc = a[11] or nil,
    mp = a[12] or nil,
    mx = a[13] or nil,
    n = a[14] or nil,
    hz = a[15] or nil,
    lst = a[16] or nil,
    fin = a[17] or nil,
    lf = a[18] or nil,
    lfd = a[19] or nil,
    last = a[20] or nil,
    dl = a[21] or nil,
    dlr = a[22] or nil,
    dlx = a[23] or nil,
    fo = a[24] or nil,
  }
end

