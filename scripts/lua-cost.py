#!/usr/bin/env python3
"""Redis instructions per operation of the store's Lua scripts, builds side by side.

Runs one redis-server under valgrind's callgrind (instruction counts do not move with the
host's load, unlike CPU time on shared cores) and drives the scripts of each revision
given through one timer's life, as ktimer would: creates (the new one-shot timer's record
packed as src/store/fresh.rs packs it, calls of 100; through apply.lua, and through
create.lua too where the revision has it: a line for each), the promotion to
their own keys (promote.lua), the claim (claim.lua, calls of up to 2,000 fires) and the
acknowledgement (landed.lua, or swap.lua before it; calls of 500: --swap-calls). Prints
Redis instructions per create, per promoted timer, per claimed and per acknowledged fire. A
second line per revision ('written') drives timers due beyond the deferral window, whose
states the intake writes (the confirmations, written.lua: 'state' per timer) and whose
tombstones checkpoint pages of 500 answer after the swaps (checkpoint.lua, each confirmed
by checkpointed.lua: 'tomb', per tombstone). Each revision's scripts are called as that
revision calls them: functions of one Redis Functions library (FCALL) or scripts (EVALSHA).

    pip install redis msgpack         # the two Python packages it needs
    scripts/lua-cost.py HEAD~3 HEAD   # revisions (git), or directories holding the .lua
    scripts/lua-cost.py --timers 2000 .

Timers: one-shot, due within the minute (one each millisecond; --per-ms N: N), 100-byte
payload, one application and callback topic (one definition prefix), as the bench's burst.
valgrind is required.
"""
import argparse, os, shutil, socket, subprocess, sys, tempfile, time

try:
    import msgpack, redis
except ImportError:
    sys.exit("lua-cost: needs the Python packages redis and msgpack (pip install redis msgpack)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRELUDE = ["record.lua", "late.lua", "place.lua", "misfire.lua"]
# Helpers of a Redis Functions library (after writing.lua), where the revision has them.
LIBRARY = ["writing.lua", "owed.lua", "sweep.lua"]
OPTIONAL = {"late.lua", "owed.lua", "sweep.lua"}
B = "lc:{lc.commands:0}:"
EPOCH = "7"
# A stored definition (Avro, codec::encode_stored): application, callback topic, then
# the rest (key absent, no headers, a 100-byte payload, envelope mode).
PREFIX = b"\x0edefault\x02\x1clc.callback"
DEF = PREFIX + b"\x00\x00\xc8\x01" + b"x" * 100 + b"\x02"


def source(rev, name):
    """Script `name` of `rev`: a directory of .lua files, '.' (this checkout) or a git revision."""
    if rev == "." or os.path.isdir(rev):
        d = os.path.join(ROOT, "src/store") if rev == "." else rev
        return open(os.path.join(d, name)).read()
    shown = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:src/store/{name}"],
                           capture_output=True, text=True)
    if shown.returncode != 0 and name in OPTIONAL:
        return ""  # a helper that revision did not have yet
    shown.check_returncode()
    return shown.stdout


def scripts(rev):
    with_prelude = lambda name: "".join(source(rev, p) for p in PRELUDE) + source(rev, name)
    writing = source(rev, "writing.lua")
    out = {"apply": writing + with_prelude("apply.lua"), "promote": with_prelude("promote.lua"),
           "claim": with_prelude("claim.lua"),
           "checkpoint": writing + with_prelude("checkpoint.lua"),
           "checkpointed": source(rev, "checkpointed.lua"),
           "written": writing + source(rev, "written.lua")}
    # The lean acknowledgement: landed.lua (the claim recorded the fire done), or before
    # it swap.lua (ktimer built the done record, Redis compared and stored it).
    for ack in ["landed", "swap"]:
        try:
            out[ack] = with_prelude(ack + ".lua")
            break
        except subprocess.CalledProcessError:
            pass
    try:
        out["create"] = with_prelude("create.lua")
    except subprocess.CalledProcessError:
        pass  # (a revision before create.lua: its creates go through apply.lua)
    return out


