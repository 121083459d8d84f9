#!/usr/bin/env bash
# The customer-service ablation (issue 7), on the GPU machine: for each run below, a fresh
# troupe-serve with bench/workloads/customer-service-13b.ini plus the run's overrides, and
# troupe-bench with bench/workloads/customer-service.preset plus the run's load options.
# Same workload and seed in every run. Each run leaves, under OUT_DIR/RUN/: bench.json
# (troupe-bench's result), summary.txt, metrics.prom (the server's /metrics at the end)
# and serve.log. Then customer-service-report.py writes report.md and the plots.
#   bench/workloads/customer-service.sh OUT_DIR [BIN_DIR] [RUN ...]     (default: every run)
# The `poisson` run needs `saturate` first (in this call or an earlier one into OUT_DIR):
# its rate is 70% of the request throughput measured at saturation.
# CS_CONFIG (another INI) and CS_BENCH_ARGS (options after the preset's) exist for a smoke
# run of this script on the bundled model, e.g. CS_CONFIG=configs/stories260k-cpu.ini
# CS_BENCH_ARGS="--shared-prefix-len 100 --input-len 50 --output-len 60 --num-prompts 12".
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:?usage: $0 OUT_DIR [BIN_DIR] [RUN ...]}"
bin="${2:-$root/build-gpu/bin}"
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root" # the INI names the model and tokenizer relative to the repository root
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done

closed="--max-concurrency 12"
# A KV pool of 64 blocks of 128 tokens: 12 clients' ~1,900-token sequences need about 110
# (the system prompt's 7 full blocks shared), so sequences are preempted all the time.
pressure="--engine.num-device-blocks=64"
# name | troupe-serve overrides | troupe-bench options
runs=(
  "full||$closed"
  "full-sse||$closed --transport sse"
  "block16|--engine.block-size=16|$closed"
  "kv-bf16|--engine.kv-cache-dtype=bfloat16|$closed"
  "no-prefix-cache|--engine.enable-prefix-caching=false|$closed"
  "fcfs|--engine.scheduler-policy=fcfs|$closed"
  "pressure-swap|$pressure --engine.preemption-mode=swap|$closed"
  "pressure-recompute|$pressure --engine.preemption-mode=recompute|$closed"
  "spec-ngram|--speculative.method=ngram|$closed"
  "spec-draft|--speculative.method=draft --speculative.draft-model=models/draft-tiny-shape --speculative.draft-load-format=dummy --engine.kv-cache-mib=2048|$closed"
  "saturate||--max-concurrency 64 --num-prompts 128"
  "poisson||POISSON"
)
wanted=("$@")

server_pid=""
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
trap stop_server EXIT

# start_server LOG OVERRIDES...: sets $port, or returns 1 with the log's tail on stderr.
start_server() {
  local log="$1"
  shift
  "$bin/troupe-serve" --config-file="${CS_CONFIG:-bench/workloads/customer-service-13b.ini}" --server.port=0 "$@" \
    >"$log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1800); do # 180 s: dummy weights, KV pool and CUDA graphs
    port="$(sed -n 's/^listening on [0-9.]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -n 1)"
    [ -n "$port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$log" >&2
  stop_server
  return 1
}

status=0
for entry in "${runs[@]}"; do
  IFS='|' read -r name serve_args bench_args <<<"$entry"
  if [ ${#wanted[@]} -gt 0 ] && [[ " ${wanted[*]} " != *" $name "* ]]; then
    continue
  fi
  dir="$out/$name"
  mkdir -p "$dir"
  if [ "$bench_args" = POISSON ]; then
    rate=$(python3 -c 'import json, sys; print(0.7 * json.load(open(sys.argv[1]))["request_throughput"])' \
      "$out/saturate/bench.json" 2>/dev/null) || { echo "customer-service.sh: poisson needs the saturate run" >&2; status=1; continue; }
    bench_args="--request-rate $rate"
  fi
  echo "customer-service.sh: $name: serve $serve_args; bench $bench_args" >&2
  # shellcheck disable=SC2086 # the overrides are word lists
  if ! start_server "$dir/serve.log" $serve_args; then
    echo "customer-service.sh: $name: troupe-serve did not start" >&2
    status=1
    continue
  fi
  url="ws://127.0.0.1:$port/v1/stream"
  [[ "$bench_args" == *"--transport sse"* ]] && url="http://127.0.0.1:$port"
  # shellcheck disable=SC2086
  timeout 400 "$bin/troupe-bench" --preset bench/workloads/customer-service.preset --url "$url" $bench_args \
    ${CS_BENCH_ARGS:-} \
    --label "$name" --result-json "$dir/bench.json" >"$dir/summary.txt" 2>"$dir/bench.err" || status=1
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "http://127.0.0.1:$port/metrics" >"$dir/metrics.prom" 2>>"$dir/bench.err" || status=1
  stop_server
  echo "$serve_args" >"$dir/serve-args.txt"
  echo "$bench_args" >"$dir/bench-args.txt"
  grep -E "Successful|Failed|Mean TTFT|P99 TTFT|Mean TPOT" "$dir/summary.txt" | sed "s/^/  $name: /" >&2
done
python3 bench/workloads/customer-service-report.py "$out" || status=1
exit $status
