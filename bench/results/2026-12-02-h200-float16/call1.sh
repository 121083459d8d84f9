#!/usr/bin/env bash
# Call 1 (model.dtype=float16 on the CUDA backend, and the prefill tiles' bf16 P of
# ../2026-12-02-h200-bf16-p under the whole suite): scripts/gpu-run, which runs every GPU test
# (the new fp16 cases among them), memcheck, the transformers reference (fp16 added) and the
# benches (bench_engine_gpu has 13B fp16 rows). Run from the repository root on the GPU machine;
# the suite's files but the saved models come back in g.tgz.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
mkdir -p /tmp/g
OUT=/tmp/g timeout --kill-after=10 570 bash scripts/gpu-run >"$OUT/gpu-run.txt" 2>&1
echo "gpu-run rc=$?" >>"$OUT/gpu-run.txt"
cp /tmp/g/summary.txt /tmp/g/bench/bench_engine_gpu.md /tmp/g/bench/bench_kernels_gpu.md "$OUT/" 2>/dev/null
grep -h "MESSAGE\|rel L2" /tmp/g/logs/hf_reference_gpu_test.log >"$OUT/hf-reference-messages.txt" 2>/dev/null
tar -czf "$OUT/g.tgz" --exclude=hf-reference -C /tmp g
