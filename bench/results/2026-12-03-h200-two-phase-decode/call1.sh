#!/usr/bin/env bash
# Call 1: two-phase batch-1 decode. The new and touched tests, then bench_engine_gpu --decode-only
# (13B decode rows) for four variants, alternated twice:
#   two   two-phase, k/v GEMV forked after the norm, compute stream at the greatest priority (the default)
#   one   --one-phase-decode (as before this change)
#   afterq  TROUPE_FORK_AFTER_Q=1: forked after q's RoPE
#   equal   TROUPE_EQUAL_PRIORITY=1: compute stream at the default priority
# then the whole paged-attention test and memcheck of the new cases.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
B=build-gpu/bin
nvidia-smi -L >"$OUT/machine.txt" 2>&1
step() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s" >>"$OUT/steps.txt"
}
step rope 60 $B/rope_write_kv_gpu_test
step attention-two-phase 200 $B/paged_attention_gpu_test --test-case="*two-phase*"
step runner 120 $B/cuda_model_runner_gpu_test
for i in 1 2; do
  step engine-two-$i 100 $B/bench_engine_gpu --decode-only --out "$OUT/engine-two-$i.md"
  step engine-one-$i 100 $B/bench_engine_gpu --decode-only --one-phase-decode --out "$OUT/engine-one-$i.md"
  step engine-afterq-$i 100 env TROUPE_FORK_AFTER_Q=1 $B/bench_engine_gpu --decode-only --out "$OUT/engine-afterq-$i.md"
  step engine-equal-$i 100 env TROUPE_EQUAL_PRIORITY=1 $B/bench_engine_gpu --decode-only --out "$OUT/engine-equal-$i.md"
done
for f in "$OUT"/engine-*.md; do echo "== $(basename $f)"; grep "decode batch" "$f" | cut -d'|' -f2,3; done >"$OUT/decode-summary.txt"
step engine-cuda 120 $B/engine_cuda_gpu_test
step engine-cuda-protocols 120 $B/engine_cuda_protocols_gpu_test
step memcheck-two-phase 150 compute-sanitizer --tool memcheck --error-exitcode 1 $B/paged_attention_gpu_test --test-case="*two-phase*"
step memcheck-rope 60 compute-sanitizer --tool memcheck --error-exitcode 1 $B/rope_write_kv_gpu_test
step attention-all 200 $B/paged_attention_gpu_test
