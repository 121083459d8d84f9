#!/usr/bin/env bash
# Call 3: the decode attention rows again, old and new (call 2's binaries) alternated twice, to
# separate the plan's effect from the run-to-run spread that call 2's single pair showed.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
for round in 1 2; do
  for v in old new; do
    b=build-gpu/bin; [ $v = old ] && b=build-gpu/old
    timeout 60 $b/bench_kernels_gpu --decode-attention --out "$OUT/attn-$v-$round.md" >/dev/null 2>>"$OUT/errors.txt"
  done
done
