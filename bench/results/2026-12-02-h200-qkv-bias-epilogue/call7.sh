#!/usr/bin/env bash
# Call 7 (the review's fixes): the cuBLASLt bias test with two biases on one plan, and the runner
# with a model given random q/k/v biases against the CPU (prefill, decode of 1-8 sequences from
# CUDA graphs), with the rest of the runner's and the engine's CUDA tests.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
for t in cublaslt_gemm_gpu_test cuda_model_runner_gpu_test gemv_gpu_test engine_cuda_gpu_test; do
  timeout 120 build-gpu/bin/$t >"$OUT/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/$t.log" | tr '\n' ' ')" | tee -a "$OUT/tests.txt"
done
grep -h "biases\|bias" "$OUT/cuda_model_runner_gpu_test.log" | head -40
