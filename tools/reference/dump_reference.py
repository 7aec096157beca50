#!/usr/bin/env python3
"""Reference dumps from Hugging Face transformers for `day0 align`.

Three modes:
  dump        load a model folder (float32 by default, eager attention, CPU, offline) and write the
              logits and per-layer hidden states of some prompts in the day0-reference/1 format;
  check-load  load a model folder exactly as a user would (from_pretrained, nothing patched) and fail
              unless every tensor was consumed, none was missing and a forward pass gives finite logits;
  spot        the greedy continuations of the generation spot-check prompts (src/day0/report/
              spot_prompts.json: each rendered with the folder's chat template through transformers'
              tokenizer) in the day0-spot-reference/1 JSON format that `day0 adapt --spot-reference` reads.

The dump format (a contract shared with the C++ side, src/day0/align/reference_dump.h): one
safetensors file whose __metadata__ holds format=day0-reference/1, producer, version and dtype, and for
prompt i: prompt.<i>.input_ids I64 [T], prompt.<i>.logits F32 [T, vocab], prompt.<i>.hidden.<l>
F32 [T, hidden] (output of decoder layer l), prompt.<i>.final_norm F32 [T, hidden]; and, as day0's
optional extension for the generation check, prompt.<i>.greedy_ids I64 [N] (greedy continuation) and
prompt.<i>.greedy_logits F32 [N, vocab] (the logits each of those tokens was chosen from).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_writer import (DTYPES, add_prompt_arguments, capture_forward, parse_prompts,  # noqa: E402
                              reference_tensors, write_reference)

PRODUCER = "day0 tools/reference/dump_reference.py"


def versions():
    return f"transformers {transformers.__version__}; torch {torch.__version__}"


def architecture_fallback(model_dir):
    """Releases whose model_type transformers does not register (Kimi K2: "kimi_k2", shipped with remote
    code) but whose `architectures` names a class transformers has: load through that class and its
    config class. Image-text wrappers AutoModelForCausalLM does not map (Kimi K2.5) load through their
    own class. Returns (class, config) or (None, None)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    try:
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            return None, None
        for name in raw.get("architectures") or []:
            cls = getattr(transformers, name, None)
            if cls is not None:
                return cls, config
        return None, None
    except (ValueError, KeyError):
        pass
    for name in raw.get("architectures") or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            fields = {k: v for k, v in raw.items() if k not in ("model_type", "auto_map")}
            return cls, cls.config_class(**fields)
    raise SystemExit(f"error: {model_dir}: model_type {raw.get('model_type')!r} is unknown to transformers "
                     f"{transformers.__version__} and no architecture class matches {raw.get('architectures')}")


def load_model(model_dir, dtype):
    cls, config = architecture_fallback(model_dir)
    extra = {} if cls is None else {"config": config}
    cls = cls or AutoModelForCausalLM
    model, info = cls.from_pretrained(
        model_dir,
        **extra,
        dtype=DTYPES[dtype],
        attn_implementation="eager",
        device_map="cpu",
        local_files_only=True,
        output_loading_info=True,
    )
    model.eval()
    # An image-text wrapper saved without its vision tower (`day0 synth` writes the text model only):
    # a text-only prompt never reaches the tower, so its missing weights cannot change the logits.
    # Accepted only when every weight outside the language model is missing and every weight of it
    # loaded; anything else stays an error.
    missing = set(info.get("missing_keys") or ())
    if missing and getattr(model.config, "text_config", None) is not None:
        outside = {n for n, _ in model.named_parameters() if not text_path(n)}
        if outside and missing == outside:
            print(f"note: {model_dir}: no weights outside the language model ({len(outside)} absent): "
                  "a text-only reference", file=sys.stderr)
            info["missing_keys"] = set()
    return model, info


def text_path(name):
    """True for a parameter on the language-model path of an image-text wrapper."""
    return ".language_model." in f".{name}" or name.startswith("lm_head.")


def decoder_layers(model):
    inner = getattr(model, "model", None)
    # An image-text wrapper's decoder is its language model (model.language_model).
    inner = getattr(inner, "language_model", inner)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise SystemExit(f"error: {type(model).__name__} has no model.layers; not a decoder model we know")
    return inner, layers


def logits_of(model):
    """The model's forward as the writer calls it: input ids [1, T] -> logits [1, T, vocab]."""
    return lambda input_ids: model(input_ids=input_ids, use_cache=False).logits


def run_prompt(model, ids):
    inner, layers = decoder_layers(model)
    return capture_forward(logits_of(model), ids, layers, getattr(inner, "norm", None))


def cmd_dump(args):
    model, info = load_model(args.model, args.dtype)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "mismatched_keys")}
    if problems:
        raise SystemExit(f"error: transformers did not load every weight: {problems}")
    vocab = model.config.get_text_config().vocab_size
    prompts = parse_prompts(args, vocab)
    inner, layers = decoder_layers(model)
    tensors = reference_tensors(logits_of(model), layers, getattr(inner, "norm", None), prompts, args.greedy,
                                args.no_hidden)
    metadata = {
        "producer": PRODUCER,
        "version": versions(),
        "dtype": args.dtype,
        "model_type": str(model.config.model_type),
        "prompts": str(len(prompts)),
    }
    write_reference(args.out, tensors, metadata)
    print(f"wrote {args.out}: {len(prompts)} prompts, dtype {args.dtype}, {versions()}")


