#!/usr/bin/env python3
"""Expected values of single ops, computed by transformers' own modules on small seeded inputs.

Each fixture is a JSON file under tests/data/ops/ that a semantics test in tests/ops/ reads: the
inputs, the parameters and what the transformers class (or function) returned, as float32 values
written exactly (a float32 is a double, printed by json as the shortest repr that reads back).

    /opt/ref525/bin/python tools/reference/make_op_fixtures.py [--out tests/data/ops] [NAME ...]

NAME is one of the FIXTURES keys (default: all). Inputs are seeded, so a rerun with the same torch and
transformers writes the same files.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as dsv4
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config


def flat(t):
    return [float(x) for x in t.detach().to(torch.float32).reshape(-1).tolist()]


def small_config(**overrides):
    kwargs = dict(
        vocab_size=32,
        hidden_size=5,
        intermediate_size=6,
        moe_intermediate_size=6,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        hc_mult=4,
        hc_sinkhorn_iters=20,
        hc_eps=1e-6,
        rms_norm_eps=1e-6,
        num_local_experts=7,
        num_experts_per_tok=3,
        routed_scaling_factor=1.5,
        scoring_func="sqrtsoftplus",
        swiglu_limit=10.0,
    )
    kwargs.update(overrides)
    return DeepseekV4Config(**kwargs)


def hyper_connections():
    """mHC: DeepseekV4HyperConnection's (pre, post, comb) and collapse, the decoder layer's post-mix (run
    through DeepseekV4DecoderLayer.forward with the attention replaced by a fixed output), and
    DeepseekV4HyperHead. The post-mix also in bfloat16 streams, where transformers rounds."""
    torch.manual_seed(1)
    tokens, hidden, n = 3, 5, 4
    cfg = small_config(hidden_size=hidden, hc_mult=n)
    layer = dsv4.DeepseekV4DecoderLayer(cfg, 0)
    for hc in (layer.attn_hc, layer.ffn_hc):
        hc.to(torch.float32)
        with torch.no_grad():
            hc.fn.normal_(0.0, 0.5)
            hc.base.normal_(0.0, 0.5)
            hc.scale.uniform_(0.5, 1.5)
    streams = torch.randn(1, tokens, n, hidden)
    attn_out = torch.randn(1, tokens, hidden)

    class FixedAttention(torch.nn.Module):
        def __init__(self, out):
            super().__init__()
            self.out = out

        def forward(self, hidden_states, **kwargs):
            return self.out.to(hidden_states.dtype), None

    layer.input_layernorm = torch.nn.Identity()
    layer.post_attention_layernorm = torch.nn.Identity()
    captured = {}

    def keep_output(_module, _inputs, output):
        captured["attn_hc"] = output

    def keep_input(_module, inputs):
        captured["mixed"] = inputs[0]

    layer.attn_hc.register_forward_hook(keep_output)
    layer.ffn_hc.register_forward_pre_hook(keep_input)

    class NoMlp(torch.nn.Module):
        def forward(self, x, input_ids=None):
            return torch.zeros_like(x)

    layer.mlp = NoMlp()

    def run(dtype):
        layer.self_attn = FixedAttention(attn_out)
        with torch.no_grad():
            layer(streams.to(dtype), position_embeddings=None, position_ids=None, attention_mask=None)
        post, comb, collapsed = captured["attn_hc"]
        return post, comb, collapsed, captured["mixed"]

    post, comb, collapsed, mixed = run(torch.float32)
    _, _, collapsed_bf16, mixed_bf16 = run(torch.bfloat16)
    # The projection the weights op starts from (a weightless RMSNorm and a matmul in Day0).
    with torch.no_grad():
        mixes = torch.nn.functional.linear(layer.attn_hc.input_norm(streams.reshape(1, tokens, -1).float()),
                                           layer.attn_hc.fn.float())
    head = dsv4.DeepseekV4HyperHead(cfg).to(torch.float32)
    with torch.no_grad():
        head.hc_fn.normal_(0.0, 0.5)
        head.hc_base.normal_(0.0, 0.5)
        head.hc_scale.fill_(0.75)
        head_out = head(streams)
        head_mixes = torch.nn.functional.linear(head.input_norm(streams.reshape(1, tokens, -1).float()),
                                                head.hc_fn.float())
    return {
        "tokens": tokens, "hidden": hidden, "n_streams": n,
        "sinkhorn_iters": cfg.hc_sinkhorn_iters, "hc_eps": cfg.hc_eps, "rms_eps": cfg.rms_norm_eps,
        "streams": flat(streams), "layer_output": flat(attn_out),
        "fn": flat(layer.attn_hc.fn), "base": flat(layer.attn_hc.base), "scale": flat(layer.attn_hc.scale),
        "mixes": flat(mixes),
        "pre_collapsed": flat(collapsed), "post": flat(post), "comb": flat(comb),
        "expanded": flat(mixed),
        "collapsed_bf16": flat(collapsed_bf16), "expanded_bf16": flat(mixed_bf16),
        "head_fn": flat(head.hc_fn), "head_base": flat(head.hc_base), "head_scale": flat(head.hc_scale),
        "head_mixes": flat(head_mixes), "head_out": flat(head_out),
    }


def router_sqrtsoftplus():
    """DeepseekV4TopKRouter (sqrtsoftplus scores, the correction bias for selection only, renormalised,
    routed_scaling_factor) and DeepseekV4HashRouter (experts from tid2eid[token id])."""
    torch.manual_seed(2)
    tokens, hidden, experts, top_k, vocab = 5, 9, 11, 3, 13
    cfg = small_config(hidden_size=hidden, num_local_experts=experts, num_experts_per_tok=top_k,
                       vocab_size=vocab, routed_scaling_factor=1.5)
    router = dsv4.DeepseekV4TopKRouter(cfg)
    hash_router = dsv4.DeepseekV4HashRouter(cfg)
    with torch.no_grad():
        router.weight.normal_(0.0, 1.0)
        router.e_score_correction_bias.normal_(0.0, 0.3)
        hash_router.weight.copy_(router.weight)
        hash_router.tid2eid.copy_(torch.stack([torch.randperm(experts)[:top_k] for _ in range(vocab)]))
    x = torch.randn(1, tokens, hidden) * 2.0
    input_ids = torch.randint(0, vocab, (1, tokens))
    with torch.no_grad():
        logits, weights, indices = router(x)
        _, hash_weights, hash_indices = hash_router(x, input_ids)
    return {
        "tokens": tokens, "hidden": hidden, "experts": experts, "top_k": top_k, "vocab": vocab,
        "routed_scaling_factor": cfg.routed_scaling_factor,
        "x": flat(x), "weight": flat(router.weight), "correction_bias": flat(router.e_score_correction_bias),
        "logits": flat(logits),
        # torch.topk(sorted=False): the order of the picks is unspecified; compare as sets.
        "expert_ids": indices.reshape(-1).tolist(), "expert_weights": flat(weights),
        "tid2eid": hash_router.tid2eid.reshape(-1).tolist(), "input_ids": input_ids.reshape(-1).tolist(),
        "hash_expert_ids": hash_indices.reshape(-1).tolist(), "hash_expert_weights": flat(hash_weights),
    }


def swiglu_plain_clamp():
    """DeepseekV4Experts._apply_gate (gate clamped above, up both sides, silu(gate) * up), the dense
    DeepseekV4MLP and DeepseekV4Experts.forward, with a limit the inputs cross."""
    torch.manual_seed(3)
    tokens, hidden, inter, experts, top_k, limit = 4, 7, 5, 6, 2, 3.0
    cfg = small_config(hidden_size=hidden, intermediate_size=inter, num_local_experts=experts,
                       num_experts_per_tok=top_k, swiglu_limit=limit)
    mod = dsv4.DeepseekV4Experts(cfg)
    mlp = dsv4.DeepseekV4MLP(cfg)
    with torch.no_grad():
        mod.gate_up_proj.normal_(0.0, 1.0)
        mod.down_proj.normal_(0.0, 0.5)
        for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            lin.weight.normal_(0.0, 1.0)
    gate_up = torch.randn(tokens, 2 * inter) * 4.0
    x = torch.randn(tokens, hidden) * 1.5
    top_k_index = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    top_k_weights = torch.rand(tokens, top_k)
    with torch.no_grad():
        act = mod._apply_gate(gate_up)
        mlp_out = mlp(x)
        experts_out = mod(x, top_k_index, top_k_weights)
    return {
        "tokens": tokens, "hidden": hidden, "inter": inter, "experts": experts, "top_k": top_k,
        "limit": limit, "gate_up": flat(gate_up), "act": flat(act),
        "x": flat(x), "mlp_gate": flat(mlp.gate_proj.weight), "mlp_up": flat(mlp.up_proj.weight),
        "mlp_down": flat(mlp.down_proj.weight), "mlp_out": flat(mlp_out),
        "gate_up_proj": flat(mod.gate_up_proj), "down_proj": flat(mod.down_proj),
        "expert_ids": top_k_index.reshape(-1).tolist(), "expert_weights": flat(top_k_weights),
        "experts_out": flat(experts_out),
    }


def grouped_linear():
    """DeepseekV4GroupedLinear (o_a_proj): each group of the attention output through its own block of
    the weight's rows."""
    torch.manual_seed(4)
    tokens, groups, in_per_group, out_per_group = 3, 3, 5, 4
    mod = dsv4.DeepseekV4GroupedLinear(in_per_group, groups * out_per_group, groups)
    with torch.no_grad():
        mod.weight.normal_(0.0, 1.0)
    x = torch.randn(1, tokens, groups, in_per_group)
    with torch.no_grad():
        y = mod(x)
    return {
        "tokens": tokens, "groups": groups, "in_per_group": in_per_group, "out_per_group": out_per_group,
        "x": flat(x), "weight": flat(mod.weight), "y": flat(y),
    }


