#!/usr/bin/env bash
# One GPU call: tensor-parallel fixes (legacy-stream ordering), the TP=2 reruns and the Qwen3 GPU tests.
mkdir -p build-gpu && tar -C build-gpu -xJf build-carry/tp.tar.xz
export TROUPE_DATA_DIR=$PWD
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; done
B=build-gpu/bin; L=$OUT/all.txt; n=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $L
one() { # limit binary pattern [env...]
  local t=$1 b=$2 p=$3; shift 3
  echo "=== $b: $p $*" | tee -a $L; local s=$(date +%s)
  env "$@" timeout $t $B/$b -tc="$p" > $OUT/case.txt 2>&1; local rc=$?
  grep -v "^$" $OUT/case.txt | grep -v "info\]" | tail -${TAIL:-10} | tee -a $L
  echo "rc=$rc t=$(( $(date +%s) - s ))" | tee -a $L; n=$((n+1)); [ $rc = 0 ] || cp $OUT/case.txt $OUT/fail-$n.txt
}
for i in 1 2 3; do one 60 tensor_parallel_gpu_test "peer all-reduce on one*"; done
for p in "a group of one rank*" "peer all-gather*" "peer collectives give up*" "a device group refuses*" "float32 rank runners*" "bfloat16 rank runners*" "rank runners sample*" "a rank whose step fails*"; do one 30 tensor_parallel_gpu_test "$p"; done
TAIL=4 one 120 engine_tensor_parallel_gpu_test "*"
TAIL=6 one 60 rope_write_kv_gpu_test "*"
TAIL=12 one 120 cuda_model_runner_gpu_test "*"
hf=$OUT/hf; s=$(date +%s); timeout 90 python3 tests/gpu/hf_reference.py $hf > $OUT/hfpy.txt 2>&1; echo "hf_reference.py rc=$? t=$(( $(date +%s) - s ))" | tee -a $L; tail -3 $OUT/hfpy.txt | tee -a $L
TAIL=30 one 150 hf_reference_gpu_test "*" TROUPE_HF_REFERENCE_DIR=$hf
rm -rf $hf
TAIL=30 one 120 engine_cuda_protocols_gpu_test "*" TROUPE_TEST_TENSOR_PARALLEL=2 CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
