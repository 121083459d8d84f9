#!/usr/bin/env bash
# GPU call 1 (issue 43: mixture of experts): the CPU goldens of every family (hf_reference.py --tiny,
# transformers on the CPU; MoE ones new); the MoE kernels against their CPU loops; the CUDA runner
# against the CPU runner (MoE cases new; the rest: the MLP's restructuring changed nothing); every
# transformers-built family against troupe's logits (Mixtral, Qwen2-MoE, Qwen3-MoE new);
# bench_kernels_gpu --moe x 5; bench_engine_gpu --moe-only once. Ordered by what matters most.
source scripts/gpu-call-lib.sh
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" | tee -a $L
timed "hf_reference.py --tiny" 150 python3 tests/gpu/hf_reference.py --tiny $OUT/families > $OUT/families.log 2>&1
tail -3 $OUT/families.log | tee -a $L
tar -C $OUT -cf $OUT/families.tar families families.log && rm -rf $OUT/families
TAIL=25 one 200 moe_gpu_test "*"
TAIL=30 one 240 cuda_model_runner_gpu_test "*"
timed "hf_reference.py" 200 python3 tests/gpu/hf_reference.py $OUT/hf > $OUT/hf_reference.log 2>&1
grep -i "experts\|moe\|mixtral" $OUT/hf_reference.log | head -40 | tee -a $L; tail -4 $OUT/hf_reference.log | tee -a $L
TAIL=80 one 300 hf_reference_gpu_test "*" TROUPE_HF_REFERENCE_DIR=$OUT/hf
rm -rf $OUT/hf
for r in 1 2 3 4 5; do
  timed "bench_kernels_gpu --moe run $r" 60 $B/bench_kernels_gpu --moe --out $OUT/moe-kernels-$r.md > $OUT/moe-kernels-$r.log 2>&1
done
grep -h "moe_grouped" $OUT/moe-kernels-*.md | sort | tee -a $L
timed "bench_engine_gpu --moe-only" 150 $B/bench_engine_gpu --moe-only --out $OUT/moe-engine-1.md > $OUT/moe-engine-1.log 2>&1
cat $OUT/moe-engine-1.md | tee -a $L; tail -5 $OUT/moe-engine-1.log | tee -a $L
tar -C $OUT -cf $OUT/logs.tar $(cd $OUT && ls *.log *.md fail-*.txt 2>/dev/null)
[ $failed = 0 ]
