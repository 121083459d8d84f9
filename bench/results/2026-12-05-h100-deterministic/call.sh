#!/usr/bin/env bash
# Issue 37, deterministic mode: GPU tests (new + regressions), then bench_engine_gpu --deterministic-only x N.
set -u
mkdir -p build-gpu && tar -C build-gpu -xJf build-carry/build-gpu.tar.xz
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
B=build-gpu/bin
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
git log --oneline -1 2>/dev/null
T0=$(date +%s)
for t in ${TESTS:-deterministic_gpu_test engine_cuda_protocols_gpu_test cublaslt_gemm_gpu_test cuda_model_runner_gpu_test}; do
  s=$(date +%s.%N); timeout 240 $B/$t > $L/$t.log 2>&1; rc=$?; e=$(date +%s.%N)
  echo "TEST $t rc=$rc $(awk -v a=$s -v b=$e 'BEGIN{printf "%.1f s", b-a}')"; tail -3 $L/$t.log
  grep -h "MESSAGE\|without engine\|per-shape" $L/$t.log | head -12
  [ $rc -ne 0 ] && grep -B2 -A14 "ERROR" $L/$t.log | head -100
done
for i in $(seq 1 ${BENCH_RUNS:-5}); do
  [ $(( $(date +%s) - T0 )) -gt ${BENCH_DEADLINE:-480} ] && { echo "BENCH $i skipped (time)"; continue; }
  s=$(date +%s); timeout 170 $B/bench_engine_gpu --deterministic-only --models models --out $OUT/deterministic-$i.md > $L/bench-$i.log 2>&1
  echo "BENCH $i rc=$? $(( $(date +%s) - s )) s"
done
[ -f $OUT/deterministic-1.md ] && grep "^|" $OUT/deterministic-1.md | cut -c1-160
if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then
  for shape in llama3-8b-shape llama2-13b-shape; do
    timeout 150 ncu --profile-from-start off --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      --print-summary per-kernel $B/bench_engine_gpu --models models --profile-decode $shape 12 bf16 > $OUT/ncu-$shape-b12.txt 2>&1
    echo "NCU $shape rc=$?"; grep -E "^\s+[a-z_].*\(|gpu__time_duration.sum" $OUT/ncu-$shape-b12.txt | head -60 | cut -c1-150
  done
fi