def compressed_attention():
    """The compressors' gated pooling (DeepseekV4HCACompressor: windows of 4; DeepseekV4CSACompressor:
    windows of 3 overlapping the previous one, over two calls through its cache so that the second call
    starts from the first one's last window) and the lightning indexer's top-k over the compressed keys
    (DeepseekV4Indexer, its scores from DeepseekV4IndexerScorer). The pooled values are the kv_norm
    inputs; one query's hidden state is zero, so that all its scores tie at 0."""
    torch.manual_seed(5)
    hidden, head_dim, q_lora = 6, 8, 5
    cfg = small_config(hidden_size=hidden, head_dim=head_dim, q_lora_rank=q_lora, index_n_heads=3,
                       index_head_dim=4, index_topk=2, num_hidden_layers=2,
                       layer_types=["compressed_sparse_attention", "heavily_compressed_attention"],
                       compress_rates={"compressed_sparse_attention": 3, "heavily_compressed_attention": 4})
    hca = dsv4.DeepseekV4HCACompressor(cfg)
    csa = dsv4.DeepseekV4CSACompressor(cfg)
    for module in (hca, csa, csa.indexer):
        with torch.no_grad():
            module.kv_proj.weight.normal_(0.0, 1.0)
            module.gate_proj.weight.normal_(0.0, 1.0)
            module.position_bias.normal_(0.0, 0.5)
    with torch.no_grad():
        csa.indexer.q_b_proj.weight.normal_(0.0, 1.0)
        csa.indexer.scorer.weights_proj.weight.normal_(0.0, 1.0)
    captured = {}

    def keep(name, index=None):
        def hook(_module, inputs, output):
            captured.setdefault(name, []).append(output if index is None else inputs[index])
        return hook

    for name, module in (("hca", hca), ("csa", csa), ("idx", csa.indexer)):
        module.kv_proj.register_forward_hook(keep(f"{name}_kv"))
        module.gate_proj.register_forward_hook(keep(f"{name}_gate"))
        module.kv_norm.register_forward_hook(keep(f"{name}_pooled", 0))
    csa.indexer.scorer.register_forward_hook(keep("scores"))
    csa.indexer.scorer.register_forward_hook(keep("index_q", 0))
    csa.indexer.scorer.register_forward_hook(keep("index_keys", 1))
    csa.indexer.scorer.weights_proj.register_forward_hook(keep("index_weights"))
    csa.indexer.register_forward_hook(keep("selected"))

    class OneLayerCache:
        def __init__(self, layer):
            self.layers = [layer]

    cache = OneLayerCache(dsv4.DeepseekV4CSACache(cfg))
    calls = [7, 5]  # the first leaves one token of a window behind; the second completes two windows
    hidden_states = torch.randn(1, sum(calls), hidden)
    hidden_states[0, 10] = 0.0  # query at position 10: weights 0, every score 0
    q_residual = torch.randn(1, sum(calls), q_lora)
    with torch.no_grad():
        hca(hidden_states[:, :9], q_residual[:, :9], torch.arange(9)[None], None, 0)
        start = 0
        for n in calls:
            positions = torch.arange(start, start + n)[None]
            csa(hidden_states[:, start:start + n], q_residual[:, start:start + n], positions, cache, 0)
            start += n
    out = {
        "hidden": hidden, "head_dim": head_dim, "index_head_dim": cfg.index_head_dim,
        "index_n_heads": cfg.index_n_heads, "index_topk": cfg.index_topk,
        "csa_ratio": 3, "hca_ratio": 4, "csa_calls": calls,
        "hca_kv": flat(captured["hca_kv"][0]), "hca_gate": flat(captured["hca_gate"][0]),
        "hca_bias": flat(hca.position_bias), "hca_pooled": flat(captured["hca_pooled"][0]),
        "csa_bias": flat(csa.position_bias), "index_bias": flat(csa.indexer.position_bias),
        "weights_scaling": csa.indexer.scorer.weights_scaling, "softmax_scale": csa.indexer.scorer.softmax_scale,
    }
    for call in range(2):
        for name in ("csa", "idx"):
            out[f"{name}_kv_{call}"] = flat(captured[f"{name}_kv"][call])
            out[f"{name}_gate_{call}"] = flat(captured[f"{name}_gate"][call])
            out[f"{name}_pooled_{call}"] = flat(captured[f"{name}_pooled"][call])
        # The indexer's queries after RoPE [S, H, D], its running compressed keys [entries, D], the
        # weights_proj output [S, H] (before weights_scaling), its scores [S, entries] and picks [S, k].
        out[f"index_q_{call}"] = flat(captured["index_q"][call])
        out[f"index_keys_{call}"] = flat(captured["index_keys"][call])
        out[f"index_weights_{call}"] = flat(captured["index_weights"][call])
        out[f"index_scores_{call}"] = flat(captured["scores"][call])
        out[f"selected_{call}"] = captured["selected"][call].reshape(-1).tolist()
        out[f"selected_shape_{call}"] = list(captured["selected"][call].shape[1:])
    return out


