#!/usr/bin/env bash
# The second GPU call (the first, tests-call.sh, passed the kernel and runner tests): the engine's
# quantized cases; if they pass, the kernel benchmark once and the engine benchmark (--quantized-only)
# five times.
mkdir -p b && tar -C b -xJf build-carry/so.tar.xz
export TROUPE_DATA_DIR=$PWD LD_LIBRARY_PATH=$PWD/b/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
B=b/bin; L=$OUT/all.txt; n=0; failed=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $L; git log --oneline -1 | tee -a $L
one() { # limit binary pattern [env...]
  local t=$1 b=$2 p=$3; shift 3
  echo "=== $b: $p $*" | tee -a $L; local s=$(date +%s)
  env "$@" timeout $t $B/$b -tc="$p" > $OUT/case.txt 2>&1; local rc=$?
  grep -v "^$" $OUT/case.txt | grep -v "info\]" | tail -${TAIL:-10} | tee -a $L
  echo "rc=$rc t=$(( $(date +%s) - s ))" | tee -a $L; n=$((n+1)); [ $rc = 0 ] || { cp $OUT/case.txt $OUT/fail-$n.txt; failed=1; }
}
TAIL=8 one 150 engine_cuda_gpu_test "*AWQ*,*fp8*"
[ $failed = 0 ] || exit 1
s=$(date +%s); timeout 100 $B/bench_kernels_gpu --int4-gemv --out $OUT/int4-gemv.md > $OUT/int4-gemv.log 2>&1; echo "bench_kernels_gpu --int4-gemv rc=$? t=$(( $(date +%s) - s ))" | tee -a $L
grep -E "int4|cuBLASLt" $OUT/int4-gemv.md | head -60 | tee -a $L
for r in 1 2 3 4 5; do
  s=$(date +%s); timeout 150 $B/bench_engine_gpu --quantized-only --out $OUT/quantized-engine-$r.md > $OUT/quantized-engine-$r.log 2>&1; echo "bench_engine_gpu --quantized-only run $r rc=$? t=$(( $(date +%s) - s ))" | tee -a $L
done
grep -h "CUDA graph\|prefill" $OUT/quantized-engine-*.md | sort | tee -a $L
