#!/usr/bin/env bash
# Call 2 (another experiment in the same session): MHA over a bf16 cache on the tensor-core split
# kernel (TROUPE_MHA_MMA=1) against the CUDA-core one (0): the attention test under 1 (the
# early-start tree is reverted: this also shows whether call 1's timeout was its own), then the
# decode attention rows and the engine, alternated.
set -u
start=$(date +%s)
left() { echo $((570 - ($(date +%s) - start))); }
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
b=build-gpu/bin
log=$OUT/tests.log
step() { # step NAME LIMIT CMD...
  local name=$1 limit=$2
  shift 2
  if [ "$(left)" -lt "$limit" ]; then echo "SKIP $name (time)" >>"$log"; return; fi
  local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$OUT/step.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - t0 )) s" >>"$log"
  tail -n 12 "$OUT/step.log" >>"$log"
}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.draw,temperature.gpu --format=csv >"$log" 2>&1
export TROUPE_MHA_MMA=1
step paged_attention_gpu_test-mma 170 $b/paged_attention_gpu_test -d
grep -E "^[0-9.]+ s: " $OUT/step.log >$OUT/attention-test-durations.txt
step cuda_model_runner_gpu_test-mma 30 $b/cuda_model_runner_gpu_test
for round in 1 2; do
  for mode in 0 1; do
    export TROUPE_MHA_MMA=$mode; step attn-$mode-$round 70 $b/bench_kernels_gpu --decode-attention --out $OUT/attn-$mode-$round.md
  done
done
for mode in 0 1; do
  export TROUPE_MHA_MMA=$mode; step engine-$mode 70 $b/bench_engine_gpu --out $OUT/engine-$mode.md
done
rm -f $OUT/step.log
