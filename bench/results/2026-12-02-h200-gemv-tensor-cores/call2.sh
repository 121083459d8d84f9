#!/usr/bin/env bash
# Call 2 (binaries of the tree in gemv-tensor-cores-not-kept.diff, kept in git at 5a44e82): variants of the tensor-core
# GEMV (warps a tile; 64 or 128 bytes of a row per 4 lanes a step; 16 rows a warp with w as A, or 8
# with w as B) against the CUDA-core GEMV and cuBLASLt at m = 1 and 4; ncu of one launch each of
# the CUDA-core GEMV and the first tensor-core variant (13B qkv, m = 1).
set -u
export PATH=/usr/local/cuda/bin:$PATH
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
timeout 200 build-gpu/bin/gemv_gpu_test > $OUT/gemv_gpu_test.log 2>&1
echo "gemv_gpu_test rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $OUT/gemv_gpu_test.log | tr '\n' ' ')"
grep -E "ERROR" -A4 $OUT/gemv_gpu_test.log | head -20
timeout 150 build-gpu/bin/bench_kernels_gpu --gemv-tensor-cores --out $OUT/gemv-variants.md >/dev/null 2>$OUT/errors.txt
echo "bench rc=$?"
cut -d'|' -f2,3,8 $OUT/gemv-variants.md
for k in gemv_kernel gemv_tc_kernel; do
  timeout 100 ncu --kernel-name regex:"^$k" --launch-skip 5 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
    build-gpu/bin/bench_kernels_gpu --gemv-tensor-cores > $OUT/ncu-$k.txt 2>&1
  echo "ncu $k rc=$?"
done
