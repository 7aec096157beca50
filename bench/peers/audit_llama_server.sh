#!/usr/bin/env bash
# `day0 audit` against llama.cpp's `llama-server` serving SmolLM2-135M-Instruct (the Q4_1 GGUF of
# tests/trained/smollm2_test.cpp), and the same audit against `day0 serve` on the same file, so the
# two reports sit side by side. Never part of CI; nothing of llama.cpp enters the repository.
#
#   bench/peers/audit_llama_server.sh [--gguf FILE] [--llama-bin DIR] [--threads 2] [--context 2048]
#       [--concurrency 1,4] [--soak 60s] [--out DIR] [--only llama|day0]
#
# llama-server runs with --jinja (the GGUF's own chat template, tools included), --no-repack (its AMX
# Q4_1 kernels die of SIGILL on a VM that does not grant the tile state), -np 4 slots and a
# context of --context tokens per slot; `day0 serve` with the same --context. Reports go to
# DIR/llama-server/ and DIR/day0-serve/ (report.json, report.md, report.html); the script exits 1
# when either audit fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-$root/build/release}"
gguf="${DAY0_SMOLLM2_GGUF:-${XDG_CACHE_HOME:-$HOME/.cache}/day0/SmolLM2-135M-Instruct.Q4_1.gguf}"
llama_bin="${DAY0_PEERS_DIR:-/tmp/day0-peers}/llama.cpp/build/bin"
threads=2
context=2048
concurrency="1,4"
soak=""
out="/tmp/day0-audit-peers"
only=""

usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gguf) gguf="$2"; shift 2 ;;
    --llama-bin) llama_bin="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --soak) soak="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "audit_llama_server.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$gguf" ]] || { echo "audit_llama_server.sh: $gguf not found (tests/trained/smollm2_test.cpp fetches it)" >&2; exit 2; }
[[ -x "$build/bin/day0" ]] || { echo "audit_llama_server.sh: $build/bin/day0 not built" >&2; exit 2; }
mkdir -p "$out"
export LD_LIBRARY_PATH="$llama_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_ready() {  # url pid
  for _ in $(seq 1 600); do
    kill -0 "$2" 2>/dev/null || return 1
    curl -sf "$1/v1/models" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}
audit() {  # name url
  local extra=()
  [[ -n "$soak" ]] && extra+=(--soak "$soak")
  rm -rf "$out/$1"
  local start=$SECONDS status=0
  "$build/bin/day0" audit "$gguf" --target "$2" --concurrency "$concurrency" --out "$out/$1" "${extra[@]}" || status=$?
  echo "audit of $1: exit $status in $((SECONDS - start)) s; report $out/$1/report.md" >&2
  return $status
}

verdict=0
if [[ -z "$only" || "$only" == llama ]]; then
  [[ -x "$llama_bin/llama-server" ]] || { echo "audit_llama_server.sh: $llama_bin/llama-server not found (bench/peers/llama_cpp.sh --prepare-only builds it)" >&2; exit 2; }
  "$llama_bin/llama-server" --version 2>&1 | grep -m1 version >&2 || true
  port="$(free_port)"
  "$llama_bin/llama-server" -m "$gguf" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" --jinja --no-repack \
    -np 4 -c $((4 * context)) -cb >"$out/llama-server.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port" "${pids[-1]}" || { echo "llama-server did not start: $out/llama-server.log" >&2; exit 3; }
  # Each slot holds --context tokens: that is the edge a request meets.
  audit llama-server "http://127.0.0.1:$port" || verdict=1
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
fi
if [[ -z "$only" || "$only" == day0 ]]; then
  port="$(free_port)"
  "$build/bin/day0" serve "$gguf" --port "$port" --threads "$threads" --context "$context" >"$out/day0-serve.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port" "${pids[-1]}" || { echo "day0 serve did not start: $out/day0-serve.log" >&2; exit 3; }
  audit day0-serve "http://127.0.0.1:$port" || verdict=1
fi
exit $verdict
