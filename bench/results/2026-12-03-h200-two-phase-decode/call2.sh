#!/usr/bin/env bash
# Call 2: the runner test whose log call 1 could not bring back, and the two-phase attention
# cases with the large-query case fixed (q scaled by 2^20, as the fp16-range test does), plus
# memcheck of them; everything in one tarball.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
B=build-gpu/bin
mkdir -p /tmp/c2
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"/tmp/c2/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s" >>/tmp/c2/steps.txt; }
step runner 120 $B/cuda_model_runner_gpu_test
step attention-two-phase 200 $B/paged_attention_gpu_test --test-case="*two-phase*"
step memcheck-two-phase 200 compute-sanitizer --tool memcheck --error-exitcode 1 $B/paged_attention_gpu_test --test-case="*two-phase decode refuses*,*two-phase decode merges*"
tar -czf "$OUT/call2.tgz" -C /tmp c2
cat /tmp/c2/steps.txt
