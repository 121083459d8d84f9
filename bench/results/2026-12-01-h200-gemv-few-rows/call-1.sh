#!/usr/bin/env bash
# One call on the GPU machine (repository root): the GEMV's test and memcheck, the per-layer
# sweep at m = 1..4 (warps a row x rows a warp), and decode steps: the binary at fd1153e ("old")
# against this tree with the GEMV allowed up to 4 rows (experiment-only environment variables).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
B=build-gpu/bin
R=/tmp/r; mkdir -p $R
tar -xzf build-gpu/bundle.tgz -C build-gpu
$B/gemv_gpu_test > $R/gemv_gpu_test.txt 2>&1; echo "rc=$?" >> $R/gemv_gpu_test.txt; tail -4 $R/gemv_gpu_test.txt
compute-sanitizer --tool memcheck --error-exitcode 1 $B/gemv_gpu_test > $R/memcheck-gemv.txt 2>&1; echo "memcheck rc=$?" | tee -a $R/memcheck-gemv.txt
timeout 150 $B/bench_kernels_gpu --gemv --out $R/gemv-sweep.md > /dev/null 2>$R/sweep.err
run() { # name, env...
  local name=$1; shift
  env "$@" timeout 80 $B/bench_engine_gpu --out $R/engine-$name.md > /dev/null 2>&1
}
runold() { timeout 80 build-gpu/old/bench_engine_gpu --out $R/engine-$1.md > /dev/null 2>&1; }
runold old-1
run rows1-1 X=1
run rows4-r2-1 TROUPE_EXPERIMENT_GEMV_ROWS=4 TROUPE_EXPERIMENT_GEMV_R=2
run rows4-r1-1 TROUPE_EXPERIMENT_GEMV_ROWS=4 TROUPE_EXPERIMENT_GEMV_R=1
run rows4-r2-2 TROUPE_EXPERIMENT_GEMV_ROWS=4 TROUPE_EXPERIMENT_GEMV_R=2
runold old-2
tar -czf $OUT/results.tgz -C $R .
grep -H "CUDA graph |\|GEMMs alone of 13B decode batch [124] " $R/engine-*.md | grep -v "top-p\|fp8" | sed "s#.*/engine-##" | cut -c1-100
