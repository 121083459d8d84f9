#!/usr/bin/env bash
# Call 1 (prefill tiles with P rounded to bf16, one PV MMA where there were two): the attention
# test with the new allowance and, for information, with the old tolerance; the runner test;
# then the prefill attention rows and the engine bench, old binaries (build-gpu/old, the base
# commit) against new, alternated. Run from the repository root on the GPU machine.
set -u
tar -xzf build-gpu/bundle.tgz -C build-gpu
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/build-gpu/lib
b=build-gpu/bin o=build-gpu/old
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.draw,temperature.gpu --format=csv >"$OUT/machine.txt" 2>&1
timeout 200 $b/paged_attention_gpu_test >"$OUT/paged_attention_gpu_test.txt" 2>&1
echo "rc=$?" >>"$OUT/paged_attention_gpu_test.txt"
timeout 200 $o/paged_attention_gpu_test_strict >"$OUT/strict.txt" 2>&1
echo "rc=$?" >>"$OUT/strict.txt"
timeout 200 $b/cuda_model_runner_gpu_test >"$OUT/cuda_model_runner_gpu_test.txt" 2>&1
echo "rc=$?" >>"$OUT/cuda_model_runner_gpu_test.txt"
mkdir -p /tmp/r
for round in 1 2; do
  timeout 100 $o/bench_kernels_gpu --prefill-attention --out /tmp/r/prefill-old-$round.md >/dev/null 2>&1
  timeout 100 $b/bench_kernels_gpu --prefill-attention --out /tmp/r/prefill-new-$round.md >/dev/null 2>&1
done
timeout 120 $o/bench_engine_gpu --out /tmp/r/engine-old.md >/dev/null 2>&1
timeout 120 $b/bench_engine_gpu --out /tmp/r/engine-new.md >/dev/null 2>&1
tar -czf "$OUT/r.tgz" -C /tmp r
