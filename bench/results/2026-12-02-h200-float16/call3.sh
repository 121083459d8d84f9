#!/usr/bin/env bash
# Call 3 (the committed GEMV, fp16 widened by conversion): the GEMV test with its new case of
# subnormal fp16 weights, and its memcheck. Run from the repository root on the GPU machine.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
timeout 120 build-gpu/bin/gemv_gpu_test >"$OUT/gemv_gpu_test.txt" 2>&1; echo "rc=$?" >>"$OUT/gemv_gpu_test.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/bin/gemv_gpu_test >"$OUT/memcheck-gemv.txt" 2>&1
echo "rc=$?" >>"$OUT/memcheck-gemv.txt"
grep -h "test cases\|assertions\|ERROR SUMMARY\|rc=" "$OUT"/*.txt
