#!/usr/bin/env bash
# Call 3: the q/k/v bias added in the QKV GEMM's epilogue (cuBLASLt) or the GEMV's store, not by
# RoPE after the product was rounded: the whole GPU suite (scripts/gpu-run: every GPU test, the
# transformers reference, memcheck, the benchmarks, the engine on the bundled model).
# Run from the repository root on the GPU machine; everything but the saved models comes back in g.tgz.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
OUT=/tmp/g timeout --kill-after=10 540 bash scripts/gpu-run >"$OUT/gpu-run.txt" 2>&1
echo "gpu-run rc=$?" >>"$OUT/gpu-run.txt"
cp /tmp/g/summary.txt "$OUT/" 2>/dev/null
grep -h "MESSAGE" /tmp/g/logs/hf_reference_gpu_test.log >"$OUT/hf-reference-messages.txt" 2>/dev/null
tar -czf "$OUT/g.tgz" --exclude=hf-reference -C /tmp g
