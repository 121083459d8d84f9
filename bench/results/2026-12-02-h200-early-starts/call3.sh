#!/usr/bin/env bash
# Call 3: the whole suite (scripts/gpu-run) at this commit, the experiments above reverted:
# the suite's files but the saved models come back in g.tgz.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
mkdir -p /tmp/g
OUT=/tmp/g timeout --kill-after=10 540 bash scripts/gpu-run >"$OUT/gpu-run.txt" 2>&1
echo "gpu-run rc=$?" >>"$OUT/gpu-run.txt"
cp /tmp/g/summary.txt /tmp/g/bench/bench_engine_gpu.md /tmp/g/bench/bench_kernels_gpu.md "$OUT/" 2>/dev/null
grep -h "MESSAGE\|rel L2" /tmp/g/logs/hf_reference_gpu_test.log >"$OUT/hf-reference-messages.txt" 2>/dev/null
tar -czf "$OUT/g.tgz" --exclude=hf-reference -C /tmp g
