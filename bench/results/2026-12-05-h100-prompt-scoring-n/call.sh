#!/usr/bin/env bash
# Issue 37, third part: n / best_of on device=cuda, prompt_logprobs scored on the GPU.
# Tests, memcheck, then 5 sampling benches (decode rows + the 1,000-token prompt-scoring prefill).
set -u
mkdir -p build-gpu && tar -C build-gpu -xJf build-carry/build-gpu.tar.xz
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
B=build-gpu/bin
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
git log --oneline -1 2>/dev/null
for t in cuda_row_sampler_gpu_test sampling_gpu_test engine_cuda_protocols_gpu_test cuda_model_runner_gpu_test engine_cuda_gpu_test; do
  s=$(date +%s.%N); timeout 200 $B/$t > $L/$t.log 2>&1; rc=$?; e=$(date +%s.%N)
  echo "TEST $t rc=$rc $(awk -v a=$s -v b=$e 'BEGIN{printf "%.1f s", b-a}')"; tail -3 $L/$t.log
  [ $rc -ne 0 ] && grep -B2 -A12 "ERROR" $L/$t.log | head -80
done
if command -v compute-sanitizer >/dev/null; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/cuda_row_sampler_gpu_test > $L/memcheck.log 2>&1
  echo "MEMCHECK cuda_row_sampler rc=$?"; tail -3 $L/memcheck.log
fi
for i in 1 2 3 4 5; do
  timeout 170 $B/bench_engine_gpu --sampling-only --models models --out $OUT/sampling-$i.md > $L/bench-$i.log 2>&1
  echo "BENCH $i rc=$?"
done
grep -E "prompt_logprobs|host sampler|sampled on the GPU \|" $OUT/sampling-1.md | cut -c1-140
