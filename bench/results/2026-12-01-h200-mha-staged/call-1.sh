#!/usr/bin/env bash
# Call 1 on the GPU machine (repository root): the attention tests (with memcheck of the new
# cases), then the decode attention rows and whole decode steps in three modes of one binary
# (experiment-only environment variables): old = MHA over bf16 on the CUDA-core kernel
# (TROUPE_STAGED=0), staged without the early start (TROUPE_STAGED_EARLY=0), staged with it.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
B=build-gpu/bin
R=/tmp/r; mkdir -p $R
tar -xzf build-gpu/bundle.tgz -C build-gpu
for t in paged_attention_gpu_test rope_write_kv_gpu_test; do
  timeout 240 $B/$t > $R/1-$t.txt 2>&1; echo "rc=$?" >> $R/1-$t.txt; echo "$t: $(tail -4 $R/1-$t.txt | tr '\n' ' ')"
done
grep -B2 -A12 "ERROR\|FAILED" $R/1-paged_attention_gpu_test.txt | head -60
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 $B/paged_attention_gpu_test \
  -tc="*stages MHA*,*right behind RoPE*" > $R/1-memcheck.txt 2>&1; echo "memcheck rc=$?"; tail -3 $R/1-memcheck.txt
TROUPE_STAGED=0 $B/bench_kernels_gpu --decode-attention --out $R/1-attn-old.md > /dev/null 2>&1
TROUPE_STAGED_EARLY=0 $B/bench_kernels_gpu --decode-attention --out $R/1-attn-staged-noearly.md > /dev/null 2>&1
$B/bench_kernels_gpu --decode-attention --out $R/1-attn-staged.md > /dev/null 2>&1
for f in old staged-noearly staged; do echo "== $f"; grep "13B" $R/1-attn-$f.md | cut -c1-200; done
for i in 1 2; do
  TROUPE_STAGED=0 $B/bench_engine_gpu --out $R/1-engine-old-$i.md > /dev/null 2>&1
  TROUPE_STAGED_EARLY=0 $B/bench_engine_gpu --out $R/1-engine-staged-noearly-$i.md > /dev/null 2>&1
  $B/bench_engine_gpu --out $R/1-engine-staged-$i.md > /dev/null 2>&1
done
grep -H "decode batch" $R/1-engine-*.md | grep -v "top-p\|kernel by kernel\|sampling" | sed "s#.*/1-engine-##" | cut -c1-120
tar -czf $OUT/call-1.tgz -C $R .
