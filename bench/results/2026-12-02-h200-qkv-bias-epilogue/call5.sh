#!/usr/bin/env bash
# Call 5 (a bias GEMM never splits k): the tests of what changed since call 4's full suite.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
for t in cublaslt_gemm_gpu_test gemv_gpu_test rope_write_kv_gpu_test cuda_model_runner_gpu_test; do
  echo "== $t" >>"$OUT/tests.log"
  timeout 60 build-gpu/bin/$t >"$OUT/$t.log" 2>&1
  echo "rc=$?" >>"$OUT/tests.log"
  grep -E "test cases|assertions|MESSAGE.*(bias|folded)" "$OUT/$t.log" >>"$OUT/tests.log"
done
# The transformers reference again (Qwen2 has the q/k/v biases).
timeout 200 python3 tests/gpu/hf_reference.py /tmp/hf >"$OUT/hf_reference.log" 2>&1
echo "== hf_reference.py rc=$?" >>"$OUT/tests.log"
TROUPE_HF_REFERENCE_DIR=/tmp/hf timeout 120 build-gpu/bin/hf_reference_gpu_test >"$OUT/hf_reference_gpu_test.log" 2>&1
echo "== hf_reference_gpu_test rc=$?" >>"$OUT/tests.log"
grep -E "test cases|assertions|tokens:" "$OUT/hf_reference_gpu_test.log" >>"$OUT/tests.log"
