#!/usr/bin/env bash
# The cost of quantization on a trained model, Day0 and llama.cpp side by side: perplexity of a text
# and KL divergence against each engine's own BF16 run, with llama-perplexity's protocol on both sides
# (non-overlapping windows of --context tokens, the second half of each scored). Never part of CI.
#
#   bench/peers/quant_quality.sh [--shape smollm2] [--text FILE] [--context N] [--threads N]
#                                [--day0-weights "int8-g32 int4-g32 int4-g64"]
#                                [--quants "Q8_0 Q4_0 Q4_K_M"] [--day0-only] [--scratch DIR] [--llama-bin DIR]
#
# Weights come from bench/peers/llama_cpp.sh --prepare-only (same scratch folder): the shape's BF16
# folder and BF16 GGUF hold the same dequantized tensors; `day0 quantize` and `llama-quantize` make the
# variants from them. Day0 runs with BF16 activations (what `run` and `serve --dtype bf16` compute
# with: integer kernels for INT8 / INT4 weights, int8 activations per 32 columns); llama.cpp runs its
# CPU defaults. Each engine's variants are compared with that engine's BF16 run, so a row says what
# quantization costs inside one engine. Default text: the GPL-3 of Debian's common-licenses (35 kB of
# English, on every Debian machine). Results: DIR/quality/<shape>/summary.json and a table on stdout.
# The bench shapes have random weights and no tokenizer: they get a byte-level one (256 tokens, no
# merges: one token per byte) so that the KL divergence of the variants can be measured; their
# perplexity means nothing, and llama.cpp's GGUF of them has only a placeholder vocabulary, so use
# --day0-only there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-$root/build/release}"
shape=smollm2
text=/usr/share/common-licenses/GPL-3
context=512
threads=2
day0_weights="int8-g32 int4-g32 int4-g64"
quants="Q8_0 Q4_0 Q4_K_M"
scratch="${DAY0_PEERS_DIR:-/tmp/day0-peers}"
llama_bin=""
day0_only=0

usage() { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) shape="$2"; shift 2 ;;
    --text) text="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --day0-weights) day0_weights="$2"; shift 2 ;;
    --quants) quants="$2"; shift 2 ;;
    --scratch) scratch="$2"; shift 2 ;;
    --llama-bin) llama_bin="$2"; shift 2 ;;
    --day0-only) day0_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "quant_quality.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$text" ]] || { echo "quant_quality.sh: --text $text: no such file" >&2; exit 2; }
[[ "$context" =~ ^[1-9][0-9]*$ ]] || { echo "quant_quality.sh: --context must be a positive integer" >&2; exit 2; }
log() { echo "[quality $(date +%H:%M:%S)] $*" >&2; }

((day0_only)) && quants=""
prepare=(--prepare-only --shapes "$shape" --quants "BF16 $quants" --day0-weights "bf16 $day0_weights"
  --threads "$threads" --scratch "$scratch")
[[ -n "$llama_bin" ]] && prepare+=(--llama-bin "$llama_bin")
"$here/llama_cpp.sh" "${prepare[@]}"
[[ -n "$llama_bin" ]] || llama_bin="$scratch/llama.cpp/build/bin"
export LD_LIBRARY_PATH="$llama_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
models="$scratch/models"
out="$scratch/quality/$shape"
rm -rf "$out"
mkdir -p "$out"

for folder in "$models/$shape" "$models/$shape".day0-*; do
  [[ -f "$folder/config.json" && ! -f "$folder/tokenizer.json" ]] || continue
  log "byte-level tokenizer for $folder (it has none)"
  python3 - "$folder/tokenizer.json" <<'EOF'
import json, sys
# GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest are shifted past 255.
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
chars, extra = {}, 0
for b in range(256):
    if b in printable:
        chars[b] = chr(b)
    else:
        chars[b] = chr(256 + extra)
        extra += 1
