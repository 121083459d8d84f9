#!/usr/bin/env python3
"""The customer-service ablation's report: reads every run directory that
customer-service.sh left in OUT_DIR (bench.json from troupe-bench, metrics.prom from
the server) and writes OUT_DIR/report.md (the tables), OUT_DIR/report.json (the
figures the tables came from) and, when matplotlib is there, ttft.png and tpot.png
(per-request distributions by run).

    python3 bench/workloads/customer-service-report.py OUT_DIR
"""
import gzip
import json
import math
import os
import re
import sys

# The step's bandwidth floor (issue 7's TPOT goal): the bytes a decode step must read,
# weights plus the batch's KV, over the copy ceiling measured on the H200.
COPY_BYTES_PER_S = 4.28e12
LAYERS, HIDDEN = 40, 5120            # Llama-2-13B's shape (models/llama2-13b-shape)
WEIGHT_BYTES = 13.0e9 * 2            # 13.0 B parameters in bf16
KV_BYTES = {"fp8": 1, "bfloat16": 2}  # per element
TTFT_SLO_MS = 200.0

ORDER = ["full", "full-sse", "block16", "kv-bf16", "no-prefix-cache", "fcfs", "pressure-swap",
         "pressure-recompute", "spec-ngram", "spec-draft", "saturate", "poisson"]
LEVER = {
    "full": "every lever on (bs 128, fp8 KV, prefix cache, priority, swap; no speculation)",
    "full-sse": "the same over HTTP SSE",
    "block16": "block size 16",
    "kv-bf16": "bf16 KV cache",
    "no-prefix-cache": "prefix caching off",
    "fcfs": "fcfs scheduler",
    "pressure-swap": "64-block KV pool, preemption by swap",
    "pressure-recompute": "64-block KV pool, preemption by recompute",
    "spec-ngram": "speculation: n-gram, k = 3 adaptive",
    "spec-draft": "speculation: tiny dummy draft (CPU), k = 3 adaptive",
    "saturate": "64 clients, closed loop (saturation)",
    "poisson": "Poisson arrivals at 70% of saturation throughput",
}


def read_metrics(path):
    """Prometheus text -> {name: value} for samples without labels, {name{labels}: value} otherwise."""
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^(\S+?)(\{[^}]*\})?\s+(\S+)$", line.strip())
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        labels = re.sub(r'model_name="[^"]*",?', "", labels).replace("{}", "")
        try:
            out[name + labels] = float(value)
        except ValueError:
            pass
    return out


def quantile(metrics, name, q):
    return metrics.get(f'{name}{{quantile="{q}"}}', float("nan"))


