#!/usr/bin/env bash
# Runs `ktimer bench` (release build) on a Redis and a Tansu broker of its own, installed if
# missing and started on loopback (ports 26380/29093, or KTIMER_BENCH_REDIS_PORT and
# KTIMER_BENCH_BROKER_PORT), and stops them afterwards. Arguments go to `ktimer bench`;
# the report lands in bench-out/ (or --out).
#   scripts/bench.sh                                   # defaults: 100k pending, 100k burst
#   scripts/bench.sh --due spread --window-ms 10000    # a steady 10,000 fires/s
#   KTIMER_BENCH_CLUSTER=3 scripts/bench.sh            # on a Redis Cluster of 3 primaries
#                                                      # (ports 26380, 26381, 26382)
#   KTIMER_BENCH_BIN=/tmp/ktimer-old scripts/bench.sh  # another build (side by side)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '==> %s\n' "$*" >&2; }

REDIS_PORT=${KTIMER_BENCH_REDIS_PORT:-26380}
BROKER_PORT=${KTIMER_BENCH_BROKER_PORT:-29093}
DIR=.ktimer/bench
mkdir -p "$DIR"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

TANSU=$(scripts/install-deps.sh)
# KTIMER_BENCH_BIN runs another ktimer binary (a build of another commit, to compare two
# builds side by side on the same machine); by default this checkout's release build.
BIN=${KTIMER_BENCH_BIN:-}
if [ -z "$BIN" ]; then
  say "building ktimer (cargo build --release; a few minutes the first time)..."
  cargo build --release --locked >&2
  BIN=target/release/ktimer
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 100); do port_open "$1" && return 0; sleep 0.1; done
  say "$2 did not start on port $1 (see $DIR/$2.log)"; exit 1
}
NODES=${KTIMER_BENCH_CLUSTER:-0}
REDIS_PORTS=("$REDIS_PORT")
if [ "$NODES" -gt 0 ]; then
  REDIS_PORTS=(); for i in $(seq 0 $((NODES - 1))); do REDIS_PORTS+=($((REDIS_PORT + i))); done
fi
for p in "${REDIS_PORTS[@]}" "$BROKER_PORT"; do
  if port_open "$p"; then say "port $p is taken; set KTIMER_BENCH_*_PORT to free ones"; exit 1; fi
done
if [ "$NODES" -gt 0 ]; then
  rm -f "$DIR"/nodes-*.conf
  for p in "${REDIS_PORTS[@]}"; do
    (cd "$DIR" && exec redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
      --cluster-enabled yes --cluster-config-file "nodes-$p.conf") >"$DIR/redis-$p.log" 2>&1 &
    PIDS+=($!)
  done
  for p in "${REDIS_PORTS[@]}"; do wait_port "$p" "redis-$p"; done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${REDIS_PORTS[@]}") \
    --cluster-replicas 0 --cluster-yes >"$DIR/cluster-create.log"
  for _ in $(seq 1 100); do
    redis-cli -p "$REDIS_PORT" cluster info | grep -q cluster_state:ok && break; sleep 0.1
  done
  REDIS_URL=$(printf 'redis://127.0.0.1:%s,' "${REDIS_PORTS[@]}"); REDIS_URL=${REDIS_URL%,}
else
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$DIR/redis.log" 2>&1 &
  PIDS+=($!)
  REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
fi
# Warnings only, whatever RUST_LOG says: at info Tansu logs every request.
RUST_LOG=warn "$TANSU" broker --listener-url "tcp://127.0.0.1:$BROKER_PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$BROKER_PORT" --storage-engine memory://tansu/ \
  >"$DIR/tansu.log" 2>&1 &
PIDS+=($!)
[ "$NODES" -gt 0 ] || wait_port "$REDIS_PORT" redis
wait_port "$BROKER_PORT" tansu
say "Redis $REDIS_URL, Tansu on 127.0.0.1:$BROKER_PORT"

KTIMER_LOG=${KTIMER_LOG:-warn} "$BIN" bench \
  --brokers "127.0.0.1:$BROKER_PORT" --redis-url "$REDIS_URL" "$@"
