#!/usr/bin/env bash
# One GPU call: INT4 (AWQ) weights kept on the GPU: kernels, runner, engine, then their benchmarks.
mkdir -p b && tar -C b -xJf build-carry/so.tar.xz
export TROUPE_DATA_DIR=$PWD LD_LIBRARY_PATH=$PWD/b/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
B=b/bin; L=$OUT/all.txt; n=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $L; git log --oneline -1 | tee -a $L
one() { # limit binary pattern [env...]
  local t=$1 b=$2 p=$3; shift 3
  echo "=== $b: $p $*" | tee -a $L; local s=$(date +%s)
  env "$@" timeout $t $B/$b -tc="$p" > $OUT/case.txt 2>&1; local rc=$?
  grep -v "^$" $OUT/case.txt | grep -v "info\]" | tail -${TAIL:-10} | tee -a $L
  echo "rc=$rc t=$(( $(date +%s) - s ))" | tee -a $L; n=$((n+1)); [ $rc = 0 ] || cp $OUT/case.txt $OUT/fail-$n.txt
}
TAIL=8 one 150 int4_linear_gpu_test "*"
TAIL=40 one 120 cuda_model_runner_gpu_test "*INT4*"
TAIL=8 one 150 engine_cuda_gpu_test "*AWQ*"
s=$(date +%s); timeout 100 $B/bench_kernels_gpu --int4-gemv --out $OUT/int4-gemv.md > $OUT/int4-gemv.log 2>&1; echo "bench_kernels_gpu --int4-gemv rc=$? t=$(( $(date +%s) - s ))" | tee -a $L
grep -E "int4|bf16 GEMV|cuBLASLt" $OUT/int4-gemv.md | head -60 | tee -a $L
s=$(date +%s); timeout 300 $B/bench_engine_gpu --quantized-only --out $OUT/quantized-engine.md > $OUT/quantized-engine.log 2>&1; echo "bench_engine_gpu --quantized-only rc=$? t=$(( $(date +%s) - s ))" | tee -a $L
tail -40 $OUT/quantized-engine.md | tee -a $L
