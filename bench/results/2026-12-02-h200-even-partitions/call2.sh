#!/usr/bin/env bash
# Call 2: partitions of whole 64-position granules (the committed rule). The whole GPU suite
# (scripts/gpu-run) on it, then old (build-gpu/old: the commit before) and new benchmarks in turn.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
mkdir -p /tmp/g
OUT=/tmp/g timeout --kill-after=10 420 bash scripts/gpu-run >"$OUT/gpu-run.txt" 2>&1
echo "gpu-run rc=$?" >>"$OUT/gpu-run.txt"
cp /tmp/g/summary.txt "$OUT/" 2>/dev/null
grep -h "MESSAGE" /tmp/g/logs/hf_reference_gpu_test.log >"$OUT/hf-reference-messages.txt" 2>/dev/null
for v in old new; do
  b=build-gpu/bin; [ $v = old ] && b=build-gpu/old
  timeout 70 $b/bench_kernels_gpu --decode-attention --out "$OUT/attn-$v.md" >/dev/null 2>>"$OUT/gpu-run.txt"
  timeout 80 $b/bench_engine_gpu --out "$OUT/engine-$v.md" >/dev/null 2>>"$OUT/gpu-run.txt"
done
tar -czf "$OUT/g.tgz" --exclude=hf-reference -C /tmp g
tail -3 "$OUT/summary.txt"
grep -h -E "CUDA graph \|" "$OUT"/engine-*.md | head -40
