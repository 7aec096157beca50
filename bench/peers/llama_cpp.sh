#!/usr/bin/env bash
# Day0 and llama.cpp side by side on the bench shapes of ../shared/docs/benchmarks.md, same machine,
# same minutes, same weights. Never part of CI; nothing of llama.cpp enters the repository.
#
#   bench/peers/llama_cpp.sh [--rounds N] [--threads N] [--shapes "bench-dense-1b bench-moe-a02b"]
#                            [--quants "BF16 Q8_0 Q4_0"] [--scratch DIR] [--llama-bin DIR] [--prepare-only]
#
# 1. llama.cpp: the CPU tools (llama-bench, llama-perplexity, llama-server, llama-quantize) built from
#    the PyPI sdist of llama-cpp-python (its vendor/llama.cpp is the full tree) in DIR/llama.cpp,
#    unless --llama-bin names a folder that has them. The version is the one llama-bench reports.
# 2. Weights: `day0 synth` writes each shape (as bench/e2e.sh does), bench/peers/hf_to_gguf.py writes
#    the same tensors as a BF16 GGUF with the gguf package of that tree, llama-quantize makes Q8_0 and
#    Q4_0 from it.
# 3. Rounds, interleaved: each round probes the read bandwidth, then runs llama-bench (-p 512 -n 64,
#    one repetition after its warm-up) and day0_e2e_bench (prefill 512, decode 64, BF16 activations)
#    on each shape, alternating which engine goes first. The table gives medians over the rounds and
#    the median of the per-round ratios (Day0 / llama.cpp, BF16 weights on both sides).
# Keep the machine otherwise idle while it runs (a few minutes per round on 2 cores); --prepare-only
# does steps 1-2 (which need no quiet machine) and stops.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-$root/build/release}"
rounds=5
threads=2
shapes="bench-dense-1b bench-moe-a02b"
quants="BF16 Q8_0 Q4_0"
scratch="${DAY0_PEERS_DIR:-/tmp/day0-peers}"
llama_bin=""
prepare_only=0
sdist_version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"

