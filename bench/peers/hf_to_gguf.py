#!/usr/bin/env python3
"""Writes a GGUF file with the same tensors as a Day0-synthesised bench folder, so that llama.cpp and
Day0 run the very same weights in the side-by-side benchmark (bench/peers/llama_cpp.sh).

Usage: hf_to_gguf.py MODEL_DIR OUT.gguf   (needs numpy and llama.cpp's gguf-py on PYTHONPATH)

Only what the two bench shapes need: `llama` (dense, SwiGLU) and `qwen3_moe` (q/k RMSNorm, routed
experts, no shared expert), BF16 or F32 safetensors. Tensors are memory-mapped; the routed experts of
one layer are stacked into llama.cpp's [expert, rows, cols] tensors (that copy is the only one made).
The tokenizer is a placeholder of vocab_size tokens: speed, not text, is measured. For the same
reason a llama3 `rope_scaling` is not carried over (llama.cpp would need its rope_freqs tensor): the
frequencies differ, the work per token does not.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf


def open_safetensors(folder):
    """name -> (numpy uint16/float32 memmap view, dtype string) for every shard of the folder."""
    tensors = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with open(shard, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        data = np.memmap(shard, dtype=np.uint8, mode="r", offset=8 + header_len)
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            dtype = entry["dtype"]
            if dtype == "BF16":
                view = data[begin:end].view(np.uint16)
            elif dtype == "F32":
                view = data[begin:end].view(np.float32)
            else:
                sys.exit(f"{shard}: {name}: dtype {dtype} is not handled (BF16 or F32 only)")
            tensors[name] = (view.reshape(entry["shape"]), dtype)
    if not tensors:
        sys.exit(f"{folder}: no .safetensors files")
    return tensors


def rotary_rows_to_ggml(w, n_heads):
    """HF keeps each head's rotary rows as [first halves | second halves]; llama.cpp's llama graph
    expects them interleaved in pairs. Row r = h*d + i*(d/2) + j moves to h*d + j*2 + i."""
    rows = w.shape[0]
    d = rows // n_heads
    return np.ascontiguousarray(w.reshape(n_heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = json.loads((folder / "config.json").read_text())
    model_type = config["model_type"]
    arch = {"llama": "llama", "qwen3_moe": "qwen3moe"}.get(model_type)
    if arch is None:
        sys.exit(f"{folder}/config.json: model_type {model_type!r}: only llama and qwen3_moe are handled")
    tensors = open_safetensors(folder)
    n_layers = config["num_hidden_layers"]
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_heads)
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // n_heads
    vocab = config["vocab_size"]

    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(folder.name)
    w.add_context_length(config.get("max_position_embeddings", 4096))
    w.add_embedding_length(hidden)
    w.add_block_count(n_layers)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    w.add_vocab_size(vocab)
    if arch == "llama":
        w.add_feed_forward_length(config["intermediate_size"])
    else:
        w.add_feed_forward_length(config.get("intermediate_size", config["moe_intermediate_size"]))
        w.add_expert_count(config["num_experts"])
        w.add_expert_used_count(config["num_experts_per_tok"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"<t{i}>" for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges(["< t"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    ggml_type = {"BF16": gguf.GGMLQuantizationType.BF16, "F32": gguf.GGMLQuantizationType.F32}
    used = set()

    def put(gguf_name, hf_name, transform=None):
        array, dtype = tensors[hf_name]
        used.add(hf_name)
        if transform is not None:
            array = transform(array)
        if array.ndim == 1 and dtype == "BF16":
            # llama.cpp keeps norm weights in F32 (its CPU ops do not add or multiply BF16 vectors).
            array, dtype = (array.astype(np.uint32) << 16).view(np.float32), "F32"
        w.add_tensor(gguf_name, array, raw_dtype=ggml_type[dtype])

    put("token_embd.weight", "model.embed_tokens.weight")
    put("output_norm.weight", "model.norm.weight")
    put("output.weight", "lm_head.weight" if "lm_head.weight" in tensors else "model.embed_tokens.weight")
    for layer in range(n_layers):
        p, b = f"model.layers.{layer}.", f"blk.{layer}."
        put(b + "attn_norm.weight", p + "input_layernorm.weight")
        put(b + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        rotary_q = (lambda a: rotary_rows_to_ggml(a, n_heads)) if arch == "llama" else None
        rotary_k = (lambda a: rotary_rows_to_ggml(a, n_kv)) if arch == "llama" else None
        put(b + "attn_q.weight", p + "self_attn.q_proj.weight", rotary_q)
        put(b + "attn_k.weight", p + "self_attn.k_proj.weight", rotary_k)
        put(b + "attn_v.weight", p + "self_attn.v_proj.weight")
        put(b + "attn_output.weight", p + "self_attn.o_proj.weight")
        if arch == "llama":
            for proj, name in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                put(b + name + ".weight", p + "mlp." + proj + ".weight")
            continue
        put(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight")
        put(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight")
        put(b + "ffn_gate_inp.weight", p + "mlp.gate.weight")
        for proj, name in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
            names = [f"{p}mlp.experts.{e}.{proj}.weight" for e in range(config["num_experts"])]
            used.update(names)
            stacked = np.stack([tensors[n][0] for n in names])  # [experts, rows, cols]
            w.add_tensor(b + name + ".weight", stacked, raw_dtype=ggml_type[tensors[names[0]][1]])
    unused = sorted(set(tensors) - used)
    if unused:
        sys.exit(f"{folder}: tensors not mapped to GGUF names: {unused[:5]} ...")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"wrote {out} ({arch}, {len(used)} source tensors)")


if __name__ == "__main__":
    main()
