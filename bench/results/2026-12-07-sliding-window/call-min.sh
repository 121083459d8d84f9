#!/usr/bin/env bash
# The smallest useful GPU call when little device time is left: transformers-built sliding-window Mistral,
# Qwen2 and Phi-3 against troupe's logits (prefill, and decode a step a token past the window), then the
# engine on a sliding-window model against the CPU.
mkdir -p b && tar -C b -xJf build-carry/so.tar.xz
export TROUPE_DATA_DIR=$PWD LD_LIBRARY_PATH=$PWD/b/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
B=b/bin; L=$OUT/all.txt
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $L; git log --oneline -1 | tee -a $L
s=$(date +%s); timeout 150 python3 tests/gpu/hf_reference.py $OUT/hf mistral_sliding qwen2_sliding phi3_sliding > $OUT/hf_reference.log 2>&1
echo "hf_reference.py rc=$? t=$(( $(date +%s) - s ))" | tee -a $L; tail -4 $OUT/hf_reference.log | tee -a $L
s=$(date +%s); TROUPE_HF_REFERENCE_DIR=$OUT/hf timeout 120 $B/hf_reference_gpu_test -tc="*window*,*Phi-3*" > $OUT/hf-test.txt 2>&1
echo "hf_reference_gpu_test rc=$? t=$(( $(date +%s) - s ))" | tee -a $L; grep -v "^$" $OUT/hf-test.txt | tail -40 | tee -a $L
rm -rf $OUT/hf
s=$(date +%s); timeout 100 $B/engine_cuda_gpu_test -tc="*sliding*" > $OUT/engine.txt 2>&1
echo "engine_cuda_gpu_test rc=$? t=$(( $(date +%s) - s ))" | tee -a $L; grep -v "info\]" $OUT/engine.txt | grep -v "^$" | tail -8 | tee -a $L
