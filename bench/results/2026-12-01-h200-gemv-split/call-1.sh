#!/usr/bin/env bash
# Call 1 on the GPU machine (repository root): the split GEMV's test and memcheck, the
# per-layer sweep, and whole decode steps old/new alternating in one process each.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
B=build-gpu/bin
tar -xzf build-gpu/bundle.tgz -C build-gpu
$B/gemv_gpu_test > $OUT/1-gemv_gpu_test.txt 2>&1; echo "rc=$?" >> $OUT/1-gemv_gpu_test.txt
compute-sanitizer --tool memcheck --error-exitcode 1 $B/gemv_gpu_test > $OUT/1-memcheck.txt 2>&1; echo "rc=$?" >> $OUT/1-memcheck.txt
tail -3 $OUT/1-gemv_gpu_test.txt $OUT/1-memcheck.txt
$B/bench_kernels_gpu --gemv --out $OUT/1-gemv-sweep.md > /dev/null 2>$OUT/1-sweep.err
cat $OUT/1-gemv-sweep.md
for i in 1 2; do
  build-gpu/old/bench_engine_gpu --out $OUT/1-engine-old-$i.md > /dev/null 2>&1
  $B/bench_engine_gpu --out $OUT/1-engine-new-$i.md > /dev/null 2>&1
  TROUPE_EXPERIMENT_GEMV_WIDE_ONLY=1 $B/bench_engine_gpu --out $OUT/1-engine-newkernel-oldrule-$i.md > /dev/null 2>&1
done
grep -H "batch 1[ ,]" $OUT/1-engine-*.md | grep -v "top-p" | sed "s#.*/1-engine-##" | cut -c1-150
