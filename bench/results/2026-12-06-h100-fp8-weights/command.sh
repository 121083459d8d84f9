#!/usr/bin/env bash
# One GPU call: FP8 weights (kernels, runner, engine), their benchmarks, the TP=2 protocols rerun.
mkdir -p build-gpu && tar -C build-gpu -xJf build-carry/fp8.tar.xz
export TROUPE_DATA_DIR=$PWD
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; done
B=build-gpu/bin; L=$OUT/all.txt; n=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $L; git log --oneline -1 | tee -a $L
one() { # limit binary pattern [env...]
  local t=$1 b=$2 p=$3; shift 3
  echo "=== $b: $p $*" | tee -a $L; local s=$(date +%s)
  env "$@" timeout $t $B/$b -tc="$p" > $OUT/case.txt 2>&1; local rc=$?
  grep -v "^$" $OUT/case.txt | grep -v "info\]" | tail -${TAIL:-10} | tee -a $L
  echo "rc=$rc t=$(( $(date +%s) - s ))" | tee -a $L; n=$((n+1)); [ $rc = 0 ] || cp $OUT/case.txt $OUT/fail-$n.txt
}
TAIL=8 one 120 fp8_linear_gpu_test "*"
TAIL=30 one 90 cuda_model_runner_gpu_test "*FP8*"
TAIL=6 one 60 rope_write_kv_gpu_test "*"
TAIL=8 one 120 engine_cuda_gpu_test "*fp8*"
s=$(date +%s); timeout 100 $B/bench_kernels_gpu --fp8-gemv --out $OUT/fp8-gemv.md > $OUT/fp8-gemv.log 2>&1; echo "bench_kernels_gpu --fp8-gemv rc=$? t=$(( $(date +%s) - s ))" | tee -a $L
s=$(date +%s); timeout 240 $B/bench_engine_gpu --fp8-only --out $OUT/fp8-engine.md > $OUT/fp8-engine.log 2>&1; echo "bench_engine_gpu --fp8-only rc=$? t=$(( $(date +%s) - s ))" | tee -a $L
tail -30 $OUT/fp8-engine.md | tee -a $L
TAIL=30 one 150 engine_cuda_protocols_gpu_test "*deterministic*" TROUPE_TEST_TENSOR_PARALLEL=2 CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
