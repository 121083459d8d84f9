#!/usr/bin/env bash
# Issue 37, first part: device penalties and logprobs. Tests, memcheck, then 5 sampling benches.
set -u
mkdir -p build-gpu && tar -C build-gpu -xJf .gpu-carry/build-gpu.tar.xz
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
B=build-gpu/bin
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for t in cuda_row_sampler_gpu_test sampling_gpu_test cuda_model_runner_gpu_test engine_cuda_gpu_test engine_cuda_protocols_gpu_test; do
  s=$(date +%s.%N); timeout 200 $B/$t > $L/$t.log 2>&1; rc=$?; e=$(date +%s.%N)
  echo "TEST $t rc=$rc $(awk -v a=$s -v b=$e 'BEGIN{printf "%.1f s", b-a}')"; tail -4 $L/$t.log
  [ $rc -ne 0 ] && grep -B2 -A8 "ERROR" $L/$t.log | head -60
done
if command -v compute-sanitizer >/dev/null; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/cuda_row_sampler_gpu_test > $L/memcheck.log 2>&1
  echo "MEMCHECK cuda_row_sampler rc=$?"; tail -5 $L/memcheck.log
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/sampling_gpu_test > $L/memcheck2.log 2>&1
  echo "MEMCHECK sampling rc=$?"; tail -3 $L/memcheck2.log
fi
timeout 120 $B/bench_kernels_gpu --sampling --out $OUT/kernels-sampling.md > $L/kernels.log 2>&1
echo "KERNELS rc=$?"; grep -E "sample_rows|compute_logprobs|apply_penalties" $OUT/kernels-sampling.md | cut -c1-110
for i in 1 2 3 4 5; do
  timeout 120 $B/bench_engine_gpu --sampling-only --out $OUT/sampling-$i.md > $L/bench-$i.log 2>&1
  echo "BENCH $i rc=$?"
done
grep -E "GPU|graph \\|" $OUT/sampling-1.md | cut -c1-120
cp $L/cuda_row_sampler_gpu_test.log $OUT/ 2>/dev/null
