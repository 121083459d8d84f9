#!/usr/bin/env bash
# Runs one third-party client test against a troupe-serve of its own:
#   run_test.sh python_websockets|openai_npm [PATH/TO/troupe-serve]
# Starts the server on an ephemeral port with configs/stories260k-cpu.ini, runs the
# client test with that port, then stops the server with SIGTERM (a trap does it on
# any exit, and kills it if it does not stop). Fails, with the server's log, when the
# test fails, the server dies under it, or the server does not stop cleanly.
# openai_npm first installs the pinned openai package with `npm ci` (needs the npm
# registry or npm's cache: without them the test fails, it is not skipped).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
which="${1:-}"
serve="${2:-$root/build/bin/troupe-serve}"
test_timeout_s=240  # below CTest's 300 s, so that the trap still stops the server
stop_timeout_s=20

fail() { echo "run_test.sh $which: FAILED: $*" >&2; exit 1; }

cd "$root"
case "$which" in
  python_websockets)
    python=/usr/bin/python3
    [ -x "$python" ] || python="$(command -v python3)" || fail "python3 not found (scripts/install-deps installs it)"
    "$python" -c 'import websockets' 2>/dev/null ||
      fail "$python cannot import websockets: install python3-websockets (scripts/install-deps does)"
    client=("$python" "$here/ws_client_test.py")
    ;;
  openai_npm)
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
      fail "node and npm are needed (scripts/install-deps installs them)"
    fi
    # One install at a time into the shared node_modules (two build trees may run this test at once);
    # the lock is held until this script exits, so no other run replaces node_modules under this one.
    exec 9>"${TMPDIR:-/tmp}/troupe-third-party-npm.lock"
    flock -w 600 9 || fail "timed out waiting for another run's npm ci"
    echo "run_test.sh: npm ci --prefix tests/integration/third_party" >&2
    timeout 180 npm ci --prefix "$here" --no-audit --no-fund --loglevel=error ||
      fail "npm ci could not install the pinned openai package (is the npm registry reachable?)"
    client=(node "$here/openai_client_test.mjs")
    ;;
  *)
    echo "usage: $0 python_websockets|openai_npm [PATH/TO/troupe-serve]" >&2
    exit 2
    ;;
esac
[ -x "$serve" ] || fail "no troupe-serve at $serve (build it first)"

log="$(mktemp "${TMPDIR:-/tmp}/troupe-serve-$which.XXXXXX")"
server_pid=""
client_pid=""
show_log() { echo "--- troupe-serve log ($serve) ---" >&2; tail -n 60 "$log" >&2; echo "--- end of log ---" >&2; }

# Stops the server; returns non-zero when it had to be killed or exited with an error.
stop_server() {
  [ -n "$server_pid" ] || return 0
  local pid="$server_pid" rc=0 waited=0
  server_pid=""
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((stop_timeout_s * 10)) ]; do
    sleep 0.1; waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "run_test.sh $which: troupe-serve did not stop within $stop_timeout_s s of SIGTERM; killed" >&2
    return 1
  fi
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run_test.sh $which: troupe-serve exited with status $rc after SIGTERM" >&2
    return 1
  fi
  return 0
}
on_exit() {
  local rc=$?
  if [ -n "$client_pid" ]; then kill -TERM "$client_pid" 2>/dev/null || true; fi
  if [ -n "$server_pid" ]; then stop_server || true; fi
  rm -f "$log"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$serve" --config-file=configs/stories260k-cpu.ini --server.port=0 >"$log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 600); do  # 60 s
  port="$(sed -n 's/^listening on [0-9.]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -n 1)"
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { wait "$server_pid" || true; server_pid=""; show_log; fail "troupe-serve exited at start"; }
  sleep 0.1
done
[ -n "$port" ] || { show_log; fail "troupe-serve printed no 'listening on' line within 60 s"; }
echo "run_test.sh: troupe-serve (pid $server_pid) listening on 127.0.0.1:$port" >&2

# In the background, so that a signal to this script runs its trap at once, not after the client.
timeout "$test_timeout_s" "${client[@]}" "$port" &
client_pid=$!
rc=0
wait "$client_pid" || rc=$?
client_pid=""
if [ "$rc" -eq 124 ]; then echo "run_test.sh $which: the client test ran past $test_timeout_s s" >&2; fi
if ! kill -0 "$server_pid" 2>/dev/null; then
  wait "$server_pid" || true
  server_pid=""
  show_log
  fail "troupe-serve died during the test"
fi
stop_server || { show_log; fail "troupe-serve did not shut down cleanly"; }
if [ "$rc" -ne 0 ]; then
  show_log
  fail "the client test exited with status $rc"
fi
echo "run_test.sh $which: passed" >&2
