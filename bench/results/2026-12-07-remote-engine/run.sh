#!/usr/bin/env bash
# Remote-engine hop (issue 40): the same troupe-bench sweep against troupe-serve with its engine in
# process, and against troupe-serve in front of a troupe-engine process on loopback. CPU backend,
# stories260k, 2-core VM; 5 alternating rounds. Usage: bench/results/2026-12-07-remote-engine/run.sh OUT_DIR
set -euo pipefail
out=${1:?out dir}
bin=build/bin
mkdir -p "$out"
sweep() { # url label round
  "$bin/troupe-bench" --url "$1" --transport sse --num-prompts 48 --input-len 64 --output-len 64 \
    --sweep-concurrency 1,8,32 --sweep-csv "$out/$2-$3.csv" --label "$2" --seed "$3" > "$out/$2-$3.txt" 2>&1
}
port_of() { grep -o "listening on 127.0.0.1:[0-9]*" "$1" | head -1 | cut -d: -f2; }
for round in 1 2 3 4 5; do
  "$bin/troupe-serve" --server.port=0 --engine.cpu-threads=1 > "$out/serve-local.log" 2>&1 &
  local_pid=$!
  sleep 2
  sweep "http://127.0.0.1:$(port_of "$out/serve-local.log")" local "$round"
  kill "$local_pid"; wait "$local_pid" || true

  "$bin/troupe-engine" --engine-server.port=0 --engine.cpu-threads=1 > "$out/engine.log" 2>&1 &
  engine_pid=$!
  sleep 2
  engine_port=$(grep -o "published on 127.0.0.1:[0-9]*" "$out/engine.log" | cut -d: -f2)
  "$bin/troupe-serve" --server.port=0 --router.engines="[\"127.0.0.1:$engine_port\"]" > "$out/serve-remote.log" 2>&1 &
  remote_pid=$!
  sleep 2
  sweep "http://127.0.0.1:$(port_of "$out/serve-remote.log")" remote "$round"
  kill "$remote_pid" "$engine_pid"; wait "$remote_pid" "$engine_pid" || true
done
