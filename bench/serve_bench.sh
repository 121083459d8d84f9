#!/usr/bin/env bash
# Serving benchmark on the bundled model: starts troupe-serve (configs/stories260k-cpu.ini,
# ephemeral port), runs troupe-bench at max concurrency 1, 8 and 32 over WebSocket and
# SSE, keeps every run's JSON and summary in OUT_DIR and prints a markdown table.
#   bench/serve_bench.sh OUT_DIR [BIN_DIR]        (BIN_DIR default: build/bin)
# Environment overrides: NUM_PROMPTS (64), INPUT_LEN (64), OUTPUT_LEN (128),
# CONCURRENCIES ("1 8 32"), TRANSPORTS ("ws sse"), SERVE_ARGS, BENCH_ARGS (extra options).
# The model's context is 512 tokens: keep INPUT_LEN + 1 (BOS) + OUTPUT_LEN within it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: $0 OUT_DIR [BIN_DIR]}"
bin="${2:-$root/build/bin}"
num_prompts="${NUM_PROMPTS:-64}"
input_len="${INPUT_LEN:-64}"
output_len="${OUTPUT_LEN:-128}"
concurrencies="${CONCURRENCIES:-1 8 32}"
transports="${TRANSPORTS:-ws sse}"
for b in troupe-serve troupe-bench; do
  [ -x "$bin/$b" ] || { echo "serve_bench.sh: no $bin/$b (build it first)" >&2; exit 1; }
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"

log="$out/troupe-serve.log"
server_pid=""
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cd "$root"  # the config names the model relative to the repository root
# A fresh server per run: its /metrics then describe that run alone (server overhead
# quantiles), and no run finds an earlier one's prompts in the prefix cache.
start_server() {
  # shellcheck disable=SC2086  # SERVE_ARGS is a list of options
  "$bin/troupe-serve" --config-file=configs/stories260k-cpu.ini --server.port=0 ${SERVE_ARGS:-} >"$log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 600); do  # 60 s
    port="$(sed -n 's/^listening on [0-9.]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -n 1)"
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; echo "serve_bench.sh: troupe-serve exited at start" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$log" >&2; echo "serve_bench.sh: troupe-serve did not start within 60 s" >&2; exit 1; }
  echo "serve_bench.sh: troupe-serve listening on 127.0.0.1:$port; results in $out" >&2
}
scrape_metrics() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "http://127.0.0.1:$port/metrics" >"$1"
}

# Each run gets its own seed: with one seed, a later run would find every prompt of an
# earlier one in the prefix cache and report cache hits as TTFT.
seed=0
for transport in $transports; do
  for c in $concurrencies; do
    start_server
    if [ "$transport" = ws ]; then url="ws://127.0.0.1:$port/v1/stream"; else url="http://127.0.0.1:$port"; fi
    name="$transport-c$c"
    seed=$((seed + 1))
    echo "serve_bench.sh: $name" >&2
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
    "$bin/troupe-bench" --url "$url" --transport "$transport" --max-concurrency "$c" \
      --num-prompts "$num_prompts" --input-len "$input_len" --output-len "$output_len" --seed "$seed" \
      --label "$name" --result-json "$out/$name.json" ${BENCH_ARGS:-} >"$out/$name.txt"
    scrape_metrics "$out/$name.metrics.txt"
    stop_server
  done
done

commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "troupe-bench on stories260k (configs/stories260k-cpu.ini), commit $commit, $(date -u +%Y-%m-%d):" \
  "$num_prompts prompts, input $input_len, output $output_len tokens (ignore_eos), request rate inf."
echo "Latencies in ms (mean / median / P99); throughput in requests/s and output tokens/s;"
echo "server overhead = a token leaving the executor to its frame written to the socket (µs, P50 / P99, from /metrics)."
echo
python3 - "$out" "$transports" "$concurrencies" <<'EOF'
import json, sys
out, transports, concurrencies = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def overhead(name):
    q = {}
    for line in open(f"{out}/{name}.metrics.txt"):
        if line.startswith('troupe:server_overhead_seconds{quantile="'):
            q[line.split('"')[1]] = float(line.split()[-1]) * 1e6
    return f"{q.get('0.5', float('nan')):.0f} / {q.get('0.99', float('nan')):.0f}"
def trio(j, m):
    return " / ".join(f"{j[f'{k}_{m}_ms']:.2f}" for k in ("mean", "median", "p99"))
print("| transport | concurrency | ok | failed | req/s | out tok/s | TTFT | TPOT | ITL | E2E | server overhead µs |")
print("|---|---:|---:|---:|---:|---:|---|---|---|---|---|")
for t in transports:
    for c in concurrencies:
        j = json.load(open(f"{out}/{t}-c{c}.json"))
        print(f"| {t} | {c} | {j['completed']} | {j['failed']} | {j['request_throughput']:.2f} | "
              f"{j['output_throughput']:.1f} | {trio(j, 'ttft')} | {trio(j, 'tpot')} | {trio(j, 'itl')} | "
              f"{trio(j, 'e2el')} | {overhead(f'{t}-c{c}')} |")
EOF
