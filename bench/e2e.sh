#!/usr/bin/env bash
# End-to-end speed on the two bench shapes (bench/RESULTS.md, "Bench shapes"): synthesise them with
# `day0 synth` into /tmp (about 2.2 GB and 2.7 GB, not committed), then run day0_e2e_bench on 2 threads
# (prefill of 512 tokens, decode of 64 tokens, read bandwidth measured in the same run for the roofline).
# Note: synth keeps grouped-query models at 2 KV heads, so the dense shape has 2 (not 8) KV heads:
# 1.079 B instead of 1.104 B parameters.
set -euo pipefail
BUILD=${BUILD:-build/release}
DAY0="$BUILD/bin/day0"
[ -d /tmp/bench-dense-1b ] || "$DAY0" synth llama-3.1-8b --out /tmp/bench-dense-1b --layers 16 --hidden 2048 \
  --heads 32 --head-dim 64 --intermediate 8192 --vocab 32000 --seed 1
[ -d /tmp/bench-moe-a02b ] || "$DAY0" synth qwen3-30b-a3b --out /tmp/bench-moe-a02b --layers 12 --hidden 1024 \
  --heads 16 --head-dim 128 --experts 64 --experts-per-token 8 --expert-intermediate 512 --vocab 32000 --seed 2
DAY0_THREADS=${DAY0_THREADS:-2} DAY0_E2E_MODELS=/tmp/bench-dense-1b:/tmp/bench-moe-a02b "$BUILD/bench/day0_e2e_bench" "$@"