def rope_trailing():
    """DeepSeek-V4's apply_rotary_pos_emb: interleaved pairs on the trailing rope dims of [nope | rope]
    heads, and the inverse rotation (cos, -sin) it applies to the attention output."""
    torch.manual_seed(6)
    heads, tokens, head_dim, rope_dim, theta = 2, 3, 8, 4, 10000.0
    inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float) / rope_dim))
    positions = torch.tensor([[5, 6, 300]])
    freqs = positions[..., None].float() * inv_freq
    cos, sin = freqs.cos(), freqs.sin()  # [1, S, rope_dim / 2], as DeepseekV4RotaryEmbedding gives them
    x = torch.randn(1, heads, tokens, head_dim)
    rotated = dsv4.apply_rotary_pos_emb(x, cos, sin)  # [B, H, S, D]
    back = dsv4.apply_rotary_pos_emb(x, cos, -sin)
    as_rows = lambda t: flat(t.transpose(1, 2))  # noqa: E731  [S, H * D], Day0's rows
    return {
        "heads": heads, "tokens": tokens, "head_dim": head_dim, "rope_dim": rope_dim,
        "positions": positions.reshape(-1).tolist(), "inv_freq": flat(inv_freq),
        "x": as_rows(x), "rotated": as_rows(rotated), "rotated_back": as_rows(back),
    }


