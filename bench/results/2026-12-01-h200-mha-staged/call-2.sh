#!/usr/bin/env bash
# Call 2 on the GPU machine (repository root): the attention and RoPE tests (memcheck of the new
# cases), then the decode attention rows and whole decode steps in three modes of one binary
# (experiment-only environment variables): old = MHA over bf16 on the CUDA-core kernel
# (TROUPE_STAGED=0), staged without the early start (TROUPE_STAGED_EARLY=0), staged with it.
# Every step has its own time limit; results go to $OUT as they come.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
B=build-gpu/bin
tar -xzf build-gpu/bundle.tgz -C build-gpu
T=$OUT/2-tests.txt
for t in paged_attention_gpu_test rope_write_kv_gpu_test; do
  echo "== $t" >> $T; timeout 150 $B/$t >> $T 2>&1; echo "rc=$?" >> $T
done
echo "== memcheck" >> $T
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 1 $B/paged_attention_gpu_test \
  -tc="*stages MHA*,*right behind RoPE*" >> $T 2>&1; echo "memcheck rc=$?" >> $T
grep "== \|rc=\|test cases\|HANG\|ERROR SUMMARY" $T
A=$OUT/2-attention.md
for mode in old staged-noearly staged; do
  case $mode in old) e="TROUPE_STAGED=0";; staged-noearly) e="TROUPE_STAGED_EARLY=0";; *) e="X=1";; esac
  echo "== $mode" >> $A; timeout 90 env $e $B/bench_kernels_gpu --decode-attention --out /tmp/a.md > /dev/null 2>&1; echo "rc=$?" >> $A; cat /tmp/a.md >> $A
done
grep "== \|13B" $A | cut -c1-180
E=$OUT/2-engine.md
for mode in old staged staged-noearly old staged; do
  case $mode in old) e="TROUPE_STAGED=0";; staged-noearly) e="TROUPE_STAGED_EARLY=0";; *) e="X=1";; esac
  echo "== $mode" >> $E; timeout 80 env $e $B/bench_engine_gpu --out /tmp/e.md > /dev/null 2>&1; echo "rc=$?" >> $E; cat /tmp/e.md >> $E
done
grep "== \|decode batch" $E | grep -v "top-p\|kernel by kernel\|sampling" | cut -c1-120
