#!/usr/bin/env bash
# Call 1: the GEMV on tensor cores (m16n8k16 MMAs, 16 output rows a warp, up to 16 rows of x).
# Its tests and the runner's (whose linear layers of m <= 16 take it in this tree), the layers
# against cuBLASLt and the CUDA-core GEMV, then the engine bench new / old (build-gpu/old: the
# commit before, CUDA-core GEMV at m = 1, cuBLASLt above).
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
r=$OUT/r
mkdir -p "$r"
for t in gemv_gpu_test cuda_model_runner_gpu_test engine_cuda_gpu_test; do
  timeout 200 build-gpu/bin/$t >"$r/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$r/$t.log" | tr '\n' ' ')" | tee -a "$r/tests.txt"
done
grep -E "ERROR|FAILED" -A3 "$r/gemv_gpu_test.log" | head -30
timeout 150 build-gpu/bin/bench_kernels_gpu --gemv-tensor-cores --out "$r/gemv.md" >/dev/null 2>>"$r/errors.txt"
echo "gemv bench rc=$?"
for v in new old; do
  b=build-gpu/bin; [ $v = old ] && b=build-gpu/old
  timeout 110 $b/bench_engine_gpu --out "$r/engine-$v.md" >/dev/null 2>>"$r/errors.txt"
  echo "engine $v rc=$?"
done
tar -czf "$OUT/r.tgz" -C "$OUT" r
cp "$r/gemv.md" "$OUT/" 2>/dev/null
for v in old new; do
  echo "== $v"; grep -h -E "decode batch (1|2|4|12), ctx 1500, CUDA graph \||GEMMs alone" "$r"/engine-$v.md | cut -c1-110
done