tokenizer = {"version": "1.0", "added_tokens": [], "normalizer": None,
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
             "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
             "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                       "vocab": {chars[b]: b for b in range(256)}, "merges": []}}
open(sys.argv[1], "w").write(json.dumps(tokenizer))
EOF
done

day0_ppl() {  # name folder [extra args]
  local name="$1" folder="$2"
  shift 2
  log "day0 perplexity $name"
  DAY0_THREADS="$threads" "$build/bin/day0" perplexity "$folder" --file "$text" --context "$context" \
    --dtype bf16 --threads "$threads" --json "$@" >"$out/day0.$name.json" 2>"$out/day0.$name.err"
}
day0_ppl bf16 "$models/$shape" --save-logits "$out/day0.base.kld"
for v in $day0_weights; do day0_ppl "$v" "$models/$shape.day0-$v" --kl-base "$out/day0.base.kld"; done

llama_ppl() {  # quant [extra args]
  local q="$1"
  shift
  log "llama-perplexity $q"
  "$llama_bin/llama-perplexity" -m "$models/$shape.$q.gguf" -f "$text" -c "$context" -b "$context" \
    -t "$threads" "$@" >"$out/llama.$q.txt" 2>&1
}
if ((!day0_only)); then
  llama_ppl BF16 --kl-divergence-base "$out/llama.base.kld"
  for q in $quants; do llama_ppl "$q" --kl-divergence-base "$out/llama.base.kld" --kl-divergence; done
fi
rm -f "$out"/*.kld  # the saved log-probabilities: vocabulary x scored tokens each

python3 - "$out" "$shape" "$context" "$text" "$day0_weights" "$quants" "$day0_only" <<'EOF'
import json, re, sys
from pathlib import Path
out, shape, context, text, day0_weights, quants = Path(sys.argv[1]), *sys.argv[2:4], sys.argv[4], sys.argv[5].split(), sys.argv[6].split()
day0_only = sys.argv[7] == "1"

def day0(name):
    j = json.loads((out / f"day0.{name}.json").read_text())
    row = {"engine": "Day0", "weights": name, "ppl": j.get("ppl"), "ppl_err": j.get("ppl_stderr")}
    kl = j.get("kl") or {}
    row.update({"kld_mean": kl.get("kld_mean"), "kld_median": kl.get("kld_median"), "kld_p99": kl.get("kld_p99"),
                "kld_max": kl.get("kld_max"), "top1": kl.get("same_top1"), "dp_rms": kl.get("delta_p_rms")})
    return row, j

def number(pattern, s, group=1):
    m = re.search(pattern, s, re.M)
    return float(m.group(group)) if m else None

def llama(q):
    s = (out / f"llama.{q}.txt").read_text(errors="replace")
    row = {"engine": "llama.cpp", "weights": q,
           # Without a base: "Final estimate: PPL = x +/- e"; against a base: "Mean PPL(Q) : x ± e".
           "ppl": number(r"Final estimate: PPL = ([0-9.]+)", s) or number(r"^Mean PPL\(Q\)\s*:\s*([0-9.]+)", s),
           "ppl_err": number(r"Final estimate: PPL = [0-9.]+ \+/- ([0-9.]+)", s) or number(r"^Mean PPL\(Q\)\s*:\s*[0-9.]+ ±\s*([0-9.]+)", s),
           "kld_mean": number(r"^Mean\s+KLD:\s+([-0-9.e]+)", s), "kld_median": number(r"^Median\s+KLD:\s+([-0-9.e]+)", s),
           "kld_p99": number(r"^99\.0%\s+KLD:\s+([-0-9.e]+)", s), "kld_max": number(r"^Maximum KLD:\s+([-0-9.e]+)", s),
           "top1": number(r"^Same top p:\s+([0-9.]+)", s), "dp_rms": number(r"^RMS Δp\s*:\s+([0-9.]+)", s)}
    if row["top1"] is not None: row["top1"] /= 100.0
    if row["dp_rms"] is not None: row["dp_rms"] /= 100.0
    return row

rows = []
base, base_json = day0("bf16")
rows.append(base)
for v in day0_weights: rows.append(day0(v)[0])
if not day0_only:
    rows.append(llama("BF16"))
    for q in quants: rows.append(llama(q))
summary = {"shape": shape, "context": int(context), "text": text, "scored_tokens": base_json.get("scored_tokens"), "rows": rows}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
f = lambda x, p=4: "-" if x is None else f"{x:.{p}f}"
print(f"{shape}: {text}, context {context}, {summary['scored_tokens']} scored tokens; each engine's variants against its own BF16 run")
print("| engine | weights | PPL | KLD mean | KLD median | KLD p99 | KLD max | top-1 agreement | RMS Δp |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    ppl = "-" if r["ppl"] is None else f"{r['ppl']:.4f} ± {f(r['ppl_err'])}"
    print(f"| {r['engine']} | {r['weights']} | {ppl} | {f(r['kld_mean'], 5)} | {f(r['kld_median'], 5)} | {f(r['kld_p99'], 4)} | "
          f"{f(r['kld_max'], 3)} | {f(r['top1'], 4)} | {f(r['dp_rms'], 4)} |")
print(f"(raw results: {out})")
EOF
