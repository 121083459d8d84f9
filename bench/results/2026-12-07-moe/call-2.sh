#!/usr/bin/env bash
# GPU call 2: bench_engine_gpu --moe-only runs 2-5 (run 1 was call 1's); issue 44's decode-aware chunked
# prefill: troupe-serve, 8B shape (dummy bf16, GPT-2's tokenizer lent), max-num-seqs 256, troupe-bench over
# SSE, 1,024 requests of 128 / 128 tokens sent at once, 256 in flight, engine.max-prefill-tokens-with-decodes
# 0 (off) against 256, alternating, 5 runs each; last, hf_reference_gpu_test's Qwen2 case again (its 2-rank
# run gave up in call 1).
source scripts/gpu-call-lib.sh
for r in 2 3 4 5; do
  timed "bench_engine_gpu --moe-only run $r" 60 $B/bench_engine_gpu --moe-only --out $OUT/moe-engine-$r.md > $OUT/moe-engine-$r.log 2>&1
done
grep -h "decode\|prefill" $OUT/moe-engine-*.md | sort | tee -a $L
base="--model.path=models/llama3-8b-shape --model.load-format=dummy --model.tokenizer=tests/data/gpt2 --engine.device=cuda --engine.max-num-seqs=256 --engine.max-model-len=2048"
for r in 1 2 3 4 5; do
  for cap in 0 256; do
    SERVE_ARGS="$base --engine.max-prefill-tokens-with-decodes=$cap" NUM_PROMPTS=1024 INPUT_LEN=128 OUTPUT_LEN=128 \
      CONCURRENCIES=256 TRANSPORTS=sse BENCH_ARGS="--vocab-limit 50257" \
      timed "cap $cap run $r" 45 bash bench/serve_bench.sh $OUT/cap$cap-run$r b/bin > $OUT/cap$cap-run$r.log 2>&1
    grep -E "Output token throughput|Mean TPOT|P99 TPOT|Median TTFT|P99 TTFT|P99 ITL|Failed|Successful" \
      $OUT/cap$cap-run$r/sse-c256.txt 2>/dev/null | tr -s ' ' | paste -sd'|' | tee -a $L
  done
done
timed "hf_reference.py qwen2" 60 python3 tests/gpu/hf_reference.py $OUT/hf qwen2 > $OUT/hf_reference.log 2>&1
TAIL=12 one 120 hf_reference_gpu_test "*Qwen2 (q/k/v bias*" TROUPE_HF_REFERENCE_DIR=$OUT/hf
rm -rf $OUT/hf
tar -C $OUT -cf $OUT/runs.tar $(cd $OUT && ls -d cap* *.md *.log 2>/dev/null)
rm -rf $OUT/cap*-run*/ $OUT/*.md $OUT/cap*.log $OUT/moe-engine-*.log
[ $failed = 0 ]
