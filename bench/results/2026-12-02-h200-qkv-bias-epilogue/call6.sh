#!/usr/bin/env bash
# Call 6 (bias plans keep only unsplit algorithms, in the runner for the QKV GEMM at every m):
# the whole GPU suite (scripts/gpu-run), then what a bias costs a Qwen2-7B-shaped QKV GEMM
# (bench_kernels_gpu --qkv-bias). Run from the repository root on the GPU machine; the suite's
# files but the saved models come back in g.tgz.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
mkdir -p /tmp/g
OUT=/tmp/g timeout --kill-after=10 480 bash scripts/gpu-run >"$OUT/gpu-run.txt" 2>&1
echo "gpu-run rc=$?" >>"$OUT/gpu-run.txt"
cp /tmp/g/summary.txt /tmp/g/bench/bench_engine_gpu.md /tmp/g/bench/bench_kernels_gpu.md "$OUT/" 2>/dev/null
cp /tmp/g/logs/cublaslt_gemm_gpu_test.log "$OUT/" 2>/dev/null
grep -h "MESSAGE" /tmp/g/logs/hf_reference_gpu_test.log >"$OUT/hf-reference-messages.txt" 2>/dev/null
timeout 120 build-gpu/bin/bench_kernels_gpu --qkv-bias --out "$OUT/qkv-bias.md" >/dev/null 2>>"$OUT/gpu-run.txt"
echo "qkv-bias rc=$?" >>"$OUT/gpu-run.txt"
tar -czf "$OUT/g.tgz" --exclude=hf-reference -C /tmp g