def compressed_attention_bf16():
    """The compressors' pooling in a bfloat16 run as DeepSeek-V4 loads it: kv_proj / gate_proj in
    bfloat16, position_bias and kv_norm kept in float32 (_keep_in_fp32_modules_strict)."""
    torch.manual_seed(7)
    hidden, head_dim = 6, 8
    cfg = small_config(hidden_size=hidden, head_dim=head_dim, num_hidden_layers=2,
                       layer_types=["compressed_sparse_attention", "heavily_compressed_attention"],
                       compress_rates={"compressed_sparse_attention": 3, "heavily_compressed_attention": 4})
    hca = dsv4.DeepseekV4HCACompressor(cfg)
    csa = dsv4.DeepseekV4CSACompressor(cfg)
    captured = {}
    for name, module in (("hca", hca), ("csa", csa)):
        with torch.no_grad():
            module.kv_proj.weight.normal_(0.0, 1.0)
            module.gate_proj.weight.normal_(0.0, 1.0)
            module.position_bias.normal_(0.0, 0.5)
        module.kv_proj.to(torch.bfloat16)
        module.gate_proj.to(torch.bfloat16)
        for part in ("kv_proj", "gate_proj"):
            getattr(module, part).register_forward_hook(
                lambda _m, _i, out, key=f"{name}_{part}": captured.setdefault(key, out))
        module.kv_norm.register_forward_hook(lambda _m, inputs, _o, key=f"{name}_pooled": captured.setdefault(key, inputs[0]))
    x = torch.randn(1, 9, hidden).to(torch.bfloat16)
    with torch.no_grad():
        hca(x[:, :8], None, torch.arange(8)[None], None, 0)
        class NoIndexer(torch.nn.Module):  # the pooling only
            def forward(self, *args, **kwargs):
                return torch.zeros(1, 9, 1, dtype=torch.long)

        csa.indexer = NoIndexer()
        csa(x, None, torch.arange(9)[None], None, 0)
    out = {"head_dim": head_dim, "csa_ratio": 3, "hca_ratio": 4, "pooled_dtype": str(captured["hca_pooled"].dtype)}
    for name, module in (("hca", hca), ("csa", csa)):
        out[f"{name}_kv"] = flat(captured[f"{name}_kv_proj"])
        out[f"{name}_gate"] = flat(captured[f"{name}_gate_proj"])
        out[f"{name}_bias"] = flat(module.position_bias)
        out[f"{name}_pooled"] = flat(captured[f"{name}_pooled"])
    return out


