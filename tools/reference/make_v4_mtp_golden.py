#!/usr/bin/env python3
"""Builds tests/golden/deepseek-v4-mtp: the DeepSeek-V4 miniature of golden_configs.py with one
multi-token-prediction (MTP) layer, stored unquantized, and a reference of that layer's draft logits.

  /opt/ref525/bin/python tools/reference/make_v4_mtp_golden.py [--out tests/golden/deepseek-v4-mtp]

transformers 5.25 runs the main model (make_golden.py's --hf-init weights, dump_reference.py's dump) but
drops the release's mtp.* tensors on load. The MTP layer is written here in torch after the math of
DeepSeek's own V4 inference code (its MTPBlock), with transformers' DeepseekV4DecoderLayer as the layer's
block and DeepseekV4HyperHead as its stream collapse:

  row t (t = 0 .. T-2) reads the main model's hidden state after its last decoder layer h_t, the hc_mult
  streams [hc, H] as they are before the model's hc_head, and the next token x_{t+1}:
    e     = e_proj(enorm(embed(x_{t+1})))                      (the main model's embedding)
    s_j   = h_proj(hnorm(h_t[j])) + e   for each stream j      (hnorm over one stream's H values)
  then the block over s_0 .. s_{T-2} (causal within its sliding window, at positions 0 .. T-2: RoPE and the
  window see only differences), then the layer's own hc_head (fn / base / scale), its own norm and the main
  model's head: logits of x_{t+2}.

The MTP layer's block is the last layer of a model of num_hidden_layers + 1 layers made by make_golden.py's
hf_init (so it is initialised as the golden's layers are; compress_ratios' last entry 0 makes it a sliding
layer, num_hash_layers a learned-routed one) and saved by transformers, whose names for that layer become
mtp.0.*; the main model is the same model's first num_hidden_layers layers with its embedding, norm, hc_head
and head. e_proj / h_proj are N(0, 0.16^2), enorm / hnorm / norm gains N(1, 0.2^2), hc_head_fn N(0, 0.16^2),
hc_head_base N(0, 0.5^2), hc_head_scale U(0.5, 1.5), all stored in bfloat16 as the rest of the miniature.

The reference file is dump_reference.py's (prompts, logits, hidden streams, greedy continuations) plus, for
each prompt i, teacher-forced from the dump's own hidden streams of the last layer:
  mtp.<i>.logits  F32 [T-1, vocab]        the MTP layer's logits at rows 0 .. T-2
  mtp.<i>.hidden  F32 [T-1, hc_mult * H]  its block's output streams (before its hc_head and norm)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_configs import CONFIGS  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
NAME = "deepseek-v4-mtp"
PROMPT_LENGTHS = [5, 11, 17]
PROMPT_SEED = 5


def golden_config():
    """DeepSeek-V4's miniature with one MTP layer, unquantized. compress_ratios has an entry for the MTP
    layer (0: sliding), as the release's has."""
    config = {k: v for k, v in CONFIGS["deepseek-v4"].items() if k != "quantization_config"}
    config["num_nextn_predict_layers"] = 1
    if len(config["compress_ratios"]) != config["num_hidden_layers"] + 1 or config["compress_ratios"][-1] != 0:
        raise SystemExit("golden_configs' deepseek-v4: compress_ratios must end with the MTP layer's 0")
    return config


def with_mtp_layer(config):
    """The config of a model whose last layer is the MTP layer's block."""
    ext = dict(config, num_hidden_layers=config["num_hidden_layers"] + 1, num_nextn_predict_layers=0)
    if ext["num_hash_layers"] >= ext["num_hidden_layers"]:
        raise SystemExit("the MTP layer must be past num_hash_layers (a learned-routed MoE)")
    return ext


def mtp_extras(hidden, hc_mult, initializer_range):
    """The MTP layer's own tensors besides its block, under the release's names, bfloat16-rounded."""
    import torch

    torch.manual_seed(1)
    out = {
        "e_proj.weight": torch.randn(hidden, hidden) * initializer_range,
        "h_proj.weight": torch.randn(hidden, hidden) * initializer_range,
        "enorm.weight": 1.0 + 0.2 * torch.randn(hidden),
        "hnorm.weight": 1.0 + 0.2 * torch.randn(hidden),
        "norm.weight": 1.0 + 0.2 * torch.randn(hidden),
        "hc_head_fn": torch.randn(hc_mult, hc_mult * hidden) * initializer_range,
        "hc_head_base": 0.5 * torch.randn(hc_mult),
        "hc_head_scale": 0.5 + torch.rand(1),
    }
    return {k: v.to(torch.bfloat16).float() for k, v in out.items()}


