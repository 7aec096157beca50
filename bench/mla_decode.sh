#!/usr/bin/env bash
# MLA and sparse-attention-indexer decode per byte read, family by family, on the MoE bench shape
# (bench/RESULTS.md, "Bench shapes": 12 layers, hidden 1024, 16 heads, 64 experts top-8 of 512) with
# each release's own attention widths (`day0 synth --release-attention`: MLA ranks, head dims, indexer)
# and weight format. day0_e2e_bench decodes 64 tokens after a 16-token prompt and states each figure
# as a share of the roofline: bytes one token reads / read bandwidth measured in the same run.
# Rounds alternate the models (A, B, C, A, B, C ...) because the host's bandwidth drifts.
#   bench/mla_decode.sh [--rounds N] [CATALOG_NAME ...]   (default: the MLA releases of the catalog)
set -euo pipefail
BUILD=${BUILD:-build/release}
DAY0="$BUILD/bin/day0"
ROUNDS=3
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n 2,8p "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
if [ "${1:-}" = "--rounds" ]; then ROUNDS=$2; shift 2; fi
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=(deepseek-v3 deepseek-v3.2 kimi-k2 mistral-small-4 glm-4.7-flash glm-5)
fi
dirs=()
for m in "${MODELS[@]}"; do
  if ! "$DAY0" inspect "$m" >/dev/null 2>&1; then echo "skip $m: not in this build's catalog" >&2; continue; fi
  d=/tmp/bench-mla-$m
  [ -d "$d" ] || "$DAY0" synth "$m" --out "$d" --release-attention --layers 12 --hidden 1024 --heads 16 \
    --experts 64 --experts-per-token 8 --expert-intermediate 512 --vocab 32000 --seed 3 --no-mtp >/dev/null
  dirs+=("$d")
done
printf "%-6s %-18s %8s %9s %7s %7s\n" round model tok/s GB/token GB/s share
for ((r = 1; r <= ROUNDS; r++)); do
  for d in "${dirs[@]}"; do
    DAY0_THREADS=${DAY0_THREADS:-2} DAY0_E2E_MODELS="$d" "$BUILD/bench/day0_e2e_bench" \
      --benchmark_filter=decode --benchmark_format=csv 2>/dev/null | grep decode |
      awk -F, -v round="$r" '{split($1, n, "/"); gsub(/"|bench-mla-/, "", n[1]);
        printf "%-6d %-18s %8.2f %9.3f %7.1f %7.3f\n", round, n[1], $15, $12, $11, $14}'
  done
done
