#!/usr/bin/env bash
# The playground page in headless Chromium:
#   run_test.sh PATH/TO/troupe-serve ARTIFACT_DIR
# Installs the pinned playwright-core with `npm ci` (needs the npm registry or npm's
# cache), then runs playground_test.mjs, which starts and stops troupe-serve itself
# (it restarts it once) and drives Debian's /usr/bin/chromium. Screenshots land in
# ARTIFACT_DIR. Anything missing (node, npm, chromium, the package) is a failure, not a skip.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
serve="${1:-$root/build/bin/troupe-serve}"
artifacts="${2:-$root/build/test-artifacts/playground}"
test_timeout_s=240  # below CTest's 300 s, so that the test still stops its server

fail() { echo "playground/run_test.sh: FAILED: $*" >&2; exit 1; }

cd "$root"
command -v node >/dev/null && command -v npm >/dev/null ||
  fail "node and npm are needed (scripts/install-deps installs them)"
[ -x /usr/bin/chromium ] || fail "no /usr/bin/chromium: install Debian's chromium (scripts/install-deps does)"
[ -x "$serve" ] || fail "no troupe-serve at $serve (build it first)"

# One install at a time into node_modules (two build trees may run this test at once);
# the lock is held until this script exits, so no other run replaces node_modules under this one.
exec 9>"${TMPDIR:-/tmp}/troupe-playground-npm.lock"
flock -w 600 9 || fail "timed out waiting for another run's npm ci"
echo "run_test.sh: npm ci --prefix tests/integration/playground" >&2
timeout 180 npm ci --prefix "$here" --prefer-offline --no-audit --no-fund --loglevel=error ||
  fail "npm ci could not install the pinned playwright-core (is the npm registry reachable?)"

mkdir -p "$artifacts"
rm -f "$artifacts"/*.png
rc=0
timeout "$test_timeout_s" node "$here/playground_test.mjs" "$serve" "$artifacts" || rc=$?
[ "$rc" -ne 124 ] || echo "playground/run_test.sh: the test ran past $test_timeout_s s" >&2
[ "$rc" -eq 0 ] || fail "playground_test.mjs exited with status $rc"
for shot in playground-generating.png playground-done.png; do
  [ -s "$artifacts/$shot" ] || fail "the test passed but left no $artifacts/$shot"
done
echo "playground/run_test.sh: passed; screenshots in $artifacts" >&2
