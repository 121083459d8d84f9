#!/usr/bin/env bash
# CTest's check of examples/embed: the program must exit 0 AND print both requests' ends (in either
# order), with no failure or sanitizer report in its output. A pass regex alone ignores the exit code.
# Usage: run_test.sh PATH/TO/embed_example [its arguments...]
set -uo pipefail
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"

failures=()
[ "$status" -eq 0 ] || failures+=("exit status $status, want 0")
grep -q 'finished id=1 reason=length tokens=32 ' <<<"$output" ||
  failures+=("no 'finished id=1 reason=length tokens=32' line (the greedy request, ignore_eos, 32 tokens)")
grep -q 'finished id=2 reason=' <<<"$output" || failures+=("no 'finished id=2' line (the sampled request)")
bad=$(grep -E 'failed id=|embed_example: |Sanitizer|runtime error:' <<<"$output" | head -3)
[ -z "$bad" ] || failures+=("error lines: $bad")

if [ ${#failures[@]} -gt 0 ]; then
  printf 'run_test.sh: FAIL: %s\n' "${failures[@]}"
  exit 1
fi
echo "run_test.sh: passed"
