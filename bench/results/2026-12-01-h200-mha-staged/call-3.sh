#!/usr/bin/env bash
# Call 3 on the GPU machine (repository root): the committed tree (the staged kernel reverted, the
# new attention tests kept; kernels as at fd1153e, whose full gpu-run passed 29/29): the attention
# and RoPE tests, and memcheck of the new test cases.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu/bin
tar -xzf build-gpu/bundle.tgz -C build-gpu
T=$OUT/3-tests.txt
for t in paged_attention_gpu_test rope_write_kv_gpu_test; do
  echo "== $t" >> $T; timeout 150 $B/$t >> $T 2>&1; echo "rc=$?" >> $T
done
echo "== memcheck" >> $T
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 $B/paged_attention_gpu_test \
  -tc="*reads blocks of any size*,*right behind RoPE*" >> $T 2>&1; echo "memcheck rc=$?" >> $T
grep "== \|rc=\|test cases\|assertions\|ERROR SUMMARY" $T
