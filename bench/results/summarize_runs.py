#!/usr/bin/env python3
"""Median and spread (min-max) per case over several bench_engine_gpu --out tables.

Usage: summarize_runs.py RUN.md [RUN.md ...]  (prints a markdown table: case, median ms, min-max, runs)
"""
import statistics
import sys

times = {}
order = []
for path in sys.argv[1:]:
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] in ("case", "---") or cells[0].startswith("---"):
            continue
        try:
            ms = float(cells[1])
        except ValueError:
            continue
        if cells[0] not in times:
            order.append(cells[0])
        times.setdefault(cells[0], []).append(ms)
print("| case | median ms | min-max | runs |\n|---|---:|---:|---:|")
for case in order:
    t = times[case]
    print(f"| {case} | {statistics.median(t):.2f} | {min(t):.2f}-{max(t):.2f} | {len(t)} |")
