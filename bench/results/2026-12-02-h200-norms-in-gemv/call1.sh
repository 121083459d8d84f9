#!/usr/bin/env bash
# Call 1 (base 5bf713b + the first version of norms-in-gemv-not-kept.diff, whose final version is in git at 0df4fd9): the fused GEMV forms' tests, then an A/B of the batch-1 step with the norms folded
# into the GEMVs (default) and unfolded (--unfolded-norms), alternated, then the GEMV kernel
# rows and the rest of the checks while time is left. Run from the repository root on the GPU machine.
set -u
start=$(date +%s)
left() { echo $((560 - ($(date +%s) - start))); }
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
  tail -n 40 "$OUT/step.log" >>"$log"
}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.draw,temperature.gpu --format=csv >"$log" 2>&1
step gemv_gpu_test 60 $b/gemv_gpu_test
step cuda_model_runner_gpu_test 120 $b/cuda_model_runner_gpu_test
step bench-folded-1 130 $b/bench_engine_gpu --out $OUT/engine-folded-1.md
step bench-unfolded-1 130 $b/bench_engine_gpu --unfolded-norms --out $OUT/engine-unfolded-1.md
step bench-folded-2 130 $b/bench_engine_gpu --out $OUT/engine-folded-2.md
step bench-unfolded-2 130 $b/bench_engine_gpu --unfolded-norms --out $OUT/engine-unfolded-2.md
step bench-gemv 60 $b/bench_kernels_gpu --gemv --out $OUT/gemv.md
step paged_attention_gpu_test 90 $b/paged_attention_gpu_test
step memcheck-gemv 90 compute-sanitizer --tool memcheck $b/gemv_gpu_test -tc='*fused*,*rms_norm_gemv*,*gemv_add*'
