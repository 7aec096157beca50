"""The day0-reference/1 writer shared by every producer in tools/reference.

Needs torch and safetensors only, not transformers: a vendor's own modeling code is dumped with the same
writer (dump_vendor_reference.py) on a machine where transformers does not know the model yet.

A producer hands over a `logits_of(input_ids [1, T] I64) -> [1, T, vocab]` callable, the decoder layers
(whose forward outputs are the per-layer hidden states) and, when the model has one, its final norm;
this module runs the prompts, records what the hooks see and writes the file. The format itself is
described in README.md and src/day0/align/reference_dump.h.
"""
import json
import random

import torch
from safetensors.torch import save_file

FORMAT = "day0-reference/1"
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def add_prompt_arguments(parser):
    """The flags every dump shares: output, prompts, precision, greedy continuation, hidden states."""
    parser.add_argument("--out", required=True, help="output .safetensors file")
    parser.add_argument("--prompts", help="token ids, prompts separated by ';' e.g. '1,2,3;4,5'")
    parser.add_argument("--prompts-file", help="JSON list of lists of token ids")
    parser.add_argument("--random-lengths", type=int, nargs="*", default=[], help="add random prompts of these lengths")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="compute dtype (default f32)")
    parser.add_argument("--greedy", type=int, default=8, help="greedy continuation length per prompt (0: none)")
    parser.add_argument("--no-hidden", action="store_true", help="logits only, no per-layer hidden states")


def parse_prompts(args, vocab):
    prompts = []
    if args.prompts:
        for chunk in args.prompts.split(";"):
            ids = [int(t) for t in chunk.split(",") if t.strip()]
            if ids:
                prompts.append(ids)
    if args.prompts_file:
        with open(args.prompts_file) as f:
            prompts.extend(json.load(f))
    rng = random.Random(args.seed)
    for length in args.random_lengths:
        prompts.append([rng.randrange(vocab) for _ in range(length)])
    if not prompts:
        raise SystemExit("error: no prompts (use --prompts, --prompts-file or --random-lengths)")
    for p in prompts:
        bad = [t for t in p if t < 0 or t >= vocab]
        if bad:
            raise SystemExit(f"error: token ids {bad[:5]} outside the vocabulary [0, {vocab})")
    return prompts


@torch.no_grad()
def capture_forward(logits_of, ids, layers, final_norm=None):
    """One forward pass of `ids`; returns {"logits": [T, vocab], "hidden.<l>": output of layers[l] without
    its batch axis ([T, n * hidden] for n hyper-connected streams), "final_norm": output of final_norm}, all
    float32."""
    captured = {}

    def keep(name):
        def hook(_module, _inputs, output):
            tensor = output[0] if isinstance(output, (tuple, list)) else output
            # A hyper-connection layer outputs its streams [T, n, hidden]: dumped side by side [T, n * hidden].
            captured[name] = tensor[0].detach().to(torch.float32).flatten(1).clone()

        return hook

    handles = [layer.register_forward_hook(keep(f"hidden.{i}")) for i, layer in enumerate(layers)]
    if final_norm is not None:
        handles.append(final_norm.register_forward_hook(keep("final_norm")))
    try:
        logits = logits_of(torch.tensor([ids], dtype=torch.long))
    finally:
        for h in handles:
            h.remove()
    captured["logits"] = logits[0].detach().to(torch.float32).clone()
    return captured


@torch.no_grad()
def greedy_continuation(logits_of, ids, steps):
    """Greedy tokens after the prompt, each from a full forward pass (no cache: the plainest path)."""
    tokens, rows = list(ids), []
    for _ in range(steps):
        logits = logits_of(torch.tensor([tokens], dtype=torch.long))[0, -1]
        logits = logits.detach().to(torch.float32).clone()
        rows.append(logits)
        tokens.append(int(torch.argmax(logits)))
    return tokens[len(ids):], rows


def reference_tensors(logits_of, layers, final_norm, prompts, greedy, no_hidden):
    """Every prompt's tensors under their day0-reference/1 names."""
    tensors = {}
    for i, ids in enumerate(prompts):
        captured = capture_forward(logits_of, ids, layers, final_norm)
        tensors[f"prompt.{i}.input_ids"] = torch.tensor(ids, dtype=torch.int64)
        for name, value in captured.items():
            if name.startswith("hidden.") and no_hidden:
                continue
            tensors[f"prompt.{i}.{name}"] = value.contiguous()
        if greedy > 0:
            greedy_ids, rows = greedy_continuation(logits_of, ids, greedy)
            tensors[f"prompt.{i}.greedy_ids"] = torch.tensor(greedy_ids, dtype=torch.int64)
            tensors[f"prompt.{i}.greedy_logits"] = torch.stack(rows).contiguous()
    return tensors


def write_reference(path, tensors, metadata):
    """Writes the file; `metadata` (producer, version, dtype, ...: strings) gains the format key."""
    save_file(tensors, path, metadata={"format": FORMAT, **{k: str(v) for k, v in metadata.items()}})
