#!/usr/bin/env bash
# The README's second command: installs what is missing (Redis, the Tansu broker) and runs
# the whole test suite. The tests start their own servers on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
KTIMER_TANSU_BIN=$(scripts/install-deps.sh --for-tests)
export KTIMER_TANSU_BIN
# The service's log of in-process instances, printed with a failing test's output (a passing
# test's is dropped): what a fault test's failure is read from.
export KTIMER_TEST_LOG=${KTIMER_TEST_LOG:-ktimer=info}
echo "==> building and running the tests (the first build takes a few minutes)..." >&2
if [ "$#" -eq 0 ]; then
  echo "==> the alert rules' unit tests (promtool test rules)..." >&2
  promtool test rules deploy/prometheus/rules_test.yml
  echo "==> the deployment files (docker-compose.yml and what it mounts)..." >&2
  python3 scripts/check-deploy.py
  echo "==> asyncapi.yaml (the AsyncAPI parser, and avsc for its Avro schemas)..." >&2
  (cd scripts/asyncapi && npm ci --no-audit --no-fund --loglevel=error >/dev/null && node check.mjs)
fi
echo "==> the Node.js examples' packages (examples/node, npm ci)..." >&2
(cd examples/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
cargo test --locked "$@"
if [ "$#" -eq 0 ]; then
  echo "==> the end-to-end and cron tests again, on a Redis Cluster of three primaries..." >&2
  KTIMER_TEST_REDIS_CLUSTER=1 cargo test --locked --test e2e --test cron
fi
