#!/usr/bin/env bash
# Per-kernel durations (ncu, serialised) of the 13B batch-1 decode step at 086f68f (the split GEMV
# on every layer), to see where the step's time beyond its GEMMs goes.
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
tar -xzf build-gpu/bundle.tgz -C build-gpu
ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  build-gpu/bin/bench_engine_gpu --profile-decode llama2-13b-shape 1 bf16 > /tmp/step.csv 2> /tmp/ncu.err
echo "ncu rc=$?"
python3 scripts/ncu-kernel-times.py /tmp/step.csv 3 | tee $OUT/4-ncu-13b-b1-bf16.txt
tail -3 /tmp/ncu.err
