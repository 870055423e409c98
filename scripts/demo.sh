#!/usr/bin/env bash
# The README's first command: installs Redis and a Kafka-compatible broker if missing,
# starts them on loopback, creates the topics, starts ktimer, sends sample timers and
# shows them firing with their lateness. Everything it starts is stopped on exit; with
# a terminal attached ktimer keeps running until Ctrl-C.
#
# Ports (override with the variables): Redis 16379 (KTIMER_DEMO_REDIS_PORT),
# broker 19092 (KTIMER_DEMO_BROKER_PORT), admin 9464 (KTIMER_DEMO_ADMIN_PORT).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '==> %s\n' "$*" >&2; }

REDIS_PORT=${KTIMER_DEMO_REDIS_PORT:-16379}
BROKER_PORT=${KTIMER_DEMO_BROKER_PORT:-19092}
ADMIN_PORT=${KTIMER_DEMO_ADMIN_PORT:-9464}
DIR=.ktimer/demo
mkdir -p "$DIR"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

TANSU=$(scripts/install-deps.sh)

say "building ktimer (cargo build --release; a few minutes the first time)..."
cargo build --release --locked >&2
KT=target/release/ktimer

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 100); do port_open "$1" && return 0; sleep 0.1; done
  say "$2 did not start on port $1 (see $DIR/$2.log)"; exit 1
}
for p in "$REDIS_PORT" "$BROKER_PORT" "$ADMIN_PORT"; do
  if port_open "$p"; then say "port $p is taken; set KTIMER_DEMO_*_PORT to free ones"; exit 1; fi
done

say "starting redis-server on 127.0.0.1:$REDIS_PORT"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$DIR/redis.log" 2>&1 &
PIDS+=($!)
say "starting the Tansu broker on 127.0.0.1:$BROKER_PORT (in-memory storage)"
# Warnings only, whatever RUST_LOG says: at info Tansu logs every request.
RUST_LOG=warn "$TANSU" broker --listener-url "tcp://127.0.0.1:$BROKER_PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$BROKER_PORT" --storage-engine memory://tansu/ \
  >"$DIR/tansu.log" 2>&1 &
PIDS+=($!)
wait_port "$REDIS_PORT" redis
wait_port "$BROKER_PORT" tansu

export KTIMER_BROKERS="127.0.0.1:$BROKER_PORT"
export KTIMER_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
export KTIMER_ADMIN_ADDR="127.0.0.1:$ADMIN_PORT"

say "creating the topics declared in topics/ktimer.toml"
"$KT" topics apply

say "starting ktimer (log: $DIR/ktimer.log)"
"$KT" run >"$DIR/ktimer.log" 2>&1 &
PIDS+=($!)
printf '==> waiting for ktimer to join its consumer group' >&2
for _ in $(seq 1 120); do
  curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break
  printf '.' >&2; sleep 0.5
done
echo >&2
curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || { say "ktimer is not ready; see $DIR/ktimer.log"; exit 1; }

# 5 timers 1.0-3.0 s ahead, one scheduled message in raw mode, one created then cancelled,
# one plain record delayed through the delay topic: 8 creates + 1 cancel = 9 results, 7 fires.
"$KT" tail --count 16 --idle-exit-ms 20000 >"$DIR/tail.out" 2>"$DIR/tail.err" &
TAIL=$!
PIDS+=($TAIL)
until grep -q tailing "$DIR/tail.err" 2>/dev/null; do sleep 0.05; done

say "sending sample timers"
"$KT" send --count 5 --delay-ms 1000 --spread-ms 500 --payload "hello from the ktimer demo"
"$KT" send --timer-id demo-raw --at-ms $(( $(date +%s%3N) + 2200 )) --raw --payload '{"order":42,"action":"close"}'
"$KT" send --timer-id demo-cancelled --delay-ms 2500 --payload "you will not see this"
"$KT" send --kind cancel --timer-id demo-cancelled
"$KT" send --via delay-topic --timer-id demo-delayed --delay-ms 2800 \
  --payload '{"reminder":"a plain record, delayed by two headers"}' --header trace-id=demo

say "results and fires as they arrive (fired = produce time - due, received = consumer time - due):"
tail -n +1 -f "$DIR/tail.out" --pid "$TAIL" 2>/dev/null || true
wait "$TAIL" || true
say "lateness histogram from http://127.0.0.1:$ADMIN_PORT/metrics:"
curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^ktimer_(fire_lateness_seconds_(count|sum)|fires_total|commands_total)' >&2 || true

if [ -t 0 ] && [ -z "${CI:-}" ]; then
  say "ktimer keeps running: try"
  echo "    KTIMER_BROKERS=$KTIMER_BROKERS $KT send --delay-ms 2000 --payload hi" >&2
  echo "    KTIMER_BROKERS=$KTIMER_BROKERS $KT tail" >&2
  echo "    $KT timers list --admin-url http://127.0.0.1:$ADMIN_PORT" >&2
  echo "    the web console: http://127.0.0.1:$ADMIN_PORT/" >&2
  say "press Ctrl-C to stop everything"
  wait "${PIDS[2]}" || true
else
  say "demo done; stopping ktimer, the broker and Redis"
fi