def handles(r, rev, tag):
    """Per script, how to call it as the revision does: ('FCALL', its function) when the
    revision's scripts are a Redis Functions library (the library built and loaded here as
    src/store/scripts.rs builds it: the helpers, then a function per script that begins
    with rec_fresh()), else ('EVALSHA', its SHA1)."""
    code = scripts(rev)
    rs = (open(os.path.join(ROOT, "src/store/scripts.rs")).read() if rev == "." or os.path.isdir(rev)
          else subprocess.run(["git", "-C", ROOT, "show", f"{rev}:src/store/scripts.rs"],
                              check=True, capture_output=True, text=True).stdout)
    if "rec_register(" not in rs:
        return {k: ("EVALSHA", r.script_load(v)) for k, v in code.items()}
    lib = f"#!lua name=lc_{tag}\n" + "".join(source(rev, h) for h in PRELUDE + LIBRARY)
    for name in code:
        lib += (f"rec_register('lc_{name}_{tag}', function(KEYS, ARGV)\nrec_fresh()\n"
                f"{source(rev, name + '.lua')}\nend)\n")
    r.execute_command("FUNCTION", "LOAD", "REPLACE", lib)
    return {k: ("FCALL", f"lc_{k}_{tag}") for k in code}


def call(r, handle, *args):
    """Calls a script by its handle (handles())."""
    return r.execute_command(*handle, *args)


def fresh(offset, due, now, written):
    """The head and tail ktimer packs around a new one-shot timer's definition (fresh.rs);
    `written`: its state is written by the intake (field p)."""
    head = b"\x99" + msgpack.packb(offset) + b"\x01\xc3\xc2" + msgpack.packb(due) + b"\xc2"
    history = msgpack.packb([[0, due - now]])
    return head, (b"\xa11" if written else b"\xc2") + msgpack.packb(history, use_bin_type=False)


