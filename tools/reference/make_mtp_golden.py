#!/usr/bin/env python3
"""Builds tests/golden/deepseek-v3-mtp: the DeepSeek-V3 miniature of golden_configs.py with one
multi-token-prediction (MTP) layer, stored unquantized, and a reference of that layer's draft logits.

  /opt/ref525/bin/python tools/reference/make_mtp_golden.py [--out tests/golden/deepseek-v3-mtp]

transformers 5.25 runs the main model (make_golden.py's --hf-init weights, dump_reference.py's dump), but
its DeepseekV3ForCausalLM has no MTP layer. The MTP module is written here in torch from the DeepSeek-V3
technical report (section 2.2), with transformers' own DeepseekV3DecoderLayer as its decoder layer:

  row t (t = 0 .. T-2) reads the main model's last decoder layer output h_t (before the final norm) and
  the next token x_{t+1}:  u_t = eh_proj([enorm(embed(x_{t+1})) | hnorm(h_t)])   (embedding first, as the
  public serving code and transformers' MtpLayer concatenate), then the decoder layer over u_0 .. u_{T-2}
  (causal, rotated at positions 1 .. T-1: the position of x_{t+1}, as transformers' MtpModel places
  them), then shared_head.norm and shared_head.head: logits of x_{t+2}.

The MTP layer's weights are random (N(0, 0.16^2), norm gains N(1, 0.2^2), the router's correction bias
N(0, 0.1^2)), rounded to bfloat16 and stored as a release stores them: model.layers.{n_layers}.embed_tokens,
enorm, hnorm, eh_proj, shared_head.norm / .head (its own embedding and head, distinct from the main
model's, so that a binding of the wrong one shows) and the decoder layer with one tensor per expert.

The reference file is dump_reference.py's (prompts, logits, hidden states, greedy continuations) plus, for
each prompt i, teacher-forced from the dump's own hidden states:
  mtp.<i>.logits  F32 [T-1, vocab]   the MTP layer's logits at rows 0 .. T-2
  mtp.<i>.hidden  F32 [T-1, hidden]  its decoder layer's output (before shared_head.norm)
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_configs import CONFIGS  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
NAME = "deepseek-v3-mtp"
PROMPT_LENGTHS = [5, 11, 17]
PROMPT_SEED = 5  # seed 3's prompts put a routing pick of the BF16 run on a near tie (Golden.Bf16...)


def golden_config():
    """DeepSeek-V3's miniature with one MTP layer, unquantized (the MTP layer is one more MoE layer)."""
    config = {k: v for k, v in CONFIGS["deepseek-v3"].items() if k != "quantization_config"}
    config["num_nextn_predict_layers"] = 1
    return config


