#!/usr/bin/env bash
# Expert parallelism over two MPI ranks on this machine, interleaved rounds (docs/distributed.md):
#  1. shared expert: a qwen2-moe shape (shared expert 4096 wide), EP 2, BF16, prompt 256, 32 new tokens,
#     `day0 run` with the shared expert's rows split over the ranks (default) against --comm-overlap,
#     and against BASELINE (another build's day0, e.g. one before the rows split) when given;
#  2. serving: bench-moe-a02b, 16 streams of prompt 64 / output 64, EP 2 with attention replicated
#     (one client) against --dp-attention 2 (two clients of 8 streams, one a rank's port, at once).
# Shapes are synthesised into /tmp (not committed). Run it on a quiet machine. Not part of CI.
#   bench/distributed_moe.sh [ROUNDS]        BUILD=build/release BASELINE=/path/to/old/day0
set -euo pipefail
BUILD=${BUILD:-build/release}
DAY0="$(realpath "$BUILD/bin/day0")"
ROUNDS=${1:-3}
BASELINE=${BASELINE:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -np 2)
SHARED=/tmp/bench-moe-shared MOE=/tmp/bench-moe-a02b
[ -d $SHARED ] || "$DAY0" synth qwen2-57b-a14b --out $SHARED --layers 12 --hidden 1024 --heads 16 --head-dim 64 \
  --experts 64 --experts-per-token 8 --expert-intermediate 512 --intermediate 2048 --vocab 32000 --seed 2
[ -d $MOE ] || "$DAY0" synth qwen3-30b-a3b --out $MOE --layers 12 --hidden 1024 --heads 16 --head-dim 128 \
  --experts 64 --experts-per-token 8 --expert-intermediate 512 --vocab 32000 --seed 2
PROMPT=$(python3 -c "print(','.join(str((i * 37) % 31000 + 1) for i in range(256)))")

shared_run() {  # LABEL BINARY [FLAGS...]
  local label=$1 bin=$2
  shift 2
  "${MPIRUN[@]}" "$bin" run $SHARED --prompt-ids "$PROMPT" --threads 1 --max-new 32 --ep 2 --dtype bf16 --json "$@" \
    2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin); t = j['timing']; r = j['parallel']['ranks']
print('%-22s prefill %7.1f tok/s  decode %6.1f tok/s  idle %s  tokens %s' % ('$label',
      t['prefill_tokens_per_second'], t['decode_tokens_per_second'],
      ' / '.join('%.2f' % x['comm_idle_ratio'] for x in r), j['tokens'][:4]))"
}

serve_round() {  # MODE: replicated | dp
  local mode=$1 port=18400 extra=(--moe-combine all-to-all)
  [ "$mode" = dp ] && extra=(--dp-attention 2)
  local out err
  out=$(mktemp) err=$(mktemp)
  "${MPIRUN[@]}" "$DAY0" serve $MOE --ep 2 "${extra[@]}" --port $port --threads 1 --dtype bf16 --max-seqs 64 \
    >"$out" 2>"$err" &
  local job=$!
  for _ in $(seq 1 240); do grep -q listening "$out" && break; sleep 0.5; done
  sleep 1
  local client=(bench serve --prompt-len 64 --output-len 64 --json)
  if [ "$mode" = dp ]; then
    "$DAY0" "${client[@]}" --url http://127.0.0.1:$port --concurrency 8 --requests 32 >"$out.a" &
    "$DAY0" "${client[@]}" --url http://127.0.0.1:$((port + 1)) --concurrency 8 --requests 32 --seed 1 >"$out.b"
    wait %2 2>/dev/null || true
    python3 -c "
import json; a = json.load(open('$out.a')); b = json.load(open('$out.b'))
print('dp-attention 2          %6.1f output tok/s (%.1f + %.1f), failed %d' % (a['output_throughput'] +
      b['output_throughput'], a['output_throughput'], b['output_throughput'], a['failed'] + b['failed']))"
  else
    "$DAY0" "${client[@]}" --url http://127.0.0.1:$port --concurrency 16 --requests 64 >"$out.a"
    python3 -c "
import json; a = json.load(open('$out.a'))
print('attention replicated    %6.1f output tok/s, failed %d' % (a['output_throughput'], a['failed']))"
  fi
  kill -TERM "$(pgrep -f "day0 serve $MOE" | head -1)" 2>/dev/null || true
  wait $job 2>/dev/null || true
  rm -f "$out" "$out.a" "$out.b" "$err"
  sleep 1
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "== shared expert under EP 2 ($ROUNDS rounds, after an untimed warm-up that reads the weights in)"
shared_run warm-up "$DAY0" >/dev/null
for _ in $(seq 1 "$ROUNDS"); do
  [ -n "$BASELINE" ] && shared_run baseline "$BASELINE"
  shared_run "rows split (default)" "$DAY0"
  shared_run "--comm-overlap" "$DAY0" --comm-overlap
done
echo "== serving bench-moe-a02b, 16 streams ($ROUNDS rounds)"
for _ in $(seq 1 "$ROUNDS"); do
  serve_round replicated
  serve_round dp
done