def shared_kv_attention():
    """DeepseekV4Attention, whole, for each layer kind (sliding only; compressed sparse; heavily compressed),
    run as the model runs it: eager attention, the model's sliding-window mask and both RoPE settings, and
    its own cache (DynamicCache of the config: DeepseekV4CSACache / DeepseekV4HCACache): a prefill call
    then two one-token decode calls. Windows are short (sliding 4, ratios 2 and 4) so that the window
    drops keys, decode completes a compressed entry and the indexer keeps 2 of up to 6 entries. The
    hidden state at position 5 is zero: its indexer scores all tie at 0."""
    torch.manual_seed(13)
    hidden, heads, head_dim, prefill, decode = 16, 4, 16, 10, 2
    layer_types = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
    cfg = small_config(hidden_size=hidden, num_attention_heads=heads, head_dim=head_dim, q_lora_rank=8,
                       partial_rotary_factor=0.25, o_groups=2, o_lora_rank=6, sliding_window=4,
                       index_n_heads=2, index_head_dim=8, index_topk=2, num_hidden_layers=3,
                       layer_types=layer_types, max_position_embeddings=64,
                       compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4},
                       rope_parameters={"main": {"rope_type": "default", "rope_theta": 10000.0},
                                        "compress": {"rope_type": "yarn", "rope_theta": 160000.0,
                                                     "factor": 4.0, "original_max_position_embeddings": 16,
                                                     "beta_fast": 32.0, "beta_slow": 1.0,
                                                     "attention_factor": 1.0}})
    cfg._attn_implementation = "eager"
    rotary = dsv4.DeepseekV4RotaryEmbedding(cfg)
    x = torch.randn(1, prefill + decode, hidden)
    x[0, 5] = 0.0
    out = {"hidden": hidden, "heads": heads, "head_dim": head_dim, "rope_dim": int(head_dim * 0.25),
           "q_lora_rank": cfg.q_lora_rank, "o_groups": cfg.o_groups, "o_lora_rank": cfg.o_lora_rank,
           "sliding_window": cfg.sliding_window, "index_n_heads": cfg.index_n_heads,
           "index_head_dim": cfg.index_head_dim, "index_topk": cfg.index_topk, "rms_norm_eps": cfg.rms_norm_eps,
           "rope_theta": 10000.0, "compress_rope": cfg.rope_parameters["compress"],
           "calls": [prefill] + [1] * decode, "x": flat(x), "layers": [], "config": cfg.to_dict()}
    # One cache for the three layers, called in turn as the model calls them: the model builds one
    # sliding-window mask per call from its first (sliding) layer's cache and every layer uses it.
    cache = transformers.DynamicCache(config=cfg)
    layers = []
    for idx, kind in enumerate(layer_types):
        attn = dsv4.DeepseekV4Attention(cfg, idx)
        params = {}
        with torch.no_grad():
            for name, p in attn.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif name.endswith("sinks"):
                    p.normal_(0.0, 1.0)
                elif name.endswith("position_bias"):
                    p.normal_(0.0, 0.5)
                else:
                    p.normal_(0.0, p.shape[-1] ** -0.5)
                params[name] = flat(p)
        layer = {"kind": kind, "params": params, "outputs": []}
        if kind == "compressed_sparse_attention":  # the indexer's scores of every call [rows, entries so far]
            layer["index_scores"], layer["index_entries"] = [], []
            def keep_scores(_module, _inputs, scores, layer=layer):
                layer["index_scores"].append(flat(scores))
                layer["index_entries"].append(int(scores.shape[-1]))

            attn.compressor.indexer.scorer.register_forward_hook(keep_scores)
        layers.append((attn, layer))
    start = 0
    for n in out["calls"]:
        positions = torch.arange(start, start + n)[None]
        embeds = x[:, start:start + n]
        mask = transformers.masking_utils.create_sliding_window_causal_mask(
            config=cfg, inputs_embeds=embeds, attention_mask=None, cache=cache, position_ids=positions)
        pe = {t: rotary(embeds, position_ids=positions, layer_type=t) for t in ("main", "compress")}
        for attn, layer in layers:
            with torch.no_grad():
                y, _ = attn(embeds, pe, positions, mask, cache=cache)
            layer["outputs"].append(flat(y))
        start += n
    out["layers"] = [layer for _, layer in layers]
    return out


FIXTURES = {
    "hyper_connections": hyper_connections,
    "router_sqrtsoftplus": router_sqrtsoftplus,
    "swiglu_plain_clamp": swiglu_plain_clamp,
    "grouped_linear": grouped_linear,
    "compressed_attention": compressed_attention,
    "rope_trailing": rope_trailing,
    "compressed_attention_bf16": compressed_attention_bf16,
    "shared_kv_attention": shared_kv_attention,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/data/ops"))
    parser.add_argument("names", nargs="*", default=[])
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.names or list(FIXTURES):
        if name not in FIXTURES:
            parser.error(f"unknown fixture {name}; known: {', '.join(FIXTURES)}")
        data = {"made_by": f"tools/reference/make_op_fixtures.py {name}",
                "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
        data.update(FIXTURES[name]())
        path = os.path.join(args.out, f"{name}.json")
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
