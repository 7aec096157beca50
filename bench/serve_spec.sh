#!/usr/bin/env bash
# Speculative decoding inside `day0 serve` (bench/RESULTS.md, "Speculative decoding in serve"): one
# server per mode, each loaded by `day0 bench serve` at 1, 8 and 64 streams (8, 16 and 64 requests;
# prompt and output lengths below), then `day0 bench MODEL --spec SOURCE` for the single-stream decode
# beside plain decoding. A mode is SOURCE[:K[:R]]: --spec SOURCE (none, ngram, self-int4) with
# --spec-tokens K and --spec-max-rows R (the draft-row cap; 0: none; absent: the server's default).
# Prints the table of output tok/s, ITL, TTFT, the servers' acceptance and the drafts the cap withheld;
# the JSON of every run stays in the output folder. Never part of CI. Run it on a quiet machine (e.g.
# under `day0-lock`); BUILD=DIR takes DIR/bin/day0 (a copy of the build's: a rebuild during the run
# does not replace it).
#
#   bench/serve_spec.sh MODEL [--modes "none ngram:3:0 ngram:3 self-int4:3"] [--streams "1 8 64"]
#                       [--prompt-len 64] [--output-len 64] [--threads 2] [--dtype bf16] [--out DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
day0="${BUILD:-$root/build/release}/bin/day0"
model="${1:?usage: bench/serve_spec.sh MODEL [options]}"
shift
modes="none ngram:3:0 ngram:3 self-int4:3"
streams="1 8 64"
prompt_len=64
output_len=64
threads=2
dtype=bf16
out="$(mktemp -d /tmp/day0-serve-spec.XXXXXX)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --modes) modes="$2"; shift 2 ;;
    --streams) streams="$2"; shift 2 ;;
    --prompt-len) prompt_len="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --out) out="$2"; mkdir -p "$out"; shift 2 ;;
    *) echo "serve_spec.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

requests_for() {  # a few rounds at low concurrency, one at 64
  if (( $1 == 1 )); then echo 8; elif (( $1 <= 8 )); then echo $(( 2 * $1 )); else echo "$1"; fi
}

# --spec flags of a mode SOURCE[:K[:R]].
spec_flags() {
  local source k rows
  IFS=: read -r source k rows <<< "$1"
  echo --spec "$source"
  [[ -n "$k" ]] && echo --spec-tokens "$k"
  [[ -n "$rows" ]] && echo --spec-max-rows "$rows"
  return 0
}

for mode in $modes; do
  mapfile -t flags < <(spec_flags "$mode" | tr ' ' '\n')
  log="$out/server_$mode.log"
  "$day0" serve "$model" --port 0 --dtype "$dtype" --threads "$threads" "${flags[@]}" > "$log" 2>&1 &
  pid=$!
  url=""
  for _ in $(seq 1 240); do
    url="$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1 || true)"
    [[ -n "$url" ]] && break
    sleep 0.5
  done
  [[ -n "$url" ]] || { echo "serve_spec.sh: the $mode server did not start: $(tail -3 "$log")" >&2; kill "$pid"; exit 1; }
  for s in $streams; do
    "$day0" bench serve --url "$url" --concurrency "$s" --requests "$(requests_for "$s")" \
      --prompt-len "$prompt_len" --output-len "$output_len" --json > "$out/serve_${mode}_$s.json"
    # The cap's counter after each load (cumulative over the server's loads).
    curl -s "$url/metrics" | awk '/^day0:spec_decode_cap_withheld_draft_tokens_total/ {print $2}' \
      > "$out/withheld_${mode}_$s.txt" || true
  done
  kill -INT "$pid"
  wait "$pid" || true
done
# Single stream, one bench a source and K (the cap does not apply to one sequence's K drafts).
declare -A benched
for mode in $modes; do
  IFS=: read -r source k _ <<< "$mode"
  [[ "$source" == none || -n "${benched[$source:$k]:-}" ]] && continue
  benched[$source:$k]=1
  "$day0" bench "$model" -p 16 -n 128 -r 3 --no-limits --threads "$threads" --dtype "$dtype" \
    --spec "$source" ${k:+--spec-tokens "$k"} --json > "$out/bench_$source:$k.json"
done

python3 - "$out" "$modes" "$streams" <<'EOF'
import json, sys
out, modes, streams = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print(f"results in {out}")
import os
print("| streams | mode | output tok/s | vs none | ITL p50 ms | ITL p99 ms | TTFT p50 ms | acceptance | accepted / step | withheld by the cap |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
withheld_before = {}
for s in streams:
    base = None
    for m in modes:
        wf = f"{out}/withheld_{m}_{s}.txt"
        w = open(wf).read().strip() if os.path.exists(wf) else ""
        w = float(w) if w else None
        held = f"{w - withheld_before.get(m, 0):.0f}" if w is not None else "-"
        if w is not None:
            withheld_before[m] = w
        j = json.load(open(f"{out}/serve_{m}_{s}.json"))
        t = j["output_throughput"]
        base = t if m == "none" else base
        sp = j.get("speculative")
        acc = f'{100 * sp["acceptance_rate"]:.0f}%' if sp else "-"
        per_step = f'{sp["mean_accepted_per_step"]:.2f}' if sp else "-"
        ratio = f"{t / base:.2f}" if base else "-"
        failed = f' ({j["failed"]} failed)' if j["failed"] else ""
        print(f'| {s} | {m} | {t:.1f}{failed} | {ratio} | {1e3 * j["itl_s"]["p50"]:.1f} | {1e3 * j["itl_s"]["p99"]:.1f} '
              f'| {1e3 * j["ttft_s"]["p50"]:.0f} | {acc} | {per_step} | {held} |')
done = set()
for m in modes:
    source, k = (m.split(":") + [""])[:2]
    if source == "none" or (source, k) in done:
        continue
    done.add((source, k))
    m = f"{source}:{k}"
    for t in json.load(open(f"{out}/bench_{m}.json"))["speculative"]:
        print(f'bench {t["test"]} {m}: plain {t["plain_tok_s_mean"]:.1f} tok/s, spec {t["spec_tok_s_mean"]:.1f} tok/s '
              f'({t["spec_tok_s_mean"] / t["plain_tok_s_mean"]:.2f}x), acceptance {100 * t["acceptance_rate"]:.0f}%, '
              f'{t["mean_accepted_per_step"]:.2f} accepted / step, same tokens {t["same_tokens"]}')
EOF
