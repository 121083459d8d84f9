#!/usr/bin/env bash
# Issue 44: decode-aware chunked prefill. troupe-serve, 8B shape (dummy bf16, GPT-2's tokenizer lent),
# max-num-seqs 256, troupe-bench over SSE: 1,024 requests of 128 / 128 tokens sent at once, 256 in flight;
# engine.max-prefill-tokens-with-decodes 0 (off, today's behaviour) against 256, alternating, 5 runs each.
mkdir -p b && tar -C b -xJf build-carry/so.tar.xz
export LD_LIBRARY_PATH=$PWD/b/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
nvidia-smi --query-gpu=name --format=csv,noheader
base="--model.path=models/llama3-8b-shape --model.load-format=dummy --model.tokenizer=tests/data/gpt2 --engine.device=cuda --engine.max-num-seqs=256 --engine.max-model-len=2048"
for r in 1 2 3 4 5; do
  for cap in 0 256; do
    s=$(date +%s)
    SERVE_ARGS="$base --engine.max-prefill-tokens-with-decodes=$cap" NUM_PROMPTS=1024 INPUT_LEN=128 OUTPUT_LEN=128 \
      CONCURRENCIES=256 TRANSPORTS=sse BENCH_ARGS="--vocab-limit 50257" \
      timeout 120 bash bench/serve_bench.sh $OUT/cap$cap-run$r b/bin > $OUT/cap$cap-run$r.log 2>&1
    echo "cap $cap run $r rc=$? t=$(( $(date +%s) - s ))"
    grep -E "Output token throughput|Mean TPOT|P99 TPOT|Median TTFT|P99 TTFT|P99 ITL|Failed|Successful" $OUT/cap$cap-run$r/sse-c256.txt 2>/dev/null | tr -s ' ' | paste -sd'|'
  done
done
