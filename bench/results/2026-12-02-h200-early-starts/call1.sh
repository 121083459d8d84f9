#!/usr/bin/env bash
# Call 1: the kernel tests and the runner / engine tests with every early start on (the
# default), then bench_engine_gpu under TROUPE_EARLY=0 (the base's launches), 7 (all), and
# each bit alone, alternated.
set -u
start=$(date +%s)
left() { echo $((570 - ($(date +%s) - start))); }
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
b=build-gpu/bin
log=$OUT/tests.log
step() { # step NAME LIMIT CMD...: runs CMD under a timeout if enough time is left
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
for t in rms_norm silu_and_mul rope_write_kv gemv cuda_model_runner engine_cuda engine_cuda_protocols; do
  step $t 90 $b/${t}_gpu_test
done
step paged_attention_gpu_test 150 $b/paged_attention_gpu_test
for t in rms_norm silu_and_mul rope_write_kv; do
  step memcheck-$t 30 compute-sanitizer --tool memcheck --error-exitcode 9 $b/${t}_gpu_test
done
for round in 1 2; do
  for mode in 0 7; do
    export TROUPE_EARLY=$mode; step bench-$mode-$round 70 $b/bench_engine_gpu --out $OUT/engine-$mode-$round.md
  done
done
for mode in 1 2 4; do
  export TROUPE_EARLY=$mode; step bench-$mode 70 $b/bench_engine_gpu --out $OUT/engine-$mode.md
done
rm -f $OUT/step.log