def keys(names):
    """The partition's keys named `names` (the harness's prefix)."""
    return [B + k for k in names]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counted:
    """redis-server under callgrind; `mark()` answers the instructions since the last mark."""

    def __init__(self, workdir):
        self.dir, self.port = workdir, free_port()
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir}/cg.%p",
             "redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)
        self.r = redis.Redis(port=self.port)
        for _ in range(600):
            try:
                self.r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        self.dumps = 0
        self.mark()

    def mark(self):
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True,
                       capture_output=True)
        self.dumps += 1
        path = f"{self.dir}/cg.{self.proc.pid}.{self.dumps}"
        for line in open(path):
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
        raise RuntimeError(f"no totals in {path}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def create_calls(r, sha, timers, now, due0, written, per_ms=1):
    """The creates of `timers` new one-shot timers, `per_ms` due each millisecond from
    `due0`, as ktimer sends them: to create.lua when the revision has it (`sha["via"]`),
    else to apply.lua; calls of 100."""
    for first in range(0, timers, 100):
        groups = []
        for i in range(first, min(first + 100, timers)):
            off, due, tid = 1000 + i, due0 + i // per_ms, f"t{i}"
            head, tail = fresh(off, due, now, written)
            if sha["via"] == "create":
                groups += [off, tid, due, DEF, head, tail, "default" if i == first else ""]
            elif sha["compact"]:
                groups += [off, "create", tid, tid, "o", due, DEF, "0", "default", "", "", head,
                           tail, "0"]
            else:  # (the groups of 19 arguments before the cron values went last)
                groups += [off, "create", tid, tid, "o", due, DEF, "", "", "", "", "", "0",
                           "default", "", "", head, tail, "0"]
        if sha["via"] == "create":
            call(r, sha["create"], 7, *keys(["epoch", "offset", "idx", "dirty", "deferred:off",
                                               "apps", "writing"]),
                      EPOCH, 86_400_000, B + "s:", -1, now, 10_000, B, "1",
                      *create_groups(r, sha, groups))
        else:
            call(r, sha["apply"], 12, *keys(["epoch", "offset", "idx", "inflight", "cron",
                                               "dirty", "deferred:off", "apps", "writing", "pk",
                                               "acks", "revived"]),
                      EPOCH, 86_400_000, B + "s:", -1, now, 10_000, B, 20, 604_800_000, "1",
                      *groups)


def create_groups(r, sha, groups):
    """create.lua's arguments after its header for `groups` (7 per timer: offset, id, due,
    definition, head, tail, application): as they are, or, where the owner packs the
    whole record (`sha["whole"]`), the prefix numbered first (a call of no timers) and
    5 per timer (offset, id, due, record, application)."""
    if not sha["whole"]:
        return groups
    n = call(r, sha["create"], 7, *keys(["epoch", "offset", "idx", "dirty", "deferred:off",
                                           "apps", "writing"]),
                  EPOCH, 86_400_000, B + "s:", -1, 0, 10_000, B, "1", 1, "", PREFIX)[1][0]
    rest = DEF[len(PREFIX):]
    numbered = b"\x92" + msgpack.packb(n) + msgpack.packb(rest, use_bin_type=False)
    out = [1, n, PREFIX]
    for g in range(0, len(groups), 7):
        off, tid, due, _, head, tail, app = groups[g:g + 7]
        out += [off, tid, due, head + numbered + tail, app]
    return out


def checkpoint_pages(r, sha, now):
    """Checkpoint pages of up to 500 timers, each confirmed, until none is left dirty;
    answers the timers the pages answered."""
    answered = 0
    while True:
        reply = call(r, sha["checkpoint"], 15, *keys(
            ["epoch", "dirty", "pending", "idx", "inflight", "offset", "deferred:off", "acks",
             "ckpt", "writing", "blocked", "pk", "owed", "owed:p", "revived"]), EPOCH, B,
            B + "s:", now, 500, 1000, 10_000, 5_000, 0, 1 << 20, 86_400_000)
        # (Since the tombstones are answered as one list: that list, then m.)
        listed = isinstance(reply[5], list)
        tombs = reply[5] if listed else []
        m = int(reply[6 if listed else 5])
        rest = reply[(7 if listed else 6) + m:]
        # (Since the owed list: entries, their ids after the first line.)
        answered += sum(max(t.count(b"\n"), 1) for t in tombs)
        i = 0
        while i < len(rest):
            n = int(rest[i + 1])
            i += 2 + 2 * max(n, 0)
            answered += 1
        call(r, sha["checkpointed"], 6, *keys(["epoch", "pending", "ckpt", "owed:p", "owed",
                                                "revived"]), EPOCH, "", 0)
        if int(reply[0]) == 0:
            return answered


def unpacked(reply):
    """A script's list answer: a Redis array, or packed with cmsgpack (claim.lua before
    it answered an array)."""
    return reply if isinstance(reply, list) else msgpack.unpackb(reply, raw=True)


def life(c, sha, timers, written=False, swap_call=500, per_ms=1):
    """Drives `timers` timers through create, promotion, claim and swap (calls of
    `swap_call` fires): instructions per op. `written`: due beyond the deferral window,
    their states written by the intake (confirmed by written.lua) and their tombstones
    answered by checkpoint pages after the fire."""
    # Due 5 to 9 s after their create: deferred, their states never written (the burst);
    # written: 60 s after.
    r, now = c.r, 1_800_000_000_000
    due0 = now + (60_000 if written else 5_000)
    r.flushall()
    r.set(B + "epoch", EPOCH)
    c.mark()
    create_calls(r, sha, timers, now, due0, written, per_ms)
    out = {"create": c.mark()}
    if written:
        # The intake wrote their states: confirmed per create call (written.lua).
        for entry in r.hkeys(B + "writing"):
            call(r, sha["written"], 4, *keys(["epoch", "writing", "dirty", "blocked"]), EPOCH,
                      "delivered", entry)
        out["state"] = c.mark()
        if r.zcard(B + "dirty") != 0 or checkpoint_pages(r, sha, now) != 0:
            sys.exit("lua-cost: a state owed after the intake wrote them")
    while call(r, sha["promote"], 3, *keys(["epoch", "idx", "rb"]), EPOCH, B, B + "s:",
                    due0 + timers, 1000) == 1:
        pass
    out["promote"] = c.mark()
    fires = []
    while True:
        upto = due0 + timers
        reply = unpacked(call(
            r, sha["claim"], 9, *keys(["epoch", "idx", "inflight", "cron", "dirty", "ckpt", "apps",
                                    "fence", "pk"]),
            EPOCH, upto, 2000, B + "s:", B, 0, upto, 86_400_000, 0, 64 << 20))
        # (Before the prefixes were answered, the head had 4 items, then the first member.)
        head = 4 if len(reply) == 4 or b":" in reply[4] else 5
        tail = 2 * int(reply[3]) + (2 * int(reply[4]) if head == 5 else 0)
        n = (len(reply) - head - tail) // 3
        if n == 0:
            break
        fires += [(reply[head + 3 * i], reply[head + 3 * i + 2]) for i in range(n)]
    out["claim"] = c.mark()
    if len(fires) != timers:
        sys.exit(f"lua-cost: {len(fires)} of {timers} timers claimed")
    if "landed" in sha:
        # (Since the fired queue: its entry, when the last fire was produced, then the
        # members, a line each.)
        queued = sha["landed_queue"]
        for first in range(0, len(fires), swap_call):
            batch = fires[first:first + swap_call]
            last = max(int(m.split(b":")[1]) for m, _ in batch) + 5
            entry = b"\n".join([str(last).encode()] + [m for m, _ in batch])
            args = [EPOCH, B] + ([entry] if queued else []) + ["1" if written else "", len(batch)]
            if sha["landed_blocks"]:  # (its members, then their timer ids)
                args += [m for m, _ in batch] + [m.split(b":", 2)[2] for m, _ in batch]
            else:
                for member, _ in batch:
                    args += [member, member.split(b":", 2)[2]]
            names = ["epoch", "inflight", "owed" if sha["owed"] else "dirty", "deferred:off",
                     "acks"]
            names += ["firedq"] if queued else []
            call(r, sha["landed"], len(names), *keys(names), *args)
    grouped = "the number of fires n" in sha.get("swap_src", "")
    for first in range(0, len(fires) if "swap" in sha else 0, swap_call):
        args = [EPOCH, B, 86_400_000]
        if grouped:  # (one run: one application, states all written or all not)
            args += ["default", "1" if written else "", len(fires[first:first + swap_call])]
        for member, read in fires[first:first + swap_call]:
            v, due, tid = member.split(b":", 2)
            done = msgpack.unpackb(read, raw=True)
            done[1] = 3
            done += [False] * (9 - len(done)) + [msgpack.packb([2, int(due) + 5, int(due), 1, 3])]
            done = msgpack.packb(done, use_bin_type=False)
            args += [member, tid, read, done] + ([] if grouped else ["default", ""])
        call(r, sha["swap"], 6, *keys(["epoch", "inflight", "dirty", "deferred:off", "acks",
                                         "apps"]), *args)
    out["ack"] = c.mark()
    if r.zcard(B + "inflight") != 0:
        sys.exit("lua-cost: fires left in flight after the swaps")
    if written:
        if checkpoint_pages(r, sha, upto) != timers:
            sys.exit("lua-cost: not every tombstone was answered")
        out["tomb"] = c.mark()
    return {k: v / timers for k, v in out.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("revs", nargs="*", default=["."], help="git revisions or script directories")
    p.add_argument("--timers", type=int, default=4000, help="timers per revision (default 4000)")
    p.add_argument("--per-ms", type=int, default=1,
                   help="timers due each millisecond (default 1; a steady 10,000/s is 10)")
    p.add_argument("--swap-calls", type=int, default=500,
                   help="fires per swap call (default 500; the call's own cost shows at 1)")
    a = p.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("lua-cost: needs valgrind (apt-get install valgrind)")
    work = tempfile.mkdtemp(prefix="ktimer-lua-cost-")
    c = Counted(work)
    try:
        print(f"Redis instructions per operation, {a.timers} one-shot timers (callgrind):")
        cols = ["create", "promote", "claim", "ack", "state", "tomb"]
        print(f"{'revision':<40}" + "".join(f"{k:>10}" for k in cols))
        for i, rev in enumerate(a.revs):
            sha = handles(c.r, rev, i)
            sha["compact"] = "the number of cron values that follow" in source(rev, "apply.lua")
            if "swap" in sha:
                sha["swap_src"] = source(rev, "swap.lua")
            sha["landed_queue"] = "landed" in sha and "fired queue" in source(rev, "landed.lua")
            sha["landed_blocks"] = "landed" in sha and "n timer ids" in source(rev, "landed.lua")
            sha["owed"] = "landed" in sha and "owed tombstones" in source(rev, "landed.lua")
            sha["whole"] = "the number k of definition prefixes" in (
                source(rev, "create.lua") if "create" in sha else "")
            for via in ["apply", "create"] if "create" in sha else ["apply"]:
                sha["via"] = via
                for written in [False, True]:
                    n = life(c, sha, a.timers, written, a.swap_calls, a.per_ms)
                    name = f"{rev} ({via}.lua)" if "create" in sha else rev
                    name += ", written" if written else ""
                    print(f"{name:<40}" + "".join(f"{n[k]:>10.0f}" if k in n else f"{'':>10}"
                                                  for k in cols), flush=True)
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