def percentile(values, p):
    """numpy's default percentile (linear interpolation), without numpy."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def kv_dtype_of(run_dir):
    args = open(os.path.join(run_dir, "serve-args.txt")).read() if os.path.exists(
        os.path.join(run_dir, "serve-args.txt")) else ""
    return "bfloat16" if "kv-cache-dtype=bfloat16" in args else "fp8"


def summarize(out_dir, name):
    run_dir = os.path.join(out_dir, name)
    bench_path = os.path.join(run_dir, "bench.json")
    if os.path.exists(bench_path):
        b = json.load(open(bench_path))
    elif os.path.exists(bench_path + ".gz"):  # as committed under bench/results
        b = json.load(gzip.open(bench_path + ".gz", "rt"))
    else:
        return None
    m = read_metrics(os.path.join(run_dir, "metrics.prom"))
    r = {"run": name, "lever": LEVER.get(name, name)}
    for key in ["completed", "failed", "request_throughput", "output_throughput", "request_goodput",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
                "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms", "duration", "request_rate", "max_concurrency"]:
        r[key] = b.get(key)
    urgent = b.get("ttft_by_priority", {}).get("0")
    r["urgent_p99_ttft_ms"] = urgent["p99_ttft_ms"] if urgent else None
    normal = b.get("ttft_by_priority", {}).get("1")
    r["normal_p99_ttft_ms"] = normal["p99_ttft_ms"] if normal else None
    queries = m.get("troupe:prefix_cache_queries_total", 0.0)
    r["prefix_hit_rate"] = m.get("troupe:prefix_cache_hits_total", 0.0) / queries if queries else None
    r["preempt_swap"] = m.get('troupe:num_preemptions_total{mode="swap"}', 0.0)
    r["preempt_recompute"] = m.get('troupe:num_preemptions_total{mode="recompute"}', 0.0)
    for mode in ["swap", "recompute"]:
        name_ = f"troupe:preemption_resume_{mode}_seconds"
        r[f"resume_{mode}_p50_ms"] = quantile(m, name_, "0.5") * 1e3
        r[f"resume_{mode}_p99_ms"] = quantile(m, name_, "0.99") * 1e3
        r[f"resume_{mode}_count"] = m.get(name_ + "_count", 0.0)
        if not r[f"resume_{mode}_count"]:
            r[f"resume_{mode}_p50_ms"] = r[f"resume_{mode}_p99_ms"] = None
    drafted = m.get("troupe:spec_decode_num_draft_tokens_total", 0.0)
    r["spec_acceptance"] = m.get("troupe:spec_decode_num_accepted_tokens_total", 0.0) / drafted if drafted else None
    for part in ["device", "host", "gap"]:
        name_ = f"troupe:step_{part}_seconds"
        r[f"step_{part}_p50_ms"] = quantile(m, name_, "0.5") * 1e3
        r[f"step_{part}_p99_ms"] = quantile(m, name_, "0.99") * 1e3
        r[f"step_{part}_sum_s"] = m.get(name_ + "_sum", float("nan"))
    total = r["step_device_sum_s"] + r["step_host_sum_s"] + r["step_gap_sum_s"]
    r["host_share"] = (r["step_host_sum_s"] + r["step_gap_sum_s"]) / total if total > 0 else None
    r["steps"] = m.get("troupe:engine_steps_total")
    # The floor for a decode step of the run's mean batch at its mean context.
    inputs = [x for x in b.get("input_lens", []) if x > 0]
    outputs = [x for x in b.get("output_lens", []) if x > 0]
    batch = b.get("max_concurrency") or 12
    if inputs and outputs:
        context = sum(inputs) / len(inputs) + sum(outputs) / len(outputs) / 2
        kv = 2 * LAYERS * HIDDEN * KV_BYTES[kv_dtype_of(run_dir)] * context * min(batch, 64)
        r["tpot_floor_ms"] = (WEIGHT_BYTES + kv) / COPY_BYTES_PER_S * 1e3
        r["mean_context"] = context
        if r.get("mean_tpot_ms"):
            r["tpot_over_floor"] = r["mean_tpot_ms"] / r["tpot_floor_ms"]
    r["ttfts_ms"] = [t * 1e3 for t, e in zip(b.get("ttfts", []), b.get("errors", [])) if not e]
    tpots = []
    for ttft, e2e, n, err in zip(b.get("ttfts", []), b.get("e2els", []), b.get("output_lens", []),
                                 b.get("errors", [])):
        if not err and n > 1:
            tpots.append((e2e - ttft) / (n - 1) * 1e3)
    r["tpots_ms"] = tpots
    return r


def fmt(x, digits=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def main():
    out_dir = sys.argv[1]
    names = [n for n in ORDER if os.path.isdir(os.path.join(out_dir, n))]
    names += sorted(n for n in os.listdir(out_dir) if os.path.isdir(os.path.join(out_dir, n)) and n not in names)
    runs = [r for r in (summarize(out_dir, n) for n in names) if r]
    lines = ["# Customer-service workload on one H200: the ablation", "",
             "Llama-2-13B shape, dummy bf16 weights; 1,000-token shared system prompt, 100-400-token user turn, "
             "128-512 output tokens; 10% priority 0 (urgent). Same seed in every run.", "",
             "## Latency and throughput", "",
             "| run | lever | ok | failed | TTFT mean | P50 | P99 | urgent P99 | TPOT mean | P99 | ITL P99 | E2E mean |"
             " out tok/s | goodput (TTFT ≤ 200 ms) req/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append("| " + " | ".join([
            r["run"], r["lever"], fmt(r["completed"]), fmt(r["failed"]), fmt(r["mean_ttft_ms"]),
            fmt(r["median_ttft_ms"]), fmt(r["p99_ttft_ms"]), fmt(r["urgent_p99_ttft_ms"]), fmt(r["mean_tpot_ms"], 2),
            fmt(r["p99_tpot_ms"], 2), fmt(r["p99_itl_ms"], 2), fmt(r["mean_e2el_ms"], 0),
            fmt(r["output_throughput"], 0), fmt(r["request_goodput"], 2)]) + " |")
    lines += ["", "All times in ms.", "", "## Engine: where the step's time goes, cache, preemption, speculation", "",
              "| run | steps | device P50 / P99 | host P50 / P99 | gap P50 / P99 | host + gap share | TPOT floor | "
              "TPOT / floor | prefix hit rate | preemptions swap / recompute | resume P50 / P99 (swap) | "
              "resume P50 / P99 (recompute) | spec acceptance |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append("| " + " | ".join([
            r["run"], fmt(r["steps"], 0),
            f'{fmt(r["step_device_p50_ms"], 2)} / {fmt(r["step_device_p99_ms"], 2)}',
            f'{fmt(r["step_host_p50_ms"], 3)} / {fmt(r["step_host_p99_ms"], 3)}',
            f'{fmt(r["step_gap_p50_ms"], 3)} / {fmt(r["step_gap_p99_ms"], 3)}',
            fmt(None if r["host_share"] is None else 100 * r["host_share"]) + "%",
            fmt(r.get("tpot_floor_ms"), 2), fmt(r.get("tpot_over_floor"), 2),
            fmt(r["prefix_hit_rate"], 3), f'{fmt(r["preempt_swap"], 0)} / {fmt(r["preempt_recompute"], 0)}',
            f'{fmt(r["resume_swap_p50_ms"])} / {fmt(r["resume_swap_p99_ms"])}',
            f'{fmt(r["resume_recompute_p50_ms"])} / {fmt(r["resume_recompute_p99_ms"])}',
            fmt(r["spec_acceptance"], 3)]) + " |")
    lines += ["", "Device: the model runner's forward pass per step (launches, GPU time, logits copy). Host: the rest "
              "of the step (planning, KV reserve, sampling, messages). Gap: one step's end to the next one's start. "
              "TPOT floor: (26.0 GB of weights + the mean batch's KV at its mean context) / 4.28 TB/s.", ""]
    open(os.path.join(out_dir, "report.md"), "w").write("\n".join(lines))
    summaries = [{k: v for k, v in r.items() if k not in ("ttfts_ms", "tpots_ms")} for r in runs]
    json.dump(summaries, open(os.path.join(out_dir, "report.json"), "w"), indent=1)
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("customer-service-report.py: no matplotlib; no plots", file=sys.stderr)
        return
    for key, title, file, limit in [("ttfts_ms", "TTFT per request (ms)", "ttft.png", TTFT_SLO_MS),
                                    ("tpots_ms", "TPOT per request (ms)", "tpot.png", None)]:
        data = [(r["run"], r[key]) for r in runs if r[key]]
        if not data:
            continue
        fig, ax = plt.subplots(figsize=(11, 0.45 * len(data) + 1.5))
        ax.boxplot([d for _, d in data], vert=False, whis=(1, 99), showfliers=True)
        ax.set_yticks(range(1, len(data) + 1), [n for n, _ in data])
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel(title + "; whiskers P1-P99")
        if limit:
            ax.axvline(limit, color="red", linestyle="--", linewidth=1, label=f"SLO {limit:.0f} ms")
            ax.legend(loc="lower right")
        ax.grid(axis="x", which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, file), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
