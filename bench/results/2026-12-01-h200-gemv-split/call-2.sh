#!/usr/bin/env bash
# Call 2 on the GPU machine (repository root): tests of the kernels this change touches, then
# whole decode steps: the old binary, and the new one with each early start switched off in turn
# (experiment-only environment variables), two rounds alternating.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
B=build-gpu/bin
tar -xzf build-gpu/bundle.tgz -C build-gpu
for t in gemv_gpu_test silu_and_mul_gpu_test rms_norm_gpu_test cuda_model_runner_gpu_test engine_cuda_gpu_test paged_attention_gpu_test; do
  $B/$t > $OUT/2-$t.txt 2>&1; echo "rc=$?" >> $OUT/2-$t.txt; echo "$t: $(tail -4 $OUT/2-$t.txt | tr '\n' ' ')"
done
compute-sanitizer --tool memcheck --error-exitcode 1 $B/gemv_gpu_test > $OUT/2-memcheck-gemv.txt 2>&1; echo "memcheck gemv rc=$?"
for i in 1 2; do
  build-gpu/old/bench_engine_gpu --out $OUT/2-engine-old-$i.md > /dev/null 2>&1
  $B/bench_engine_gpu --out $OUT/2-engine-new-$i.md > /dev/null 2>&1
  TROUPE_EXPERIMENT_NO_EARLY_ATTENTION=1 $B/bench_engine_gpu --out $OUT/2-engine-noearlyattn-$i.md > /dev/null 2>&1
  TROUPE_EXPERIMENT_NO_EARLY_SILU=1 $B/bench_engine_gpu --out $OUT/2-engine-noearlysilu-$i.md > /dev/null 2>&1
done
grep -H "decode batch 1[ ,2]" $OUT/2-engine-*.md | grep -v "top-p\|kernel by kernel" | sed "s#.*/2-engine-##" | cut -c1-110
