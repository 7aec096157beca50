#!/usr/bin/env python3
"""DeepSeek-V4 dumped twice, through transformers' class and through its modeling file as vendor code.

No DeepSeek repository is reachable here, so transformers' own modeling_deepseek_v4.py stands in for the
vendor's model.py: it and configuration_deepseek_v4.py are copied into a folder of their own, where the
imports that reach into the transformers library (`from ...activations import ACT2FN`) are rewritten to
absolute ones (`from transformers.activations import ACT2FN`) and the import of the sibling configuration
file stays relative (`from .configuration_deepseek_v4 import ...`, resolved from that folder by
dump_vendor_reference.py). The copy is then what a vendor ships: a file, a class name, a checkpoint.

  /opt/ref525/bin/python tools/reference/vendor_code_deepseek_v4.py [--checkpoint DIR] [--work DIR]

Without --checkpoint a tiny checkpoint is made with transformers' own init (std 0.16, seed 0): every
attention kind (sliding, compressed sparse, heavily compressed), a hash-routed layer, hyper-connections.
Both dumps run in processes of their own (dump_reference.py, dump_vendor_reference.py with
weight_names_deepseek_v4.py) on the same prompts; the script prints the largest |difference| of each
tensor kind as JSON and exits 1 unless the dumps agree within --tolerance (default 0: bit-identical).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Small enough for seconds of CPU; prompts up to 20 tokens overrun the window (8) and fill several
# compression groups of both ratios (4 and 8), and the indexer keeps 2 of up to 5 compressed entries.
TINY_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 256,
    "hidden_size": 64,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "q_lora_rank": 32,
    "partial_rotary_factor": 0.25,
    "num_experts_per_tok": 2,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                    "compressed_sparse_attention"],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
    "mlp_layer_types": ["hash_moe", "moe", "moe", "moe"],
    "sliding_window": 8,
    "o_groups": 2,
    "o_lora_rank": 16,
    "index_n_heads": 2,
    "index_head_dim": 16,
    "index_topk": 2,
    "initializer_range": 0.16,
    "max_position_embeddings": 256,
    "num_nextn_predict_layers": 0,
}
PROMPT_LENGTHS = ["5", "12", "20"]


def make_tiny_checkpoint(folder):
    import torch
    import transformers

    torch.manual_seed(0)
    fields = {k: v for k, v in TINY_CONFIG.items() if k not in ("model_type", "architectures")}
    model = transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**fields))
    with torch.no_grad():
        # Buffers that start at zero select nothing: random correction biases and a real hash table make
        # both dumps depend on them.
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.1)
            if name.endswith("tid2eid"):
                buf.copy_(torch.stack([torch.randperm(TINY_CONFIG["n_routed_experts"])[:buf.shape[1]]
                                       for _ in range(buf.shape[0])]))
    model.save_pretrained(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(TINY_CONFIG, f, indent=2)


def vendor_copy(folder):
    """Copies transformers' DeepSeek-V4 modeling and configuration files into `folder`, imports of the
    library made absolute; returns the modeling file's path."""
    import transformers.models.deepseek_v4 as family

    source = os.path.dirname(family.__file__)
    os.makedirs(folder, exist_ok=True)
    for name in ("modeling_deepseek_v4.py", "configuration_deepseek_v4.py"):
        with open(os.path.join(source, name)) as f:
            text = f.read()
        text = re.sub(r"^from \.\.\.? import ", "from transformers import ", text, flags=re.M)
        text = re.sub(r"^from \.\.\.(\w)", r"from transformers.\1", text, flags=re.M)
        if re.search(r"^from \.\.", text, flags=re.M):
            raise SystemExit(f"error: {name}: an import two levels up is left that this copy does not rewrite")
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    return os.path.join(folder, "modeling_deepseek_v4.py")


def compare(path_a, path_b):
    """Largest |a - b| per tensor kind of two day0-reference/1 files (logits, hidden, final_norm,
    greedy_logits), whether token ids are equal, and the names only one file has."""
    import torch
    from safetensors import safe_open

    with safe_open(path_a, "pt") as a, safe_open(path_b, "pt") as b:
        names_a, names_b = set(a.keys()), set(b.keys())
        report = {"only_in_first": sorted(names_a - names_b), "only_in_second": sorted(names_b - names_a),
                  "ids_equal": True, "max_abs_diff": {}, "max_abs": {}, "tensors": len(names_a & names_b)}
        for name in sorted(names_a & names_b):
            x, y = a.get_tensor(name), b.get_tensor(name)
            kind = re.sub(r"^prompt\.\d+\.", "", re.sub(r"\.\d+$", "", name))
            if not x.is_floating_point():
                report["ids_equal"] &= bool(torch.equal(x, y))
                continue
            if x.shape != y.shape:
                report["max_abs_diff"][kind] = float("inf")
                continue
            diff = float((x - y).abs().max()) if x.numel() else 0.0
            report["max_abs_diff"][kind] = max(report["max_abs_diff"].get(kind, 0.0), diff)
            report["max_abs"][kind] = max(report["max_abs"].get(kind, 0.0), float(x.abs().max()))
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a DeepSeek-V4 checkpoint folder (default: a tiny one made here)")
    parser.add_argument("--work", help="folder for the vendor copy, the dumps and the tiny checkpoint (default: "
                                       "a temporary one, removed afterwards)")
    parser.add_argument("--tolerance", type=float, default=0.0, help="largest |difference| accepted (default 0)")
    args = parser.parse_args()
    if args.tolerance < 0:
        raise SystemExit(f"error: --tolerance: expected a number >= 0, found {args.tolerance}")
    work = args.work or tempfile.mkdtemp(prefix="day0-vendor-v4-")
    try:
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = os.path.join(work, "checkpoint")
            make_tiny_checkpoint(checkpoint)
        vendor_file = vendor_copy(os.path.join(work, "vendor"))
        prompts = ["--random-lengths", *PROMPT_LENGTHS, "--seed", "7", "--greedy", "4"]
        via_transformers = os.path.join(work, "transformers.safetensors")
        via_vendor = os.path.join(work, "vendor.safetensors")
        subprocess.run([sys.executable, os.path.join(HERE, "dump_reference.py"), "dump", checkpoint, "--out",
                        via_transformers, *prompts], check=True, stdout=sys.stderr)
        subprocess.run([sys.executable, os.path.join(HERE, "dump_vendor_reference.py"), checkpoint, "--vendor-code",
                        vendor_file, "--vendor-class", "DeepseekV4ForCausalLM", "--weight-names",
                        os.path.join(HERE, "weight_names_deepseek_v4.py"), "--forward-kwargs",
                        '{"use_cache": false}', "--out", via_vendor, *prompts], check=True, stdout=sys.stderr)
        report = compare(via_transformers, via_vendor)
        worst = max(report["max_abs_diff"].values(), default=float("inf"))
        report["agree"] = (not report["only_in_first"] and not report["only_in_second"] and report["ids_equal"]
                           and worst <= args.tolerance)
        print(json.dumps(report, indent=1))
        return 0 if report["agree"] else 1
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
