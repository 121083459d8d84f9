#!/usr/bin/env bash
# Call 2 (the fp16 GEMV widens w by its bits, x by conversion: half the conversions): the GEMV
# test (a new case of subnormal fp16 weights) and its memcheck, the runner test, then
# bench_kernels_gpu --gemv and bench_engine_gpu, old binaries (build-gpu/old: fp16 widened by
# conversion, both) against new, alternated. Run from the repository root on the GPU machine.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
b=build-gpu/bin o=build-gpu/old
mkdir -p /tmp/r
timeout 120 $b/gemv_gpu_test >/tmp/r/gemv_gpu_test.txt 2>&1; echo "rc=$?" >>/tmp/r/gemv_gpu_test.txt
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 $b/gemv_gpu_test >/tmp/r/memcheck-gemv.txt 2>&1
echo "rc=$?" >>/tmp/r/memcheck-gemv.txt
timeout 120 $b/cuda_model_runner_gpu_test >/tmp/r/cuda_model_runner_gpu_test.txt 2>&1
echo "rc=$?" >>/tmp/r/cuda_model_runner_gpu_test.txt
for round in 1 2; do
  timeout 150 $o/bench_kernels_gpu --gemv --out /tmp/r/gemv-old-$round.md >/dev/null 2>&1
  timeout 150 $b/bench_kernels_gpu --gemv --out /tmp/r/gemv-new-$round.md >/dev/null 2>&1
done
timeout 120 $o/bench_engine_gpu --out /tmp/r/engine-old.md >/dev/null 2>&1
timeout 120 $b/bench_engine_gpu --out /tmp/r/engine-new.md >/dev/null 2>&1
tar -czf "$OUT/r.tgz" -C /tmp r
grep -h "test cases\|assertions\|rc=" /tmp/r/*.txt
