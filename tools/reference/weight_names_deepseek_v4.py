"""DeepSeek-V4 checkpoint names -> the module names of transformers' modeling_deepseek_v4.py.

For dump_vendor_reference.py --weight-names, when that modeling file stands in for DeepSeek's own code
(vendor_code_deepseek_v4.py). The release names its tensors as DeepSeek's inference code does
(`layers.3.attn.wq_a.weight`, one `experts.<e>.w1.weight` per expert); transformers renames them on load
and writes them back on save (its conversion_mapping.py), so a tiny checkpoint saved by transformers has
the release's names under transformers' `model.` prefix. Both spellings are accepted. Written as an
explicit table so that a name it does not know passes through unchanged and the strict loader names it.
"""
import re

import torch

# Inside a decoder layer: release name -> module name.
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn",
    "hc_attn_base": "attn_hc.base",
    "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn",
    "hc_ffn_base": "ffn_hc.base",
    "hc_ffn_scale": "ffn_hc.scale",
    "attn.attn_sink": "self_attn.sinks",
    "attn.norm.weight": "self_attn.kv_norm.weight",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight",
    "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight",
    "attn.indexer.weights_proj.weight": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "attn.indexer.wq_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
}
# The compressor's leaves, the same in the attention's compressor and in the indexer's own.
COMPRESSOR_LEAVES = {"ape": "position_bias", "norm.weight": "kv_norm.weight", "wgate.weight": "gate_proj.weight",
                     "wkv.weight": "kv_proj.weight"}
for leaf, renamed in COMPRESSOR_LEAVES.items():
    LAYER_NAMES[f"attn.compressor.{leaf}"] = f"self_attn.compressor.{renamed}"
    LAYER_NAMES[f"attn.indexer.compressor.{leaf}"] = f"self_attn.compressor.indexer.{renamed}"

TOP_NAMES = {
    "embed.weight": "model.embed_tokens.weight",
    "model.embed_tokens.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "model.norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
    "model.hc_head.hc_fn": "model.hc_head.hc_fn",
    "model.hc_head.hc_base": "model.hc_head.hc_base",
    "model.hc_head.hc_scale": "model.hc_head.hc_scale",
}
LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)$")
EXPERT = re.compile(r"^ffn\.experts\.(\d+)\.w([123])\.weight$")


def convert(tensors):
    """{release name: tensor} -> {module name: tensor}. Routed experts are stacked as the module keeps them:
    gate_up_proj [E, 2 * I, H] (w1 rows, then w3 rows) and down_proj [E, H, I] (w2)."""
    out, experts = {}, {}
    for name, tensor in tensors.items():
        layer = LAYER.match(name)
        if layer is None:
            out[TOP_NAMES.get(name, name)] = tensor
            continue
        index, rest = layer.groups()
        expert = EXPERT.match(rest)
        if expert is not None:
            experts.setdefault(int(index), {}).setdefault(int(expert.group(1)), {})[expert.group(2)] = tensor
            continue
        out[f"model.layers.{index}.{LAYER_NAMES.get(rest, rest)}"] = tensor
    for index, by_expert in experts.items():
        count = max(by_expert) + 1
        gaps = [f"expert {e} w{w}" for e in range(count) for w in "123" if w not in by_expert.get(e, {})]
        if gaps:
            raise SystemExit(f"error: layer {index}: routed experts without a partner tensor: {', '.join(gaps[:8])}")
        gate_up = [torch.cat([by_expert[e]["1"], by_expert[e]["3"]], dim=0) for e in range(count)]
        out[f"model.layers.{index}.mlp.experts.gate_up_proj"] = torch.stack(gate_up)  # [E, 2 * I, H]
        out[f"model.layers.{index}.mlp.experts.down_proj"] = torch.stack(
            [by_expert[e]["2"] for e in range(count)])  # [E, H, I]
    return out
