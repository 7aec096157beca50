"""Writes config.json files exactly as transformers' own config classes save them, for Day0's config
fidelity tests (tests/model/configs/<name>.<tag>.json). Needs only `transformers` (no torch):

    python tools/reference/make_config_fixtures.py --tag v5   # with transformers 5.x
    python tools/reference/make_config_fixtures.py --tag v4   # with transformers 4.x

Each fixture is a golden miniature's keys (golden_configs.py) passed to the family's config class and
saved with save_pretrained, plus cases that pin down one reading each (partial rotary inside
rope_parameters, swiglu_alpha, sliding_window 0, the num_local_experts attribute name, MiniMax-M2's
rotary_dim). A family transformers 4.x lacks is written as its remote-code config class would save it.
"""
import argparse
import json
import os
import sys
import tempfile

import transformers
from transformers import AutoConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_configs import CONFIGS  # noqa: E402
from make_mtp_golden import NAME as MTP_GOLDEN, golden_config as mtp_golden_config  # noqa: E402
from make_v4_mtp_golden import NAME as V4_MTP_GOLDEN, golden_config as v4_mtp_golden_config  # noqa: E402

# Extra cases: name -> (golden base, overrides).
CASES = {
    "glm-4.5-partial-0.75": ("glm-4.5", {"partial_rotary_factor": 0.75}),
    "gpt-oss-alpha-1.5": ("gpt-oss", {"swiglu_alpha": 1.5, "swiglu_limit": 5.0}),
    "qwen2-moe-no-sliding": ("qwen2-moe", {"use_sliding_window": False}),
    "qwen3-moe-experts": ("qwen3-moe", {"num_experts": 8}),
    "minimax-m2-rotary-4": ("minimax-m2", {"rotary_dim": 4}),
    "minimax-m2-no-rotary-dim": ("minimax-m2", {"rotary_dim": None}),
    # DeepSeek-V3.2's config class reroutes a num_experts keyword to n_routed_experts.
    "deepseek-v32-num-experts": ("deepseek-v32", {"num_experts": 4}),
    # Qwen3-Next: full_attention_interval 2 (transformers 4 saves it beside the layer_types it derives, 5 only
    # the layer_types).
    "qwen3-next-interval-2": ("qwen3-next", {"full_attention_interval": 2}),
    # OLMo-Hybrid with the class's derived defaults: layer kinds (i % 4 == 3 attention) and the linear
    # heads and widths (v5 saves what the class derives, the v4 remote-code spelling leaves them null).
    "olmo-hybrid-derived": ("olmo-hybrid", {"num_hidden_layers": 8, "layer_types": None,
                                            "linear_num_key_heads": None, "linear_num_value_heads": None,
                                            "linear_key_head_dim": None, "linear_value_head_dim": None}),
}


def remote_code_config(model_type, kwargs):
    """A family transformers 4.x does not ship (MiniMax-M2 came with remote code): its release config
    class is a PretrainedConfig subclass that keeps its keyword arguments, so save that."""
    cls = type("RemoteCodeConfig", (transformers.PretrainedConfig,), {"model_type": model_type})
    return cls(**kwargs)


def save(name, kwargs, out_dir, tag):
    kwargs = dict(kwargs)
    model_type = kwargs.pop("model_type")
    # Kimi K2 is DeepSeek-V3's class under its own model_type (remote code); write it as V3 does.
    cls_type = "deepseek_v3" if model_type == "kimi_k2" else model_type
    try:
        config = AutoConfig.for_model(cls_type, **kwargs)
    except ValueError:
        if tag != "v4":
            raise
        config = remote_code_config(cls_type, kwargs)
    with tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            data = json.load(f)
    if model_type != cls_type:
        data["model_type"] = model_type
    path = os.path.join(out_dir, f"{name}.{tag}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    print(path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", required=True, help="v4 or v5: the transformers major version")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/model/configs"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, kwargs in [*CONFIGS.items(), (MTP_GOLDEN, mtp_golden_config()),
                         (V4_MTP_GOLDEN, v4_mtp_golden_config())]:
        save(name, kwargs, args.out, args.tag)
    for name, (base, overrides) in CASES.items():
        kwargs = dict(CONFIGS[base])
        kwargs.update(overrides)
        save(name, kwargs, args.out, args.tag)
    with open(os.path.join(args.out, f"VERSION.{args.tag}"), "w") as f:
        f.write(f"transformers {transformers.__version__}\n")


if __name__ == "__main__":
    main()
