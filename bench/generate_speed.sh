#!/usr/bin/env bash
# troupe-generate decode speed on the bundled model, 1 thread and 2 threads:
# 480 tokens (the 512 context minus the prompt), EOS ignored, 5 runs each, the
# median of the tokens/s that troupe-generate prints on stderr.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin}/troupe-generate"
for threads in 1 2; do
  rates=()
  for run in 1 2 3 4 5; do
    rate=$("$bin" --model "$root/models/stories260k" --prompt "Once upon a time" --max-tokens 480 --ignore-eos \
             --seed "$run" --threads "$threads" 2>&1 >/dev/null | sed -n 's/.*\] \([0-9.]*\) tokens\/s.*/\1/p')
    rates+=("$rate")
  done
  median=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n 3p)
  echo "threads=$threads tokens/s runs: ${rates[*]} median: $median"
done
