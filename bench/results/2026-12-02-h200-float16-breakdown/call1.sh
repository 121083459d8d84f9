#!/usr/bin/env bash
# Call 1: where float16's extra time goes. Per-kernel durations (ncu, serialised) of the 13B
# batch-1 CUDA-graph decode step and of a 1,000-token prefill, bf16 against fp16 (model and cache).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
tar -xzf build-gpu/bundle.tgz -C build-gpu
ncu_times() { # name, then bench_engine_gpu's arguments
  local name=$1; shift
  timeout 200 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum \
    --csv --page raw build-gpu/bin/bench_engine_gpu "$@" > /tmp/$name.csv 2> /tmp/$name.err
  echo "== $name: ncu rc=$?"
  tail -2 /tmp/$name.err
}
for t in bf16 fp16; do
  ncu_times decode-$t --profile-decode llama2-13b-shape 1 $t
  python3 scripts/ncu-kernel-times.py /tmp/decode-$t.csv 3 > $OUT/decode-13b-b1-$t.txt
done
ncu_times prefill-bf16 --profile-prefill llama2-13b-shape 1000
python3 scripts/ncu-kernel-times.py /tmp/prefill-bf16.csv 2 > $OUT/prefill-13b-1000-bf16.txt
ncu_times prefill-fp16 --profile-prefill llama2-13b-shape 1000 fp16
python3 scripts/ncu-kernel-times.py /tmp/prefill-fp16.csv 2 > $OUT/prefill-13b-1000-fp16.txt
head -12 $OUT/*.txt | cut -c1-200
