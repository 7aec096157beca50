#!/usr/bin/env python3
"""Builds the golden miniatures under tests/golden/: for every family a config.json
(golden_configs.py), weights from `day0 synth` (deterministic random, the release's storage formats:
BF16, FP8 blocks, MXFP4), and a float32 transformers reference dump of several prompts.

  /opt/refvenv/bin/python tools/reference/make_golden.py --day0 build/release/bin/day0 [--only NAME ...]

`--hf-init` makes the weights with transformers' own random init instead (N(0, initializer_range^2),
the configs ask for 0.16) and quantizes them here as the releases store them (FP8 E4M3 with 128x128
F32 scale blocks for DeepSeek-V3 / Kimi K2; MXFP4 experts with E8M0 scales per 32 values for gpt-oss).

Why weights of std 0.16 rather than the usual 0.02: with 0.02 and hidden 64 the logits span about 1 and
attention is nearly uniform, so a 1% error in the attention scale stays under 1e-4 of the logit range
and a golden test would not see it. At 0.16 the same error moves logits by ~0.4% of their range.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_configs import CONFIGS, PROMPT_LENGTHS, PROMPT_SEEDS, SHARD_SIZES  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


FP8_SKIP = ("embed_tokens", "lm_head", "norm", "mlp.gate.weight", "block_sparse_moe.gate.weight",
            "e_score_correction_bias")


def quantize_fp8_blocks(w, block=128):
    """[M, K] float -> (F8_E4M3 [M, K], F32 scale_inv [ceil(M/128), ceil(K/128)]): scale = amax / 448."""
    import torch

    m, k = w.shape
    sm, sk = -(-m // block), -(-k // block)
    scales = torch.ones(sm, sk, dtype=torch.float32)
    q = torch.empty(m, k, dtype=torch.float8_e4m3fn)
    for i in range(sm):
        for j in range(sk):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block].float()
            amax = blk.abs().max().item()
            s = amax / 448.0 if amax > 0 else 1.0
            scales[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = (blk / s).to(torch.float8_e4m3fn)
    return q, scales


FP4_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def quantize_mxfp4(w):
    """[..., K] float (K % 32 == 0) -> (U8 blocks [..., K/32, 16], U8 E8M0 scales [..., K/32])."""
    import math
    import torch

    groups = w.float().reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = groups.abs().amax(-1)
    exp = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.zeros_like(amax))
    scaled = groups / torch.pow(2.0, exp)[..., None]
    grid = torch.tensor(FP4_GRID)
    idx = (scaled.abs()[..., None] - grid).abs().argmin(-1)  # nearest magnitude
    nib = idx | torch.where(scaled < 0, 8, 0)
    nib = nib.to(torch.uint8)
    packed = nib[..., 0::2] | (nib[..., 1::2] << 4)
    assert math.isfinite(float(exp.max()))
    return packed.contiguous(), (exp + 127).to(torch.uint8).contiguous()


# DeepSeek-V4's release formats (golden_configs.py "deepseek-v4-fp4"), on transformers' saved names: the
# projections Day0's weight table stores FP8 (attention, the indexer's query, the shared expert) and the
# routed experts it stores FP4.
V4_FP8 = re.compile(r"\.attn\.(wq_a|wq_b|wkv|wo_a|wo_b|indexer\.wq_b)\.weight$|\.ffn\.shared_experts\.w[123]\.weight$")
V4_FP4 = re.compile(r"\.ffn\.experts\.\d+\.w[123]\.weight$")


def pow2_at_least(x):
    """The smallest power of two >= x (x > 0), as a float tensor: a ue8m0 scale."""
    import torch

    return torch.pow(2.0, torch.ceil(torch.log2(x)))


def quantize_fp8_ue8m0(w, block):
    """[M, K] -> (F8_E4M3 [M, K], F8_E8M0 [ceil(M/b), ceil(K/b)]): each block's scale the power of two that
    brings its amax within 448, and the dequantized [M, K] (q * scale, exact in BF16)."""
    import torch

    m, k = w.shape
    sm, sk = -(-m // block), -(-k // block)
    padded = torch.zeros(sm * block, sk * block)
    padded[:m, :k] = w.float()
    blocks = padded.reshape(sm, block, sk, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scales = torch.where(amax > 0, pow2_at_least(amax / 448.0), torch.ones_like(amax))
    q = (blocks / scales[:, None, :, None]).to(torch.float8_e4m3fn)
    deq = (q.float() * scales[:, None, :, None]).reshape(sm * block, sk * block)[:m, :k]
    return q.reshape(sm * block, sk * block)[:m, :k].contiguous(), scales.to(torch.float8_e8m0fnu), deq


def quantize_fp4_ue8m0(w):
    """[M, K] (K % 32 == 0) -> (I8 [M, K/2]: e2m1 codes, column 2j in the low nibble of byte j; F8_E8M0
    [M, K/32]: each group's power-of-two scale), and the dequantized [M, K]."""
    import torch

    m, k = w.shape
    packed, exps = quantize_mxfp4(w)  # U8 [M, K/32, 16], U8 biased exponents [M, K/32]
    packed = packed.reshape(m, k // 2)
    lut = torch.tensor(FP4_GRID + [-v for v in FP4_GRID])
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(m, k).long()
    scale = torch.pow(2.0, exps.float() - 127.0)
    deq = (lut[codes].reshape(m, k // 32, 32) * scale[..., None]).reshape(m, k)
    return packed.view(torch.int8), exps.view(torch.float8_e8m0fnu), deq


def quantize_v4_release_formats(folder, config):
    """Rewrites the sharded save in `folder` in DeepSeek-V4's release formats (FP4 experts, FP8 blocks, ue8m0
    scales as `<name>_scale_inv` beside each weight, in its shard) and writes the same model with the
    dequantized weights, unquantized, to a temporary folder: the one the reference is dumped from (main
    removes it)."""
    import shutil
    import tempfile
    import torch
    from safetensors.torch import load_file, save_file

    block = config["quantization_config"]["weight_block_size"][0]
    plain = tempfile.mkdtemp(prefix="day0-golden-dequantized-")
    shutil.copytree(folder, plain, dirs_exist_ok=True)
    index_path = os.path.join(folder, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    weight_map, total = {}, 0
    for shard in sorted(set(index["weight_map"].values())):
        stored, dequantized = {}, {}
        for name, t in load_file(os.path.join(folder, shard)).items():
            if V4_FP4.search(name) or V4_FP8.search(name):
                q, scale, deq = quantize_fp4_ue8m0(t) if V4_FP4.search(name) else quantize_fp8_ue8m0(t, block)
                stored[name], stored[name + "_scale_inv"] = q, scale
                dequantized[name] = deq.to(t.dtype)
                if not torch.equal(deq.to(t.dtype).float(), deq):
                    raise SystemExit(f"{name}: dequantized values not exact in {t.dtype}")
            else:
                stored[name] = dequantized[name] = t
        save_file(stored, os.path.join(folder, shard), metadata={"format": "pt"})
        save_file(dequantized, os.path.join(plain, shard), metadata={"format": "pt"})
        for name, t in stored.items():
            weight_map[name] = shard
            total += t.numel() * t.element_size()
    index["weight_map"] = dict(sorted(weight_map.items()))
    index["metadata"] = {"total_size": total}
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)
    unquantized = {k: v for k, v in config.items() if k not in ("quantization_config", "expert_dtype")}
    with open(os.path.join(plain, "config.json"), "w") as f:
        json.dump(unquantized, f, indent=2)
    return plain


# Families whose golden gets random norm gains (make_golden's hf_init).
RANDOM_NORM_GAINS = ("deepseek_v4", "hy_v3", "exaone", "sarvam_moe", "param2moe", "cohere2_moe", "olmo_hybrid",
                     "gemma4_text", "gemma4")


def hf_init(name, folder, config):
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    golden = name  # the loops below reuse `name` for parameter names
    cls = getattr(transformers, config["architectures"][0], None)
    fields = {k: v for k, v in config.items() if k not in ("model_type", "quantization_config")}
    if cls is None:
        # A release's remote-code class that transformers builds as its model_type's own (exaone as
        # LlamaForCausalLM): through the model_type, as AutoModelForCausalLM loads the release.
        auto_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
        model = transformers.AutoModelForCausalLM.from_config(auto_config).to(torch.bfloat16)
    else:
        model = cls(cls.config_class(**fields)).to(torch.bfloat16)
    with torch.no_grad():
        # Correction biases start at zero, where they select nothing; random ones make the golden see
        # selection by sigmoid + bias against weighting by the unbiased sigmoid.
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.1)
            # DeepSeek-V4's hash routing table starts at zero (every token on expert 0): distinct random experts.
            if name.endswith("tid2eid"):
                experts, k = config["n_routed_experts"], buf.shape[1]
                buf.copy_(torch.stack([torch.randperm(experts)[:k] for _ in range(buf.shape[0])]))
            # Gemma 4's layer_scalar starts at 1, where a scalar the engine skipped would go unseen.
            if name.endswith("layer_scalar"):
                buf.uniform_(0.5, 1.5)
        # LayerNorms start as weight 1, bias 0 (DeepSeek-V3.2's indexer key norm): random ones make the
        # golden see both applied.
        for name, p in model.named_parameters():
            if config["model_type"] in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe") and "visual" not in name:
                # Zero-centred RMSNorms store the offset w of the gain 1 + w (0 at init), the gated norm a plain
                # gain (1) and dt_bias starts at 1: random ones make the golden see each applied as it is.
                if name.endswith("linear_attn.norm.weight"):
                    p.normal_(1.0, 0.2)
                elif name.endswith("norm.weight"):
                    p.normal_(0.0, 0.2)
                elif name.endswith("dt_bias"):
                    p.normal_(0.0, 1.0)
            # Nemotron-H: norm gains (the gated norm's too) and D start at 1, A_log at log(1..n) (the same in
            # every layer), dt_bias from the time-step range: random ones make the golden see each applied.
            if config["model_type"] == "nemotron_h":
                if name.endswith("norm.weight") or name.endswith("norm_f.weight") or name.endswith("mixer.D"):
                    p.normal_(1.0, 0.2)
                elif name.endswith("A_log"):
                    p.normal_(0.0, 1.0)
                elif name.endswith("dt_bias") or name.endswith("conv1d.bias"):
                    p.normal_(0.0, 1.0)
            # DeepSeek-V4: sinks and the compressors' position biases start at zero, the hyper-connections'
            # biases at zero and scales at one, where each would go unseen.
            if config["model_type"] == "deepseek_v4":
                if name.endswith(("sinks", "position_bias", "_hc.base", "hc_head.hc_base")):
                    p.normal_(0.0, 0.5)
                elif name.endswith(("_hc.scale", "hc_head.hc_scale")):
                    p.uniform_(0.5, 1.5)
            # Projection biases start at zero, where a bias the engine skipped would go unseen.
            if config["model_type"] == "seed_oss" and name.endswith("_proj.bias"):
                p.normal_(0.0, 0.5)
            # ERNIE 4.5's correction bias (moe_statics) is a parameter, which the buffer loop above misses;
            # random for the same reason.
            if config["model_type"] == "ernie4_5_moe" and name.endswith("e_score_correction_bias"):
                p.normal_(0.0, 0.1)
            # RMSNorm gains start at 1, where a gain the engine skipped would go unseen (GLM-5's q / kv latent
            # norms, K-EXAONE's per-head q / k norms).
            if config["model_type"] in ("glm_moe_dsa", "exaone_moe") and name.endswith("norm.weight") \
                    and "indexer" not in name:
                p.normal_(1.0, 0.2)
            # Norm gains start at 1, where a gain the engine skipped (a per-head q/k norm) would go unseen.
            if config["model_type"] in RANDOM_NORM_GAINS and name.endswith("norm.weight"):
                p.normal_(1.0, 0.2)
            # AFMoE: the router starts at zero (every score 0.5, the picks by the bias alone), the expert bias (a
            # parameter) at zero and the norm gains at one: random ones make the golden see each applied.
            if config["model_type"] == "afmoe":
                if name.endswith("router.gate.weight"):
                    p.normal_(0.0, config["initializer_range"])
                elif name.endswith("expert_bias"):
                    p.normal_(0.0, 0.1)
                elif name.endswith("norm.weight"):
                    p.normal_(1.0, 0.2)
            # Laguna: its correction bias is a parameter at zero and its norm gains start at one.
            if config["model_type"] == "laguna":
                if name.endswith("e_score_correction_bias"):
                    p.normal_(0.0, 0.1)
                elif name.endswith("norm.weight"):
                    p.normal_(1.0, 0.2)
            # MiMo-V2-Flash: norm gains start at one (the correction bias is a buffer, randomised above).
            if config["model_type"] == "mimo_v2_flash" and name.endswith("norm.weight"):
                p.normal_(1.0, 0.2)
            if name.endswith("indexer.k_norm.weight"):
                p.normal_(1.0, 0.2)
            elif name.endswith("indexer.k_norm.bias"):
                p.normal_(0.0, 0.5)
            # MiniMax-M3's zero-centred RMSNorms (the indexer's q / k norms too) store the offset w of the gain
            # 1 + w, 0 at init: random offsets make the golden see each gain applied.
            if config["model_type"] == "minimax_m3_vl" and name.endswith("norm.weight") and "language_model" in name:
                p.normal_(0.0, 0.2)
            # Gemma 4 attends with scale 1, its q / k norms setting the scale: gains near 0.5 keep the scores (up
            # to d / 4) where BF16 rounding of q and k does not decide the softmax. With gains near 1 scores reach
            # d, and transformers' own BF16 run of the miniature drifts KL 1e-2 from its F32 run.
            if config["model_type"] in ("gemma4_text", "gemma4") and "vision" not in name and \
                    name.endswith(("q_norm.weight", "k_norm.weight")):
                p.normal_(0.5, 0.1)
            # Gemma 4's router scales start at one, where a scale the engine skipped would go unseen. Its router
            # reads a norm scaled by 1 / sqrt(H): at std 0.16 its logits spread ~0.16 and the top-k picks sit
            # close to ties, so a std of 1 spreads them as a trained router's do.
            if config["model_type"] in ("gemma4_text", "gemma4") and \
                    name.endswith(("router.scale", "router.per_expert_scale")):
                p.uniform_(0.5, 1.5)
            if config["model_type"] in ("gemma4_text", "gemma4") and name.endswith("router.proj.weight"):
                p.normal_(0.0, 1.0)
    quant = (config.get("quantization_config") or {}).get("quant_method")
    shard = SHARD_SIZES.get(golden)
    if config["model_type"] == "deepseek_v4" and quant:
        model.save_pretrained(folder, max_shard_size=shard)
        os.remove(os.path.join(folder, "generation_config.json"))  # the engine reads none; not a release file
        reference_folder = quantize_v4_release_formats(folder, config)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        return reference_folder
    if shard and quant:
        raise SystemExit(f"{golden}: a sharded golden is written unquantized (the quantizer reads one file)")
    # Sharded as save_pretrained writes a release: model-0000i-of-0000n.safetensors + the index.
    model.save_pretrained(folder, max_shard_size=shard) if shard else model.save_pretrained(folder)
    path = os.path.join(folder, "model.safetensors")
    if quant:
        tensors = load_file(path)
        out = {}
        for name, t in tensors.items():
            if quant == "fp8" and t.dim() == 2 and name.endswith(".weight") and not any(s in name for s in FP8_SKIP):
                q, s = quantize_fp8_blocks(t)
                out[name], out[name[: -len(".weight")] + ".weight_scale_inv"] = q, s
            elif quant == "mxfp4" and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                blocks, scales = quantize_mxfp4(t.transpose(1, 2))  # stored x @ W: back to [E, out, in]
                out[name + "_blocks"], out[name + "_scales"] = blocks, scales
            else:
                out[name] = t
        save_file(out, path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:  # keep our config text, not the re-serialised one
        json.dump(config, f, indent=2)
    if config["model_type"] in RELEASE_NAMES:
        check_release_layout(folder, config, model)
    return folder


# Model types whose releases keep their own tensor names, which transformers converts on load and writes
# back on save (conversion_mapping.py): one name of the release's layout and the table's name it stands for.
RELEASE_NAMES = {
    "exaone": ("transformer.h.0.attn.attention.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"),
    "sarvam_moe": ("model.layers.0.attention.query_key_value.weight", "model.layers.0.self_attn.q_proj.weight"),
    "param2moe": ("model.layers.0.attention.query_key_value.weight", "model.layers.0.self_attn.q_proj.weight"),
}


def check_release_layout(folder, config, model):
    """The golden holds the release's names (save_pretrained writes them back: nothing to rename here), and
    transformers loads that folder into the model it saved: equal weights, equal logits."""
    import torch
    import transformers
    from safetensors import safe_open

    release, converted = RELEASE_NAMES[config["model_type"]]
    names = set()
    for file in os.listdir(folder):
        if file.endswith(".safetensors"):
            with safe_open(os.path.join(folder, file), "pt") as f:
                names.update(f.keys())
    if release not in names or converted in names:
        raise SystemExit(f"{folder}: expected the release's {release}, not transformers' {converted}")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    mine, theirs = model.state_dict(), loaded.state_dict()
    if mine.keys() != theirs.keys() or any(not torch.equal(mine[k].float(), theirs[k]) for k in mine):
        raise SystemExit(f"{folder}: transformers loads other weights than it saved")
    # The saved model's weights put straight into a fresh float32 model (no renaming, no splitting) compute
    # what the folder loaded through conversion_mapping.py computes.
    direct = transformers.AutoModelForCausalLM.from_config(loaded.config).float().eval()
    direct.load_state_dict({k: v.float() for k, v in mine.items()})
    ids = torch.tensor([[1, 7, 3, 11, 5]])
    with torch.no_grad():
        if not torch.equal(direct(ids).logits, loaded(ids).logits):
            raise SystemExit(f"{folder}: the reloaded model computes other logits")


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
        reference_folder = folder  # where transformers reads the weights (a quantized golden's dequantized copy)
        if args.hf_init:
            reference_folder = hf_init(name, folder, config)
            if not reference_folder:
                continue
        else:
            run([args.day0, "synth", config_path, "--out", folder, "--seed", str(1000 + i)])
        run([python, os.path.join(HERE, "dump_reference.py"), "check-load", reference_folder])
        lengths = [str(n) for n in PROMPT_LENGTHS[name]]
        run([python, os.path.join(HERE, "dump_reference.py"), "dump", reference_folder, "--out",
             os.path.join(folder, "reference.safetensors"), "--random-lengths", *lengths,
             "--seed", str(PROMPT_SEEDS.get(name, i)), "--greedy", str(args.greedy)])
        if reference_folder != folder:
            import shutil
            shutil.rmtree(reference_folder)
    if args.only:
        # VERSIONS describes the whole set; a partial run leaves it to be edited by hand (each
        # reference.safetensors also names the transformers version that wrote it).
        return
    import accelerate
    import safetensors
    import torch
    import transformers
    with open(os.path.join(args.out, "VERSIONS"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\n")
        f.write(f"safetensors {safetensors.__version__}\naccelerate {accelerate.__version__}\n")
        f.write("references: tools/reference/dump_reference.py (float32, eager attention, CPU)\n")
        weights = ("transformers random init, std 0.16, quantized by make_golden.py (--hf-init)" if args.hf_init
                   else "day0 synth")
        f.write(f"weights: {weights}\n")


if __name__ == "__main__":
    main()
