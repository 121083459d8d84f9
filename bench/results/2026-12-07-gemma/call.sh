#!/usr/bin/env bash
# One GPU call (issue 43: Gemma 2 / 3, and the sliding-window work of the stop before, which had not run
# on a GPU): the CPU goldens of every family (hf_reference.py --tiny, transformers on the CPU); the
# kernels changed for Gemma against the CPU reference (attention soft cap on every path, (1 + w) norms,
# GeGLU, scaled embeddings, logit soft cap); transformers-built sliding-window Mistral / Qwen2 / Phi-3 and
# Gemma 2 / 3 against troupe's logits; the engine on a sliding-window model; the deterministic regression;
# bench_kernels_gpu --sliding-window x 5. Ordered by what matters most (the call may be cut short).
mkdir -p b && tar -C b -xJf build-carry/so.tar.xz
export TROUPE_DATA_DIR=$PWD LD_LIBRARY_PATH=$PWD/b/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
B=b/bin; L=$OUT/all.txt; n=0; failed=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $L; git log --oneline -1 | tee -a $L
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" | tee -a $L
one() { # limit binary pattern [env...]
  local t=$1 b=$2 p=$3; shift 3
  echo "=== $b: $p $*" | tee -a $L; local s=$(date +%s)
  env "$@" timeout $t $B/$b -tc="$p" > $OUT/case.txt 2>&1; local rc=$?
  grep -v "^$" $OUT/case.txt | grep -v "info\]" | tail -${TAIL:-10} | tee -a $L
  echo "rc=$rc t=$(( $(date +%s) - s ))" | tee -a $L; n=$((n+1)); [ $rc = 0 ] || { cp $OUT/case.txt $OUT/fail-$n.txt; failed=1; }
}
s=$(date +%s); timeout 120 python3 tests/gpu/hf_reference.py --tiny $OUT/families > $OUT/families.log 2>&1
echo "hf_reference.py --tiny rc=$? t=$(( $(date +%s) - s ))" | tee -a $L; tail -3 $OUT/families.log | tee -a $L
TAIL=6 one 200 paged_attention_gpu_test "*softcap*,*soft cap*,*window*"
for t in rms_norm silu_and_mul embedding logit_softcap rope_write_kv; do TAIL=4 one 120 ${t}_gpu_test "*"; done
s=$(date +%s); timeout 240 python3 tests/gpu/hf_reference.py $OUT/hf mistral_sliding qwen2_sliding phi3_sliding gemma2 gemma3 > $OUT/hf_reference.log 2>&1
echo "hf_reference.py rc=$? t=$(( $(date +%s) - s ))" | tee -a $L; tail -6 $OUT/hf_reference.log | tee -a $L
TAIL=60 one 240 hf_reference_gpu_test "*window*,*Phi-3*,*Gemma*" TROUPE_HF_REFERENCE_DIR=$OUT/hf
rm -rf $OUT/hf
TAIL=8 one 150 engine_cuda_gpu_test "*sliding*"
TAIL=6 one 120 deterministic_gpu_test "*"
for r in 1 2 3 4 5; do
  s=$(date +%s); timeout 60 $B/bench_kernels_gpu --sliding-window --out $OUT/sliding-$r.md > $OUT/sliding-$r.log 2>&1; echo "bench_kernels_gpu --sliding-window run $r rc=$? t=$(( $(date +%s) - s ))" | tee -a $L
done
grep -h "window\|ctx" $OUT/sliding-*.md | sort | tee -a $L
[ $failed = 0 ] || exit 1
