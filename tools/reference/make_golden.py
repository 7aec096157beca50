#!/usr/bin/env python3
"""Builds the golden miniatures under tests/golden/: for every family a config.json
(golden_configs.py), weights from `day0 synth` (deterministic random, the release's storage formats:
BF16, FP8 blocks, MXFP4), and a float32 transformers reference dump of several prompts.

  /opt/refvenv/bin/python tools/reference/make_golden.py --day0 build/release/bin/day0 [--only NAME ...]

`--hf-init` makes the weights with transformers' own random init instead (no FP8 / MXFP4: those
miniatures are skipped); it exists to test the engine before `day0 synth` is available.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_configs import CONFIGS, PROMPT_LENGTHS  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def hf_init(folder, config):
    import torch
    import transformers

    if "quantization_config" in config:
        print(f"skip {folder}: --hf-init cannot write quantized weights")
        return False
    torch.manual_seed(0)
    cls = getattr(transformers, config["architectures"][0])
    fields = {k: v for k, v in config.items() if k != "model_type"}
    model = cls(cls.config_class(**fields)).to(torch.bfloat16)
    model.save_pretrained(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:  # keep our config text, not the re-serialised one
        json.dump(config, f, indent=2)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--day0", default=os.path.join(REPO, "build/release/bin/day0"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests/golden"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--hf-init", action="store_true")
    ap.add_argument("--greedy", type=int, default=6)
    args = ap.parse_args()
    python = sys.executable
    for i, (name, config) in enumerate(sorted(CONFIGS.items())):
        if args.only and name not in args.only:
            continue
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        for stale in os.listdir(folder):
            os.remove(os.path.join(folder, stale))
        config_path = os.path.join(folder, "config.json")
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        if args.hf_init:
            if not hf_init(folder, config):
                continue
        else:
            run([args.day0, "synth", config_path, "--out", folder, "--seed", str(1000 + i)])
        run([python, os.path.join(HERE, "dump_reference.py"), "check-load", folder])
        lengths = [str(n) for n in PROMPT_LENGTHS[name]]
        run([python, os.path.join(HERE, "dump_reference.py"), "dump", folder, "--out",
             os.path.join(folder, "reference.safetensors"), "--random-lengths", *lengths, "--seed", str(i),
             "--greedy", str(args.greedy)])
    import torch
    import transformers
    with open(os.path.join(args.out, "VERSIONS"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\n")
        f.write("made by tools/reference/make_golden.py (float32, eager attention, CPU)\n")


if __name__ == "__main__":
    main()
