#!/usr/bin/env bash
# Second GPU call: the CPU goldens (hf_reference.py --tiny, one tar), and the paged-attention soft-cap
# cases (trimmed to two cap/window pairs after the first call's split-K case ran past 200 s), timed.
mkdir -p b && tar -C b -xJf build-carry/so.tar.xz
export TROUPE_DATA_DIR=$PWD LD_LIBRARY_PATH=$PWD/b/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/fam && timeout 120 python3 tests/gpu/hf_reference.py --tiny /tmp/fam > $OUT/families.log 2>&1; echo "tiny rc=$?"
tail -9 $OUT/families.log; tar -C /tmp/fam -czf $OUT/families.tar.gz . && ls -la $OUT/families.tar.gz
timeout 420 b/bin/paged_attention_gpu_test -tc="*softcap*" --duration=true 2>&1 | grep -v "^$" | tail -25