def build_mtp(config):
    """The MTP layer as modules: embedding, the two input norms, eh_proj, the decoder layer, the head."""
    import torch
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    hidden, vocab = config.hidden_size, config.vocab_size
    mtp = torch.nn.ModuleDict({
        "embed_tokens": torch.nn.Embedding(vocab, hidden),
        "enorm": ds.DeepseekV3RMSNorm(hidden, eps=config.rms_norm_eps),
        "hnorm": ds.DeepseekV3RMSNorm(hidden, eps=config.rms_norm_eps),
        "eh_proj": torch.nn.Linear(2 * hidden, hidden, bias=False),
        "block": ds.DeepseekV3DecoderLayer(config, layer_idx=config.num_hidden_layers),
        "head_norm": ds.DeepseekV3RMSNorm(hidden, eps=config.rms_norm_eps),
        "head": torch.nn.Linear(hidden, vocab, bias=False),
    })
    torch.manual_seed(1)
    with torch.no_grad():
        buffers = [(n, b) for n, b in mtp.named_buffers() if n.endswith("e_score_correction_bias")]
        for name, p in list(mtp.named_parameters()) + buffers:
            if name.endswith("e_score_correction_bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name:
                p.normal_(1.0, 0.2)
            else:
                p.normal_(0.0, config.initializer_range)
            p.copy_(p.to(torch.bfloat16).float())  # the values the checkpoint stores
    return mtp.float().eval()


def mtp_tensors(mtp, config):
    """The MTP layer's tensors under a release's names (model.layers.{n_layers}.*), in bfloat16."""
    import torch

    prefix = f"model.layers.{config.num_hidden_layers}."
    inter = config.moe_intermediate_size
    out = {
        prefix + "embed_tokens.weight": mtp["embed_tokens"].weight,
        prefix + "enorm.weight": mtp["enorm"].weight,
        prefix + "hnorm.weight": mtp["hnorm"].weight,
        prefix + "eh_proj.weight": mtp["eh_proj"].weight,
        prefix + "shared_head.norm.weight": mtp["head_norm"].weight,
        prefix + "shared_head.head.weight": mtp["head"].weight,
    }
    for name, t in mtp["block"].state_dict().items():
        if name == "mlp.experts.gate_up_proj":  # [E, 2I, H]: gate rows, then up rows
            for e in range(t.shape[0]):
                out[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = t[e, :inter]
                out[f"{prefix}mlp.experts.{e}.up_proj.weight"] = t[e, inter:]
        elif name == "mlp.experts.down_proj":  # [E, H, I]
            for e in range(t.shape[0]):
                out[f"{prefix}mlp.experts.{e}.down_proj.weight"] = t[e]
        else:
            out[prefix + name] = t
    # The router and its correction bias stay float32, as releases keep them; the rest is bfloat16.
    return {k: (v.float() if ("mlp.gate." in k) else v.to(torch.bfloat16)).contiguous() for k, v in out.items()}


def mtp_draft(mtp, rotary, ids, hidden):
    """Teacher-forced MTP rows for one prompt: ids [T] (int), hidden [T, H] the main model's last decoder
    layer output. Returns (logits [T-1, vocab], block output [T-1, H])."""
    import torch

    rows = len(ids) - 1
    with torch.no_grad():
        tokens = torch.tensor([ids[1:]], dtype=torch.long)
        joined = torch.cat([mtp["enorm"](mtp["embed_tokens"](tokens)), mtp["hnorm"](hidden[None, :rows])], dim=-1)
        u = mtp["eh_proj"](joined)  # [1, T-1, H]
        positions = torch.arange(1, rows + 1)[None]  # the positions of x_1 .. x_{T-1}
        cos_sin = rotary(u, positions)
        mask = torch.full((rows, rows), torch.finfo(torch.float32).min).triu(1)[None, None]
        out = mtp["block"](u, attention_mask=mask, position_ids=positions, position_embeddings=cos_sin)
        out = out[0] if isinstance(out, tuple) else out
        logits = mtp["head"](mtp["head_norm"](out))
    return logits[0].contiguous(), out[0].contiguous()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests/golden", NAME))
    ap.add_argument("--seed", type=int, default=PROMPT_SEED, help="seed of the random prompts")
    args = ap.parse_args()
    import torch
    import transformers
    from safetensors.torch import load_file, safe_open, save_file
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds
    from make_golden import hf_init

    os.makedirs(args.out, exist_ok=True)
    for stale in os.listdir(args.out):
        os.remove(os.path.join(args.out, stale))
    config = golden_config()
    hf_init(NAME, args.out, config)  # the main model: transformers' init at std 0.16, saved in bfloat16
    os.remove(os.path.join(args.out, "generation_config.json"))  # the goldens keep config and weights only
    hf_config = transformers.DeepseekV3Config.from_pretrained(args.out)
    hf_config._attn_implementation = "eager"
    mtp = build_mtp(hf_config)
    weights = os.path.join(args.out, "model.safetensors")
    tensors = load_file(weights)
    tensors.update(mtp_tensors(mtp, hf_config))
    save_file(tensors, weights, metadata={"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")

    python = sys.executable
    reference = os.path.join(args.out, "reference.safetensors")
    subprocess.run([python, os.path.join(HERE, "dump_reference.py"), "check-load", args.out], check=True)
    subprocess.run([python, os.path.join(HERE, "dump_reference.py"), "dump", args.out, "--out", reference,
                    "--random-lengths", *map(str, PROMPT_LENGTHS), "--seed", str(args.seed), "--greedy", "6"],
                   check=True)
    with safe_open(reference, "pt") as f:
        metadata = f.metadata()
    dumped = load_file(reference)
    rotary = ds.DeepseekV3RotaryEmbedding(hf_config)
    last = hf_config.num_hidden_layers - 1
    i = 0
    while f"prompt.{i}.input_ids" in dumped:
        ids = dumped[f"prompt.{i}.input_ids"].tolist()
        logits, out = mtp_draft(mtp, rotary, ids, dumped[f"prompt.{i}.hidden.{last}"])
        dumped[f"mtp.{i}.logits"], dumped[f"mtp.{i}.hidden"] = logits, out
        i += 1
    metadata["mtp"] = ("mtp.<i>.logits [T-1, vocab] / mtp.<i>.hidden [T-1, hidden]: model.layers."
                       f"{hf_config.num_hidden_layers} teacher-forced on prompt.<i>.hidden.{last} and the next "
                       "tokens (tools/reference/make_mtp_golden.py)")
    save_file(dumped, reference, metadata=metadata)
    print(f"wrote {args.out}: {i} prompts with MTP draft logits")


if __name__ == "__main__":
    main()
