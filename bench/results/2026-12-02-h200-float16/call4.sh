#!/usr/bin/env bash
# Call 4 (review fixes: fp16 tolerances from fp16's unit roundoff instead of bf16's, fp16 in the
# runner's CUDA-graph and q/k/v-bias tests with a 2e-3 bound, clearer dtype errors): every GPU
# test the fixes touch. Run from the repository root on the GPU machine.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
for t in cuda_model_runner_gpu_test engine_cuda_gpu_test gemv_gpu_test cublaslt_gemm_gpu_test rms_norm_gpu_test \
  silu_and_mul_gpu_test rope_write_kv_gpu_test paged_attention_gpu_test; do
  timeout 240 build-gpu/bin/$t >"$OUT/$t.txt" 2>&1
  echo "rc=$?" >>"$OUT/$t.txt"
  echo "$t: $(grep -h 'test cases' "$OUT/$t.txt") $(tail -1 "$OUT/$t.txt")"
done
