#!/usr/bin/env python3
"""What a fire's claim costs Redis, piece by piece: Redis CPU µs per fire.

Starts a redis-server of its own, fills it with `--timers` one-shot timers due in one
minute (a record of 160 bytes each under its own key, the ids in one sorted-set slice)
and claims them in calls of 2,000 with plain Lua scripts that each add one piece of what
claim.lua does per fire to the one before: read the slice and each record (the floor of
any design that keeps a record per timer), decode the record's head, format the
in-flight member and answer it, add it to the in-flight set, write the done record,
rewrite its bytes. Then the store's own functions over the same number of timers
(scripts/lua-cost.py's driver: created, promoted, claimed, acknowledged), for the
claim and the acknowledgement as they are. CPU is `INFO cpu` of that Redis, so run it on
an otherwise quiet machine and compare lines of one run.

    pip install redis msgpack            # the two Python packages it needs
    scripts/fire-pieces.py               # 200,000 timers
    scripts/fire-pieces.py --timers 1000000
"""
import argparse, importlib.util, os, subprocess, time

spec = importlib.util.spec_from_file_location(
    "lua_cost", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lua-cost.py"))
lc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lc)
redis = lc.redis

DUE0 = 1_800_000_000_000
# A scheduled one-shot record as record.lua packs it: [v, st, rq, k, due, a, d, p, h].
RECORD = (b"\x99\xce\x00\x01\x00\x00\x01\xc2\xc2\xcf\x00\x00\x01\xa3\x00\x00\x00\x00\xc2"
          + b"\x92\x01" + b"x" * 130 + b"\xc2\xa4hist")
# Each piece is added inside the loop over the slice's members (i, key k, record s); the
# answer (member and record, or in-flight member, '' and record from the third on) last.
PIECES = [
    ("read the slice and each record (GET), answer both", ""),
    ("+ decode the record's head (3 cmsgpack.unpack_limit)", """
local o, v, _, _, _, due = cmsgpack.unpack_limit(s, 5, 1)
local od = cmsgpack.unpack_limit(s, 1, o)
cmsgpack.unpack_limit(s, 1, od + 1)"""),
    ("+ format the in-flight member, answer it", """
local d = string.format('%d', due)
local f = string.format('%d', v) .. ':' .. d .. ':' .. items[i]
flight[#flight+1] = d; flight[#flight+1] = f"""),
    ("+ add it to the in-flight set (ZADD, batched)", """
if #flight >= 2000 then redis.call('ZADD', 'inflight', unpack(flight)); flight = {} end"""),
    ("+ write the done record (SET ... PX)", """
local done = s"""),
    ("+ rewrite its bytes (state, last fire)", """
local lx = '\\149\\2' .. cmsgpack.pack(due) .. cmsgpack.pack(due) .. '\\1\\3'
done = '\\154' .. string.sub(s, 2, 6) .. '\\3' .. string.sub(s, 8) .. string.char(0xa0 + #lx) .. lx"""),
]


def script(n):
    """The claim of the first `n` pieces."""
    body = "".join(code + "\n" for _, code in PIECES[:n])
    if n >= 5:
        body += "redis.call('SET', k, done, 'PX', 86400000)\n"
    body += ("out[#out+1] = f; out[#out+1] = ''; out[#out+1] = s\n" if n >= 3
             else "out[#out+1] = items[i]; out[#out+1] = s\n")
    return ("local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 2000)\n"
            "local out, flight = {}, {}\n"
            "for i = 1, #items do\nlocal k = 'r:' .. items[i]\nlocal s = redis.call('GET', k)\n"
            + body + "end\n"
            "if #items > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #items - 1) end\n"
            "return out")


class Cpu:
    """Redis CPU seconds since the last mark (the `Counted` of lua-cost.py, in time)."""

    def __init__(self, r):
        self.r = r
        self.last = self.now()

    def now(self):
        i = self.r.info("cpu")
        return i["used_cpu_user"] + i["used_cpu_sys"]

    def mark(self):
        t = self.now()
        d, self.last = t - self.last, self.now()
        return d


def piece(r, cpu, n, timers):
    """µs of Redis CPU per fire of the claim of the first `n` pieces."""
    r.flushall()
    sha = r.script_load(script(n))
    pipe = r.pipeline(transaction=False)
    for i in range(timers):
        tid = f"timer-{i:08d}"
        pipe.zadd("slice", {tid: DUE0 + i % 60_000})
        pipe.set("r:" + tid, RECORD)
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    cpu.mark()
    while r.evalsha(sha, 1, "slice", DUE0 + 60_000):
        pass
    return cpu.mark() * 1e6 / timers


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--timers", type=int, default=200_000, help="timers (default 200,000)")
    a = p.parse_args()
    port = lc.free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(100):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    try:
        cpu = Cpu(r)
        print(f"Redis CPU µs per fire, {a.timers} timers, claims of 2,000:")
        for n, (label, _) in enumerate(PIECES, 1):
            print(f"  {label:<56}{piece(r, cpu, n, a.timers):>6.2f}", flush=True)
        sha = lc.handles(r, ".", 0)
        sha.update(compact=True, via="create",
                   whole="the number k of definition prefixes" in lc.source(".", "create.lua"))
        out = lc.life(cpu, sha, a.timers)
        print(f"  {'claim.lua as it is (its record rewrite, counts, limits)':<56}"
              f"{out['claim'] * 1e6:>6.2f}")
        print(f"  {'landed.lua (calls of 500)':<56}{out['ack'] * 1e6:>6.2f}")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