class MtpLayer:
    """The MTP layer's math in float32 (see the module docstring)."""

    def __init__(self, block, extras, config, embed, head, rotary):
        import torch
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

        self.block, self.embed, self.head, self.rotary = block, embed, head, rotary
        self.window = config.sliding_window
        eps = config.rms_norm_eps
        self.enorm, self.hnorm, self.norm = (v4.DeepseekV4RMSNorm(config.hidden_size, eps=eps) for _ in range(3))
        self.hc_head = v4.DeepseekV4HyperHead(config)
        with torch.no_grad():
            self.enorm.weight.copy_(extras["enorm.weight"])
            self.hnorm.weight.copy_(extras["hnorm.weight"])
            self.norm.weight.copy_(extras["norm.weight"])
            self.hc_head.hc_fn.copy_(extras["hc_head_fn"])
            self.hc_head.hc_base.copy_(extras["hc_head_base"])
            self.hc_head.hc_scale.copy_(extras["hc_head_scale"])
        self.e_proj, self.h_proj = extras["e_proj.weight"], extras["h_proj.weight"]
        self.hc_mult = config.hc_mult

    def __call__(self, next_ids, streams):
        """next_ids [R] (x_1 .. x_R), streams [R, hc * H] (h_0 .. h_{R-1}): logits [R, V], block output
        [R, hc * H]."""
        import torch
        import torch.nn.functional as F

        rows = len(next_ids)
        with torch.no_grad():
            tokens = torch.tensor([next_ids], dtype=torch.long)
            e = F.linear(self.enorm(self.embed(tokens)), self.e_proj)  # [1, R, H]
            h = streams[None, :rows].unflatten(-1, (self.hc_mult, -1))  # [1, R, hc, H]
            x = F.linear(self.hnorm(h), self.h_proj) + e.unsqueeze(2)  # [1, R, hc, H]
            positions = torch.arange(rows)[None]
            rotary = {kind: self.rotary(e, position_ids=positions, layer_type=kind) for kind in ("main", "compress")}
            q, k = torch.arange(rows)[:, None], torch.arange(rows)[None, :]
            visible = (k <= q) & (q - k < self.window)
            mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min)[None, None]
            out = self.block(x, input_ids=tokens, position_embeddings=rotary, position_ids=positions,
                             attention_mask=mask, cache=None)
            out = out[0] if isinstance(out, tuple) else out  # [1, R, hc, H]
            logits = self.head(self.norm(self.hc_head(out)))
        return logits[0].contiguous(), out[0].flatten(-2).contiguous()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests/golden", NAME))
    ap.add_argument("--seed", type=int, default=PROMPT_SEED, help="seed of the random prompts")
    args = ap.parse_args()
    import torch
    import transformers
    from safetensors.torch import load_file, safe_open, save_file
    from make_golden import hf_init

    config = golden_config()
    n_layers = config["num_hidden_layers"]
    work = tempfile.mkdtemp(prefix="day0-v4-mtp-")
    try:
        ext_folder = os.path.join(work, "with-mtp-layer")
        hf_init(NAME, ext_folder, with_mtp_layer(config))
        stored = load_file(os.path.join(ext_folder, "model.safetensors"))
        block_prefix = f"model.layers.{n_layers}."
        tensors = {k: v for k, v in stored.items() if not k.startswith(block_prefix)}
        mtp = {"mtp.0." + k[len(block_prefix):]: v for k, v in stored.items() if k.startswith(block_prefix)}
        extras = mtp_extras(config["hidden_size"], config["hc_mult"], config["initializer_range"])
        for name, t in extras.items():
            mtp["mtp.0." + name] = t.to(torch.bfloat16)
        tensors.update(mtp)

        os.makedirs(args.out, exist_ok=True)
        for stale in os.listdir(args.out):
            os.remove(os.path.join(args.out, stale))
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(args.out, "model.safetensors"),
                  metadata={"format": "pt"})
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")

        python = sys.executable
        reference = os.path.join(args.out, "reference.safetensors")
        subprocess.run([python, os.path.join(HERE, "dump_reference.py"), "check-load", args.out], check=True)
        subprocess.run([python, os.path.join(HERE, "dump_reference.py"), "dump", args.out, "--out", reference,
                        "--random-lengths", *map(str, PROMPT_LENGTHS), "--seed", str(args.seed), "--greedy",
                        "6"], check=True)

        ext = transformers.DeepseekV4ForCausalLM.from_pretrained(ext_folder, dtype=torch.float32,
                                                                 attn_implementation="eager").eval()
        layer = MtpLayer(ext.model.layers[n_layers], extras, ext.config, ext.model.embed_tokens, ext.lm_head,
                         ext.model.rotary_emb)
        with safe_open(reference, "pt") as f:
            metadata = f.metadata()
        dumped = load_file(reference)
        last = n_layers - 1
        i = 0
        while f"prompt.{i}.input_ids" in dumped:
            ids = dumped[f"prompt.{i}.input_ids"].tolist()
            logits, out = layer(ids[1:], dumped[f"prompt.{i}.hidden.{last}"])
            dumped[f"mtp.{i}.logits"], dumped[f"mtp.{i}.hidden"] = logits, out
            i += 1
        metadata["mtp"] = (f"mtp.<i>.logits [T-1, vocab] / mtp.<i>.hidden [T-1, hc_mult * hidden]: mtp.0 "
                           f"teacher-forced on prompt.<i>.hidden.{last} and the next tokens "
                           "(tools/reference/make_v4_mtp_golden.py)")
        save_file(dumped, reference, metadata=metadata)
        print(f"wrote {args.out}: {i} prompts with MTP draft logits")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
