#!/usr/bin/env bash
# `day0 serve` and llama.cpp's `llama-server` side by side on the bench shapes of
# bench/RESULTS.md, "Bench shapes": the same weights (BF16), the same threads, both driven by the same
# client (`day0 bench serve`: streamed /v1/completions with token-id prompts, greedy, ignore_eos, so
# both generate exactly the requested tokens). Never part of CI; nothing of llama.cpp enters the
# repository.
#
#   bench/peers/llama_server.sh [--shapes "bench-dense-1b bench-moe-a02b"] [--streams "1 4 16 64"]
#       [--round R] [--prompt-len 128] [--output-len 128] [--requests "4 8 16 64"] [--threads 2]
#       [--scratch DIR] [--llama-bin DIR] [--day0-flags "..."] [--table]
#
# Weights and llama.cpp come from bench/peers/llama_cpp.sh --prepare-only (same --scratch, same
# --llama-bin); run that first. One invocation runs one round: both servers are started on each shape
# (idle one waits on a socket), a short warm-up request goes to each, then for every stream count the
# client runs against day0 and against llama-server one after the other, day0 first in odd rounds and
# llama-server first in even ones, so drift over the minutes cancels. Results of round R go to
# DIR/serve-results/R/; --table prints medians over every round found there and the median of the
# per-round ratios (Day0 / llama-server). A round on one shape takes a few minutes on 2 cores:
# run each round (and shape) as its own invocation under the machine's quiet wrapper.
#
# llama-server runs with -np = the largest stream count and a context of that many slots of
# prompt + output + 64 tokens (every stream has its slot), continuous batching, its default flash
# attention and batch sizes. `day0 serve` runs with --max-seqs = the largest stream count and its
# defaults otherwise (--day0-flags adds to them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-$root/build/release}"
shapes="bench-dense-1b bench-moe-a02b"
streams="1 4 16 64"
requests=""
round=1
prompt_len=128
output_len=128
threads=2
scratch="${DAY0_PEERS_DIR:-/tmp/day0-peers}"
llama_bin=""
day0_flags=""
table_only=0

usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) shapes="$2"; shift 2 ;;
    --streams) streams="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --round) round="$2"; shift 2 ;;
    --prompt-len) prompt_len="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --scratch) scratch="$2"; shift 2 ;;
    --llama-bin) llama_bin="$2"; shift 2 ;;
    --day0-flags) day0_flags="$2"; shift 2 ;;
    --table) table_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "llama_server.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$round" "$prompt_len" "$output_len" "$threads"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "llama_server.sh: $n: expected a positive integer" >&2; exit 2; }
done
read -r -a stream_list <<<"$streams"
if [[ -z "$requests" ]]; then
  # Enough requests for every stream to be busy, few enough that a round stays short.
  requests=""
  for c in "${stream_list[@]}"; do requests+="$((c < 2 ? 4 : (c < 32 ? 2 * c : c))) "; done
