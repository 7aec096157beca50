#!/usr/bin/env bash
# Speculative decoding inside `day0 serve` (bench/RESULTS.md, "Speculative decoding in serve"): one
# server per mode (--spec none, ngram with K drafts), each loaded by `day0 bench serve` at 1, 8 and 64
# streams (8, 16 and 64 requests; prompt and output lengths below), then `day0 bench MODEL --spec ngram`
# for the single-stream decode beside plain decoding. Prints the table of output tok/s, ITL, TTFT and
# the servers' acceptance; the JSON of every run stays in the output folder. Never part of CI. Run it
# on a quiet machine (e.g. under `flock /tmp/day0-build.lock`).
#
#   bench/serve_spec.sh MODEL [--modes "none ngram:3 ngram:5"] [--streams "1 8 64"] [--prompt-len 64]
#                       [--output-len 64] [--threads 2] [--dtype bf16] [--out DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
day0="${BUILD:-$root/build/release}/bin/day0"
model="${1:?usage: bench/serve_spec.sh MODEL [options]}"
shift
modes="none ngram:3 ngram:5"
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

for mode in $modes; do
  source="${mode%%:*}"
  flags=(--spec "$source")
  [[ "$source" != none ]] && flags+=(--spec-tokens "${mode#*:}")
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
  done
  kill -INT "$pid"
  wait "$pid" || true
done
for mode in $modes; do
  [[ "$mode" == none ]] && continue
  "$day0" bench "$model" -p 16 -n 128 -r 3 --no-limits --threads "$threads" --dtype "$dtype" \
    --spec ngram --spec-tokens "${mode#*:}" --json > "$out/bench_$mode.json"
done

python3 - "$out" "$modes" "$streams" <<'EOF'
import json, sys
out, modes, streams = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print(f"results in {out}")
print("| streams | mode | output tok/s | vs none | ITL p50 ms | ITL p99 ms | TTFT p50 ms | acceptance | accepted / step |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for s in streams:
    base = None
    for m in modes:
        j = json.load(open(f"{out}/serve_{m}_{s}.json"))
        t = j["output_throughput"]
        base = t if m == "none" else base
        sp = j.get("speculative")
        acc = f'{100 * sp["acceptance_rate"]:.0f}%' if sp else "-"
        per_step = f'{sp["mean_accepted_per_step"]:.2f}' if sp else "-"
        ratio = f"{t / base:.2f}" if base else "-"
        failed = f' ({j["failed"]} failed)' if j["failed"] else ""
        print(f'| {s} | {m} | {t:.1f}{failed} | {ratio} | {1e3 * j["itl_s"]["p50"]:.1f} | {1e3 * j["itl_s"]["p99"]:.1f} '
              f'| {1e3 * j["ttft_s"]["p50"]:.0f} | {acc} | {per_step} |')
for m in modes:
    if m == "none":
        continue
    for t in json.load(open(f"{out}/bench_{m}.json"))["speculative"]:
        print(f'bench {t["test"]} {m}: plain {t["plain_tok_s_mean"]:.1f} tok/s, spec {t["spec_tok_s_mean"]:.1f} tok/s '
              f'({t["spec_tok_s_mean"] / t["plain_tok_s_mean"]:.2f}x), acceptance {100 * t["acceptance_rate"]:.0f}%, '
              f'{t["mean_accepted_per_step"]:.2f} accepted / step, same tokens {t["same_tokens"]}')
EOF