usage() { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --quants) quants="$2"; shift 2 ;;
    --scratch) scratch="$2"; shift 2 ;;
    --llama-bin) llama_bin="$2"; shift 2 ;;
    --prepare-only) prepare_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "llama_cpp.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "llama_cpp.sh: --rounds must be a positive integer" >&2; exit 2; }
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "llama_cpp.sh: --threads must be a positive integer" >&2; exit 2; }
case "$scratch" in "$root"|"$root"/*) echo "llama_cpp.sh: --scratch must be outside the repository" >&2; exit 2 ;; esac
for tool in "$build/bin/day0" "$build/bench/day0_e2e_bench" "$build/bench/day0_stream_bench"; do
  [[ -x "$tool" ]] || { echo "llama_cpp.sh: $tool not built (cmake --build $build)" >&2; exit 2; }
done
mkdir -p "$scratch"
log() { echo "[peers $(date +%H:%M:%S)] $*" >&2; }

# --- llama.cpp ---------------------------------------------------------------------------------
if [[ -z "$llama_bin" ]]; then
  llama_bin="$scratch/llama.cpp/build/bin"
  if [[ ! -x "$llama_bin/llama-bench" ]]; then
    log "fetching llama-cpp-python $sdist_version (sdist) from PyPI"
    mkdir -p "$scratch/sdist"
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$sdist_version" -d "$scratch/sdist" >&2
    rm -rf "$scratch/llama.cpp"
    mkdir -p "$scratch/llama.cpp"
    tar -xzf "$scratch/sdist/llama_cpp_python-$sdist_version.tar.gz" -C "$scratch/llama.cpp" --strip-components=1
    log "building llama.cpp's CPU tools (native ISA)"
    cmake -S "$scratch/llama.cpp/vendor/llama.cpp" -B "$scratch/llama.cpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$llama_bin" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$llama_bin" >&2
    cmake --build "$scratch/llama.cpp/build" -j "$threads" \
      --target llama-bench llama-perplexity llama-server llama-quantize >&2
  fi
fi
for tool in llama-bench llama-quantize; do
  [[ -x "$llama_bin/$tool" ]] || { echo "llama_cpp.sh: $llama_bin/$tool not found" >&2; exit 2; }
done
export LD_LIBRARY_PATH="$llama_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
gguf_py=""
for candidate in "$llama_bin/../../vendor/llama.cpp/gguf-py" "$llama_bin/../../gguf-py" "$scratch/llama.cpp/vendor/llama.cpp/gguf-py"; do
  [[ -d "$candidate/gguf" ]] && { gguf_py="$(cd "$candidate" && pwd)"; break; }
done
[[ -n "$gguf_py" ]] || { echo "llama_cpp.sh: gguf-py of the llama.cpp tree not found beside $llama_bin" >&2; exit 2; }

# --- Python with numpy and pyyaml (for gguf-py) -----------------------------------------------------
python=python3
if ! python3 -c "import numpy, yaml" 2>/dev/null; then
  if [[ ! -x "$scratch/venv/bin/python" ]] || ! "$scratch/venv/bin/python" -c "import numpy, yaml" 2>/dev/null; then
    log "creating $scratch/venv with numpy and pyyaml"
    python3 -m venv "$scratch/venv"
    "$scratch/venv/bin/pip" install --quiet numpy pyyaml >&2
  fi
  python="$scratch/venv/bin/python"
fi

# --- Weights -----------------------------------------------------------------------------------
synth_args() {
  case "$1" in
    bench-dense-1b) echo "llama-3.1-8b --layers 16 --hidden 2048 --heads 32 --head-dim 64 --intermediate 8192 --vocab 32000 --seed 1" ;;
    bench-moe-a02b) echo "qwen3-30b-a3b --layers 12 --hidden 1024 --heads 16 --head-dim 128 --experts 64 --experts-per-token 8 --expert-intermediate 512 --vocab 32000 --seed 2" ;;
    # Tiny shapes that check the harness itself in seconds (their figures mean nothing).
    smoke-dense) echo "llama-3.1-8b --layers 2 --hidden 256 --heads 4 --head-dim 64 --intermediate 512 --vocab 1000 --seed 1" ;;
    smoke-moe) echo "qwen3-30b-a3b --layers 2 --hidden 256 --heads 4 --head-dim 64 --experts 8 --experts-per-token 2 --expert-intermediate 128 --vocab 1000 --seed 2" ;;
    *) echo "llama_cpp.sh: unknown shape $1" >&2; exit 2 ;;
  esac
}
models="$scratch/models"
mkdir -p "$models"
for shape in $shapes; do
  if [[ ! -f "$models/$shape/config.json" ]]; then
    log "day0 synth $shape"
    # shellcheck disable=SC2046
    "$build/bin/day0" synth $(synth_args "$shape") --out "$models/$shape" >&2
  fi
  if [[ ! -f "$models/$shape.BF16.gguf" ]]; then
    log "writing $shape.BF16.gguf"
    PYTHONPATH="$gguf_py" "$python" "$here/hf_to_gguf.py" "$models/$shape" "$models/$shape.BF16.gguf.tmp" >&2
    mv "$models/$shape.BF16.gguf.tmp" "$models/$shape.BF16.gguf"
  fi
  for q in $quants; do
    [[ "$q" == BF16 || -f "$models/$shape.$q.gguf" ]] && continue
    log "llama-quantize $shape -> $q"
    "$llama_bin/llama-quantize" "$models/$shape.BF16.gguf" "$models/$shape.$q.gguf.tmp" "$q" >/dev/null 2>&1
    mv "$models/$shape.$q.gguf.tmp" "$models/$shape.$q.gguf"
  done
done

if ((prepare_only)); then
  log "prepared: llama.cpp in $llama_bin, weights in $models"
  exit 0
fi

# --- Rounds ------------------------------------------------------------------------------------
results="$scratch/results"
rm -rf "$results"
mkdir -p "$results"
run_llama() {  # shape quant round
  "$llama_bin/llama-bench" -m "$models/$1.$2.gguf" -p 512 -n 64 -t "$threads" -r 1 -o json \
    >"$results/llama.$1.$2.$3.json" 2>"$results/llama.$1.$2.$3.err"
}
run_day0() {  # shape round
  DAY0_THREADS="$threads" DAY0_E2E_MODELS="$models/$1" "$build/bench/day0_e2e_bench" \
    --benchmark_format=json >"$results/day0.$1.$2.json" 2>"$results/day0.$1.$2.err"
}
for ((r = 1; r <= rounds; ++r)); do
  "$build/bench/day0_stream_bench" --benchmark_filter="BM_ReadBandwidth/$threads" --benchmark_format=json \
    >"$results/bandwidth.$r.json" 2>/dev/null
  for shape in $shapes; do
    log "round $r/$rounds: $shape"
    if ((r % 2)); then
      run_day0 "$shape" "$r"
      for q in $quants; do run_llama "$shape" "$q" "$r"; done
    else
      for q in $quants; do run_llama "$shape" "$q" "$r"; done
      run_day0 "$shape" "$r"
    fi
  done
done

"$python" - "$results" "$rounds" "$shapes" "$quants" "$threads" <<'EOF'
import json, statistics, sys
from pathlib import Path
results, rounds, shapes, quants, threads = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]

def counter(path, suffix):
    for b in json.loads(path.read_text())["benchmarks"]:
        if suffix in b["name"]:
            return b.get("tok/s")
    return None

def llama(shape, quant, r):
    prefill = decode = None
    rows = json.loads((results / f"llama.{shape}.{quant}.{r}.json").read_text())
    for row in rows:
        if row["n_prompt"] > 0 and row["n_gen"] == 0: prefill = row["avg_ts"]
        if row["n_gen"] > 0 and row["n_prompt"] == 0: decode = row["avg_ts"]
    return prefill, decode, rows[0].get("build_commit", "?"), rows[0].get("build_number", "?"), rows[0].get("cpu_info", "?")

bandwidth = []
for r in range(1, rounds + 1):
    for b in json.loads((results / f"bandwidth.{r}.json").read_text())["benchmarks"]:
        value = b.get("GB/s") or b.get("bytes_per_second", 0) / 1e9
        if value: bandwidth.append(value)
table, summary = [], {"rounds": rounds, "threads": int(threads), "read_bandwidth_gbs": bandwidth, "rows": []}
med = lambda xs: statistics.median(xs) if xs else float("nan")
for shape in shapes:
    day0 = {"prefill": [], "decode": []}
    for r in range(1, rounds + 1):
        path = results / f"day0.{shape}.{r}.json"
        day0["prefill"].append(counter(path, "/prefill"))
        day0["decode"].append(counter(path, "/decode"))
    for quant in quants:
        peer = {"prefill": [], "decode": []}
        for r in range(1, rounds + 1):
            p, d, commit, number, cpu = llama(shape, quant, r)
            peer["prefill"].append(p); peer["decode"].append(d)
        summary["llama_cpp"] = {"build_commit": commit, "build_number": number, "cpu": cpu}
        for test, label in (("prefill", "prefill pp512"), ("decode", "decode tg64")):
            row = {"shape": shape, "weights": quant, "test": label, "llama_cpp": med(peer[test]),
                   "llama_cpp_rounds": peer[test]}
            if quant == "BF16":
                ratios = [a / b for a, b in zip(day0[test], peer[test]) if a and b]
                row.update({"day0": med(day0[test]), "day0_rounds": day0[test], "ratio": med(ratios),
                            "ratio_rounds": ratios})
            summary["rows"].append(row)
(results / "summary.json").write_text(json.dumps(summary, indent=2))
l = summary.get("llama_cpp", {})
print(f"llama.cpp {l.get('build_commit')} (build {l.get('build_number')}), {l.get('cpu')}; {threads} threads; "
      f"{rounds} interleaved rounds; read bandwidth {min(bandwidth):.1f}-{max(bandwidth):.1f} GB/s")
print("| shape | weights | test | llama.cpp tok/s | Day0 tok/s (BF16) | Day0 / llama.cpp (median of rounds) | per-round ratios |")
print("|---|---|---|---:|---:|---:|---|")
for row in summary["rows"]:
    d0 = f"{row['day0']:.1f}" if "day0" in row else "-"
    ratio = f"{row['ratio']:.2f}" if "ratio" in row else "-"
    per = " ".join(f"{x:.2f}" for x in row.get("ratio_rounds", []))
    print(f"| {row['shape']} | {row['weights']} | {row['test']} | {row['llama_cpp']:.1f} | {d0} | {ratio} | {per} |")
print(f"(raw results: {results})")
EOF