fi
read -r -a request_list <<<"$requests"
((${#request_list[@]} == ${#stream_list[@]})) || {
  echo "llama_server.sh: --requests needs one count per stream count" >&2
  exit 2
}
max_streams=0
for c in "${stream_list[@]}"; do ((c > max_streams)) && max_streams=$c; done
results="$scratch/serve-results"
log() { echo "[serve-peers $(date +%H:%M:%S)] $*" >&2; }

table() {
  python3 - "$results" <<'EOF'
import json, statistics, sys
from pathlib import Path
results = Path(sys.argv[1])
rows = {}  # (shape, streams) -> engine -> list of (round, result)
meta = {}
for path in sorted(results.glob("*/*.json")):
    if path.name == "meta.json":
        meta = json.loads(path.read_text())
        continue
    engine, shape, streams = path.stem.split(".")
    r = json.loads(path.read_text())
    if r.get("failed", 1) != 0:
        print(f"warning: {path}: {r.get('failed')} failed requests ({r.get('first_error')}); left out", file=sys.stderr)
        continue
    rows.setdefault((shape, int(streams)), {}).setdefault(engine, []).append((path.parent.name, r))
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"llama.cpp {meta.get('llama_version', '?')}; {meta.get('threads', '?')} threads; prompt {meta.get('prompt_len')} "
      f"/ output {meta.get('output_len')} tokens; BF16 weights; rounds: {sorted({p.parent.name for p in results.glob('*/*.*.*.json')})}")
print("| shape | streams | engine | output tok/s | TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | rounds |")
print("|---|---:|---|---:|---|---|---:|")
ratios_out = []
for (shape, streams) in sorted(rows, key=lambda k: (k[0], k[1])):
    per = rows[(shape, streams)]
    for engine in ("day0", "llama"):
        runs = [r for _, r in per.get(engine, [])]
        if not runs:
            continue
        ms = lambda key, q: 1e3 * med([r[key][q] for r in runs])
        print(f"| {shape} | {streams} | {'Day0' if engine == 'day0' else 'llama-server'} | "
              f"{med([r['output_throughput'] for r in runs]):.1f} | "
              f"{ms('ttft_s', 'p50'):.0f} / {ms('ttft_s', 'p90'):.0f} / {ms('ttft_s', 'p99'):.0f} | "
              f"{ms('itl_s', 'p50'):.0f} / {ms('itl_s', 'p90'):.0f} / {ms('itl_s', 'p99'):.0f} | {len(runs)} |")
    day0 = dict(per.get("day0", []))
    llama = dict(per.get("llama", []))
    both = sorted(set(day0) & set(llama))
    tput = [day0[k]["output_throughput"] / llama[k]["output_throughput"] for k in both]
    itl = [llama[k]["itl_s"]["p50"] / day0[k]["itl_s"]["p50"] for k in both if day0[k]["itl_s"]["p50"] > 0]
    ttft = [llama[k]["ttft_s"]["p50"] / day0[k]["ttft_s"]["p50"] for k in both if day0[k]["ttft_s"]["p50"] > 0]
    ratios_out.append((shape, streams, med(tput), tput, med(ttft), med(itl)))
print()
print("| shape | streams | Day0 / llama-server output tok/s (median of rounds) | per-round | TTFT p50 speed-up | ITL p50 speed-up |")
print("|---|---:|---:|---|---:|---:|")
for shape, streams, m, per, ttft, itl in ratios_out:
    print(f"| {shape} | {streams} | {m:.2f} | {' '.join(f'{x:.2f}' for x in per)} | {ttft:.2f} | {itl:.2f} |")
print(f"(speed-ups: llama-server's latency / Day0's; raw results: {results})")
EOF
}
if ((table_only)); then
  table
  exit 0
fi

[[ -x "$build/bin/day0" ]] || { echo "llama_server.sh: $build/bin/day0 not built (cmake --build $build)" >&2; exit 2; }
[[ -n "$llama_bin" ]] || llama_bin="$scratch/llama.cpp/build/bin"
[[ -x "$llama_bin/llama-server" ]] || {
  echo "llama_server.sh: $llama_bin/llama-server not found (bench/peers/llama_cpp.sh --prepare-only builds it)" >&2
  exit 2
}
export LD_LIBRARY_PATH="$llama_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
models="$scratch/models"
for shape in $shapes; do
  [[ -f "$models/$shape/config.json" && -f "$models/$shape.BF16.gguf" ]] || {
    echo "llama_server.sh: $models/$shape{,.BF16.gguf} missing (bench/peers/llama_cpp.sh --prepare-only writes them)" >&2
    exit 2
  }
done
out="$results/$round"
mkdir -p "$out"
llama_version="$("$llama_bin/llama-server" --version 2>&1 | grep -m1 version || true)"
printf '{"llama_version": "%s", "threads": %d, "prompt_len": %d, "output_len": %d}\n' \
  "$llama_version" "$threads" "$prompt_len" "$output_len" >"$out/meta.json"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_ready() {  # url pid
  for _ in $(seq 600); do
    kill -0 "$2" 2>/dev/null || return 1
    curl -sf "$1/v1/models" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}
bench() {  # url streams requests out.json
  "$build/bin/day0" bench serve --url "$1" --concurrency "$2" --requests "$3" --prompt-len "$prompt_len" \
    --output-len "$output_len" --max-token-id 32000 --seed "$round" --json >"$4.tmp" || true
  mv "$4.tmp" "$4"
}

slot_tokens=$((prompt_len + output_len + 64))
for shape in $shapes; do
  day0_port="$(free_port)"
  # shellcheck disable=SC2086
  "$build/bin/day0" serve "$models/$shape" --port "$day0_port" --threads "$threads" --max-seqs "$max_streams" \
    $day0_flags >"$out/day0.$shape.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$day0_port" "${pids[-1]}" || { echo "day0 serve did not start: $out/day0.$shape.log" >&2; exit 3; }
  llama_port="$(free_port)"
  "$llama_bin/llama-server" -m "$models/$shape.BF16.gguf" --host 127.0.0.1 --port "$llama_port" -t "$threads" \
    -tb "$threads" -np "$max_streams" -c $((max_streams * slot_tokens)) -cb >"$out/llama.$shape.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$llama_port" "${pids[-1]}" || { echo "llama-server did not start: $out/llama.$shape.log" >&2; exit 3; }
  # Warm-up (pages of the weights, first-touch allocations): not measured.
  for url in "http://127.0.0.1:$day0_port" "http://127.0.0.1:$llama_port"; do
    "$build/bin/day0" bench serve --url "$url" --concurrency 2 --requests 2 --prompt-len 16 --output-len 4 \
      --max-token-id 32000 >/dev/null
  done
  for i in "${!stream_list[@]}"; do
    c="${stream_list[$i]}"
    n="${request_list[$i]}"
    log "round $round: $shape, $c streams, $n requests"
    if ((round % 2)); then
      bench "http://127.0.0.1:$day0_port" "$c" "$n" "$out/day0.$shape.$c.json"
      bench "http://127.0.0.1:$llama_port" "$c" "$n" "$out/llama.$shape.$c.json"
    else
      bench "http://127.0.0.1:$llama_port" "$c" "$n" "$out/llama.$shape.$c.json"
      bench "http://127.0.0.1:$day0_port" "$c" "$n" "$out/day0.$shape.$c.json"
    fi
  done
  cleanup
done
table
