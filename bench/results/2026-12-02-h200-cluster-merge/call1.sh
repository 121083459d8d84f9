#!/usr/bin/env bash
# Call 1: split-K partitions merged in thread block clusters (distributed shared memory) instead of
# by ticket through L2. The touched tests, memcheck and racecheck of attention cases that merge in
# clusters, then old (build-gpu/old: the commit before) and new benchmarks alternated. All in r.tgz.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
r=$OUT/r
mkdir -p "$r"
for t in paged_attention_gpu_test cuda_model_runner_gpu_test engine_cuda_gpu_test engine_cuda_protocols_gpu_test; do
  timeout 300 build-gpu/bin/$t >"$r/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$r/$t.log" | tr '\n' ' ')" | tee -a "$r/tests.txt"
done
grep -E "ERROR|FAILED|CHECK" "$r/paged_attention_gpu_test.log" | head -30
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/bin/paged_attention_gpu_test \
  --test-case="*fast paths*,*outside the fp16 range*,*too-small workspace*" >"$r/memcheck.log" 2>&1
echo "memcheck paged_attention (3 cases) rc=$? $(grep -E 'ERROR SUMMARY' "$r/memcheck.log" | tail -1)" | tee -a "$r/tests.txt"
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 build-gpu/bin/paged_attention_gpu_test \
  --test-case="*fast paths*" >"$r/racecheck.log" 2>&1
echo "racecheck paged_attention (fast paths) rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$r/racecheck.log" | tail -1)" | tee -a "$r/tests.txt"
for round in 1 2; do
  for v in old new; do
    b=build-gpu/bin; [ $v = old ] && b=build-gpu/old
    timeout 100 $b/bench_kernels_gpu --decode-attention --out "$r/attn-$v-$round.md" >/dev/null 2>>"$r/errors.txt"
  done
done
for v in new old; do
  b=build-gpu/bin; [ $v = old ] && b=build-gpu/old
  timeout 100 $b/bench_engine_gpu --out "$r/engine-$v.md" >/dev/null 2>>"$r/errors.txt"
done
tar -czf "$OUT/r.tgz" -C "$OUT" r
cp "$r/tests.txt" "$OUT/"
for v in old new; do
  echo "== $v"; grep -h -E "decode 8B: batch 8 x 1 q, ctx 4096, 32/8 heads, hd 128, bs 16|decode 13B: batch 1 x 1 q|decode 13B: batch 12" "$r"/attn-$v-*.md | cut -c1-230
  grep -h -E "decode batch (1|12), ctx 1500, CUDA graph \|" "$r"/engine-$v*.md
done
