#!/usr/bin/env bash
# The official `openai` Python client drives `day0 serve` end to end (tests/serve/openai_client.py):
# chat (plain and streamed), completions, stop strings, logprobs, and the error for a wrong model.
# Usage: openai_client_test.sh DAY0_BINARY SHARED_DIR VENV_DIR
# Exit 77 (CTest: skipped) with a visible message when PyPI is unreachable or the shared tokenizer is
# missing; the venv is created once in VENV_DIR and reused.
set -uo pipefail
day0="$1"
shared="$2"
venv="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tokenizer="$shared/tokenizers/mistral-7b-instruct-v0.3"
if [[ ! -d "$tokenizer" ]]; then
  echo "SKIPPED: shared tokenizer not found at $tokenizer"
  exit 77
fi
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "SKIPPED: python3 -m venv is not available (Debian package python3-venv)"
    exit 77
  fi
  if ! timeout 180 "$venv/bin/pip" install --quiet --disable-pip-version-check openai >"$venv.pip.log" 2>&1; then
    echo "SKIPPED: could not install the openai package from PyPI (offline?); see $venv.pip.log"
    tail -3 "$venv.pip.log"
    rm -rf "$venv"
    exit 77
  fi
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$day0" synth llama-3.1-8b --out "$work/model" --vocab 32768 --layers 2 >/dev/null || exit 1
"$day0" serve "$work/model" --tokenizer "$tokenizer" --port 0 --served-model-name mini --api-key sekret \
  --kv-blocks 4096 --threads 2 >"$work/out.txt" 2>"$work/err.txt" &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port="$(sed -n 's#^listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$work/out.txt")"
  [[ -n "$port" ]] && break
  sleep 0.1
done
if [[ -z "$port" ]]; then
  echo "FAILED: the server did not start"; cat "$work/err.txt"; exit 1
fi
"$venv/bin/python" "$here/openai_client.py" "http://127.0.0.1:$port/v1" sekret
rc=$?
kill -TERM "$server_pid"
wait "$server_pid"
server_rc=$?
server_pid=""
if [[ $server_rc -ne 0 ]]; then
  echo "FAILED: day0 serve exited $server_rc after SIGTERM"; cat "$work/err.txt"; exit 1
fi
exit $rc
