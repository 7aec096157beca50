#!/usr/bin/env python3
"""Reference side of bench/tokenize_bench.cpp: times Hugging Face's Rust `tokenizers` (PyPI) encoding the
same corpus file with the same tokenizer.json, one thread (RAYON_NUM_THREADS=1), three ways: the whole
text in one encode() call, one encode() per line, and encode_batch_fast() over the lines.

Reference tooling only (never run by CI). Usage:
  DAY0_TOKENIZE_CORPUS=/tmp/corpus.txt build/release/bench/day0_tokenize_bench   # writes the corpus
  python3 tools/bench/tokenize_hf.py /tmp/corpus.txt ../shared/tokenizers [--ids-out DIR]
"""
import argparse
import gzip
import json
import os
import pathlib
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402  (after the thread settings)

MODELS = ["llama-3", "qwen3", "deepseek-v3", "mistral-7b-instruct-v0.3", "gpt-oss"]


def load(model_dir: pathlib.Path) -> Tokenizer:
    plain = model_dir / "tokenizer.json"
    if plain.exists():
        return Tokenizer.from_file(str(plain))
    with gzip.open(model_dir / "tokenizer.json.gz", "rt", encoding="utf-8") as f:
        return Tokenizer.from_str(f.read())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("tokenizers_dir")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ids-out", help="write <model>.ids.json with the ids, to compare with day0's")
    args = ap.parse_args()
    text = pathlib.Path(args.corpus).read_bytes().decode("utf-8")
    size_mb = len(text.encode("utf-8")) / 1e6
    print(f"corpus: {size_mb:.2f} MB, tokenizers {__import__('tokenizers').__version__}")
    # Lines keep their "\n", as in BM_EncodeLines.
    lines = text.splitlines(keepends=True)
    print(f"{'model':28s} {'whole text':>12s} {'per line':>12s} {'batch_fast':>12s}  tokens (whole text)")
    for model in MODELS:
        tok = load(pathlib.Path(args.tokenizers_dir) / model)

        def best_of(fn):
            best = float("inf")
            for _ in range(args.repeats):
                # CPU time of this process, like Google Benchmark's CPU column: fair on a busy machine.
                t0 = time.process_time()
                fn()
                best = min(best, time.process_time() - t0)
            return size_mb / best

        ids = tok.encode(text, add_special_tokens=False).ids
        whole = best_of(lambda: tok.encode(text, add_special_tokens=False))
        per_line = best_of(lambda: [tok.encode(line, add_special_tokens=False) for line in lines])
        fast = best_of(lambda: tok.encode_batch_fast(lines, add_special_tokens=False))
        print(f"{model:28s} {whole:8.2f} MB/s {per_line:8.2f} MB/s {fast:8.2f} MB/s  {len(ids)}")
        if args.ids_out:
            pathlib.Path(args.ids_out, f"{model}.ids.json").write_text(json.dumps(ids))


if __name__ == "__main__":
    main()
