#!/usr/bin/env python3
# Where a decode step's GPU time goes, kernel by kernel, from Nsight Compute's per-launch
# durations. On the GPU machine:
#   ncu --profile-from-start off --clock-control none --cache-control none \
#       --metrics gpu__time_duration.sum --csv --page raw \
#       build-gpu/bin/bench_engine_gpu --profile-decode llama2-13b-shape 1 bf16 > step.csv
#   python3 scripts/ncu-kernel-times.py step.csv 3
# (bench_engine_gpu --profile-decode replays the step 3 times inside the profiled range.)
# Prints, per kernel name (first 90 characters), the time per step, the launches per step and
# the mean duration, largest first; ncu serialises the launches, so the sum is the step without
# overlap between kernels.
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
hdr = None
for i, r in enumerate(rows):
    if 'Kernel Name' in r:
        hdr = i; break
if hdr is None:
    print('no header'); sys.exit(0)
h = rows[hdr]
ki, ti = h.index('Kernel Name'), h.index('gpu__time_duration.sum')
unit = rows[hdr + 1][ti] if len(rows) > hdr + 1 else ''
agg = collections.OrderedDict()
total = 0.0
for r in rows[hdr + 2:]:
    if len(r) <= max(ki, ti): continue
    try: t = float(r[ti].replace(',', ''))
    except ValueError: continue
    name = r[ki][:90]
    c, s = agg.get(name, (0, 0.0))
    agg[name] = (c + 1, s + t)
    total += t
print(f'unit {unit}; kernels {sum(c for c, _ in agg.values())}; per step sum {total / steps:.1f}')
for name, (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f'{s / steps:10.1f} per step  {c / steps:6.1f} calls/step  {s / c:8.2f} avg  {name}')