SPOT_PROMPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "day0", "report",
                            "spot_prompts.json")


@torch.no_grad()
def greedy_until_stop(model, ids, steps, stop_ids):
    """Greedy tokens after the prompt (stop token included when one is chosen), full forward passes."""
    tokens = list(ids)
    for _ in range(steps):
        logits = model(input_ids=torch.tensor([tokens], dtype=torch.long), use_cache=False).logits[0, -1]
        tokens.append(int(torch.argmax(logits.to(torch.float32))))
        if tokens[-1] in stop_ids:
            break
    return tokens[len(ids):]


def cmd_spot(args):
    from transformers import AutoTokenizer, GenerationConfig

    with open(args.prompts) as f:
        prompt_set = json.load(f)
    if prompt_set.get("format") != "day0-spot-prompts/1":
        raise SystemExit(f"error: {args.prompts}: format {prompt_set.get('format')!r}, expected day0-spot-prompts/1")
    model, info = load_model(args.model, args.dtype)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "mismatched_keys")}
    if problems:
        raise SystemExit(f"error: transformers did not load every weight: {problems}")
    tok = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    stop_ids = set()
    for source in (tok.eos_token_id, getattr(GenerationConfig.from_pretrained(args.model), "eos_token_id", None)
                   if os.path.exists(os.path.join(args.model, "generation_config.json")) else None):
        if isinstance(source, int):
            stop_ids.add(source)
        elif isinstance(source, (list, tuple)):
            stop_ids.update(int(x) for x in source)
    entries = []
    for p in prompt_set["prompts"]:
        text = tok.apply_chat_template(p["messages"], tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        greedy = greedy_until_stop(model, ids, p["max_new_tokens"], stop_ids)
        entries.append(dict(p, prompt_ids=ids, greedy_ids=greedy,
                            greedy_text=tok.decode(greedy, skip_special_tokens=True)))
        print(f"{p['id']}: {len(ids)} prompt ids, {len(greedy)} greedy ids", file=sys.stderr)
    doc = {"format": "day0-spot-reference/1", "producer": "transformers", "version": versions(),
           "dtype": args.dtype, "model_type": str(model.config.model_type), "stop_ids": sorted(stop_ids),
           "prompts": entries}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(entries)} prompts, dtype {args.dtype}, {versions()}")
    return 0


def cmd_check_load(args):
    model, info = load_model(args.model, "f32")
    config = model.config
    issues = {k: list(v) for k, v in info.items() if v}
    # DeepSeek / GLM multi-token-prediction layers are stored after the last layer and ignored by HF.
    n_layers = config.get_text_config().num_hidden_layers
    issues.get("unexpected_keys", []).sort()
    if "unexpected_keys" in issues:
        issues["unexpected_keys"] = [k for k in issues["unexpected_keys"] if f"layers.{n_layers}." not in k]
        if not issues["unexpected_keys"]:
            del issues["unexpected_keys"]
    vocab = config.get_text_config().vocab_size
    ids = [1 % vocab, 7 % vocab, 3 % vocab, 11 % vocab]
    logits = run_prompt(model, ids)["logits"]
    finite = bool(torch.isfinite(logits).all())
    verdict = "ok" if not issues and finite else "FAILED"
    report = {
        "model": args.model,
        "class": type(model).__name__,
        "model_type": config.model_type,
        "loaded_via": "AutoModelForCausalLM" if architecture_fallback(args.model)[0] is None else "architectures[0]",
        "loading_issues": issues,
        "finite_logits": finite,
        "versions": versions(),
        "verdict": verdict,
    }
    print(json.dumps(report, indent=2))
    return 0 if verdict == "ok" else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    dump = sub.add_parser("dump", help="write a day0-reference/1 dump")
    dump.add_argument("model", help="model folder (config.json + safetensors)")
    add_prompt_arguments(dump)
    check = sub.add_parser("check-load", help="check transformers loads a folder unmodified")
    check.add_argument("model")
    spot = sub.add_parser("spot", help="write a day0-spot-reference/1 file (greedy spot-check continuations)")
    spot.add_argument("model", help="model folder (config.json + safetensors + tokenizer with a chat template)")
    spot.add_argument("--out", required=True, help="output .json file")
    spot.add_argument("--prompts", default=SPOT_PROMPTS, help="day0-spot-prompts/1 file (default: the adapt set)")
    spot.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="compute dtype (default f32)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("DAY0_REF_THREADS", "2")))
    if args.mode == "dump":
        cmd_dump(args)
        return 0
    if args.mode == "spot":
        return cmd_spot(args)
    return cmd_check_load(args)


if __name__ == "__main__":
    sys.exit(main())
