#!/usr/bin/env python3
"""A day0-reference/1 dump from a vendor's own modeling code, not from transformers.

On release day the vendor's repository often has the only code that runs a new model (DeepSeek-V4's
reached transformers a week after the weights). This script loads such a file as plain Python (no
transformers auto classes), builds the named class from the checkpoint's config.json, loads the
checkpoint's safetensors into it by name, strictly, and writes the same file dump_reference.py writes,
with the vendor code recorded in its metadata.

  python tools/reference/dump_vendor_reference.py MODEL_DIR --vendor-code repo/model.py \\
      --vendor-class Transformer --out ref.safetensors --random-lengths 12 20

The modeling file is imported from its path with its folder acting as its package (relative imports such
as `from .configuration import Config` resolve to sibling files) and on sys.path (vendor repositories also
import siblings by plain name, `from kernel import act_quant`). The loading is strict: every tensor the
model holds (parameters and persistent buffers) must come from the checkpoint with the model's shape, and
every checkpoint tensor must be used; otherwise the script stops naming each tensor at fault. Tensors the
model ties to another (an output head tied to the embedding) count as loaded when one of the group is.
Everything that could make the dump differ from the vendor's own run is a flag and goes into the metadata:
--weight-names (the vendor's name conversion when its checkpoint names differ from its module names),
--ignore-tensors (checkpoint tensors deliberately left out, e.g. an MTP layer the class does not build).
"""
import argparse
import hashlib
import importlib.util
import json
import os
import re
import sys
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_writer import (DTYPES, add_prompt_arguments, parse_prompts, reference_tensors,  # noqa: E402
                              write_reference)

PRODUCER = "day0 tools/reference/dump_vendor_reference.py"
# Hugging Face bookkeeping keys of config.json that describe the file, not the model: a vendor's config
# class (a plain dataclass) would refuse them as unknown arguments.
CONFIG_BOOKKEEPING = ("model_type", "auto_map", "architectures", "transformers_version")
LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layers", "num_layers")


def fail(message):
    raise SystemExit(f"error: {message}")


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_vendor_module(path):
    """Imports the file at `path` as a module of a package made of its folder. Returns (module, package)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        fail(f"--vendor-code {path}: no such file")
    folder = os.path.dirname(path)
    # The package name is derived from the folder so that two vendor folders never share modules.
    package = "day0_vendor_" + hashlib.sha256(folder.encode()).hexdigest()[:12]
    if package not in sys.modules:
        pkg = types.ModuleType(package)
        pkg.__path__ = [folder]
        pkg.__package__ = package
        sys.modules[package] = pkg
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"{package}.{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, package


def vendor_files(folder, package):
    """sha256 of every file imported from the vendor folder (the modeling file and what it pulled in)."""
    files = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not (module.__name__.startswith(package + ".") or
                            os.path.abspath(file).startswith(folder + os.sep)):
            continue
        files[os.path.relpath(os.path.abspath(file), folder)] = sha256_of(file)
    return dict(sorted(files.items()))


def find_in(module, package, name, what):
    """A class by name: in the vendor module's namespace (its own and what it imported), else in a sibling
    module of its folder that it imported."""
    if hasattr(module, name):
        return getattr(module, name)
    for other_name, other in list(sys.modules.items()):
        if other_name.startswith(package + ".") and hasattr(other, name):
            return getattr(other, name)
    fail(f"{what} {name!r} is not defined in {module.__file__} nor in the sibling modules it imports")


def build_config(model_class, module, package, config_class_name, raw):
    config_class = (find_in(module, package, config_class_name, "--vendor-config-class") if config_class_name
                    else getattr(model_class, "config_class", None))
    if config_class is None:
        fail(f"{model_class.__name__} names no config class (no `config_class` attribute): "
             "give --vendor-config-class")
    fields = {k: v for k, v in raw.items() if k not in CONFIG_BOOKKEEPING}
    try:
        return config_class(**fields), config_class
    except (TypeError, ValueError) as e:
        fail(f"{config_class.__name__}(**config.json) failed: {e} (give a config JSON the class accepts with --config)")


def checkpoint_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, s) for s in shards]
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return [single]
    fail(f"{model_dir}: neither model.safetensors.index.json nor model.safetensors")


def read_checkpoint(model_dir):
    tensors = {}
    for path in checkpoint_files(model_dir):
        for name, tensor in load_file(path).items():
            if name in tensors:
                fail(f"{name} is stored twice (again in {os.path.basename(path)})")
            tensors[name] = tensor
    return tensors


def alias_groups(model):
    """State-dict names that share one tensor (tied weights), each name -> every name of its group."""
    by_tensor = {}
    for name, tensor in list(model.named_parameters(remove_duplicate=False)) + \
            list(model.named_buffers(remove_duplicate=False)):
        by_tensor.setdefault(id(tensor), []).append(name)
    return {name: names for names in by_tensor.values() for name in names}


def checked_state(model, tensors):
    """The model's full state dict filled from `tensors`; stops naming every missing, unexpected, mis-shaped
    or mis-typed tensor."""
    expected = model.state_dict()
    aliases = alias_groups(model)
    state, missing, wrong = {}, [], []
    for name, current in expected.items():
        source = next((alias for alias in aliases.get(name, [name]) if alias in tensors), None)
        if source is None:
            missing.append(name)
            continue
        value = tensors[source]
        if tuple(value.shape) != tuple(current.shape):
            wrong.append(f"{source}: checkpoint shape {list(value.shape)}, model {name} {list(current.shape)}")
        elif value.is_floating_point() != current.is_floating_point():
            wrong.append(f"{source}: checkpoint dtype {value.dtype}, model {name} {current.dtype}")
        state[name] = value
    unexpected = sorted(set(tensors) - {alias for name in expected for alias in aliases.get(name, [name])})
    problems = []
    for label, names in (("missing from the checkpoint", missing), ("not in the model", unexpected),
                         ("wrong shape or dtype", wrong)):
        if names:
            problems.append(f"{len(names)} {label}: " + ", ".join(names[:20]) + (" ..." if len(names) > 20 else ""))
    if problems:
        fail("the checkpoint does not fit the vendor model (strict loading):\n  " + "\n  ".join(problems))
    return state


def module_at(model, dotted):
    target = model
    for part in dotted.split("."):
        if not hasattr(target, part):
            fail(f"{type(model).__name__} has no {dotted!r} (no attribute {part!r})")
        target = getattr(target, part)
    return target


def find_decoder_layers(model, raw, dotted):
    """The module list whose outputs are the per-layer hidden states: `dotted` when given, else the one
    outermost nn.ModuleList as long as the config's layer count (any ModuleList named `layers` when the
    config has no count)."""
    if dotted:
        layers = module_at(model, dotted)
        if not isinstance(layers, torch.nn.ModuleList):
            fail(f"--layers {dotted} is a {type(layers).__name__}, not a torch.nn.ModuleList")
        return dotted, layers
    count = next((raw[k] for k in LAYER_COUNT_KEYS if isinstance(raw.get(k), int)), None)
    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList)]
    fitting = [(name, m) for name, m in lists
               if (len(m) == count if count is not None else name.rsplit(".", 1)[-1] == "layers")]
    outermost = [(name, m) for name, m in fitting
                 if not any(name.startswith(other + ".") for other, _ in fitting if other != name)]
    if len(outermost) != 1:
        seen = ", ".join(f"{name} ({len(m)})" for name, m in lists) or "none"
        fail(f"cannot tell the decoder layers apart ({len(outermost)} candidates for {count} layers; module lists: "
             f"{seen}): give --layers")
    return outermost[0]


def find_final_norm(model, layers_path, dotted):
    """The final norm: `dotted` when given ('none': no final_norm tensors), else a module named `norm` beside
    the decoder layers, when there is one."""
    if dotted == "none":
        return None, None
    if dotted:
        return dotted, module_at(model, dotted)
    parent_path = layers_path.rpartition(".")[0]
    norm = getattr(module_at(model, parent_path) if parent_path else model, "norm", None)
    if not isinstance(norm, torch.nn.Module):
        return None, None
    return (f"{parent_path}.norm" if parent_path else "norm"), norm


def logits_function(model, forward_kwargs):
    """The vendor forward as the writer calls it: input ids [1, T] -> logits [1, T, vocab]."""

    def logits_of(input_ids):
        out = model(input_ids, **forward_kwargs)
        logits = getattr(out, "logits", None)
        if logits is None:
            logits = out[0] if isinstance(out, (tuple, list)) else out
        if not torch.is_tensor(logits) or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(input_ids.shape):
            shape = list(logits.shape) if torch.is_tensor(logits) else type(logits).__name__
            fail(f"the vendor forward returned logits {shape} for input ids {list(input_ids.shape)}: "
                 "expected [1, T, vocab], every position (a forward that returns the last position only "
                 "cannot be dumped)")
        return logits

    return logits_of


def versions(model_class):
    parts = [f"torch {torch.__version__}"]
    # A vendor class built on transformers' base classes depends on its version too.
    if any(base.__module__.split(".")[0] == "transformers" for base in model_class.__mro__):
        parts.insert(0, f"transformers {sys.modules['transformers'].__version__}")
    return "; ".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder: config.json + model.safetensors (or sharded, with the index)")
    parser.add_argument("--vendor-code", required=True, help="the vendor's modeling file (a .py)")
    parser.add_argument("--vendor-class", required=True,
                        help="the causal-LM class in it (its forward returns the logits of every position)")
    parser.add_argument("--vendor-config-class",
                        help="its config class (default: the model class's `config_class`); built from config.json")
    parser.add_argument("--config", help="config JSON for the config class (default: MODEL/config.json)")
    parser.add_argument("--layers", help="attribute path of the decoder layers' ModuleList, e.g. model.layers "
                                         "(default: found when unambiguous)")
    parser.add_argument("--final-norm", help="attribute path of the final norm, or 'none' (default: `norm` beside "
                                             "the layers, when present)")
    parser.add_argument("--weight-names", help="a .py defining convert(tensors: dict) -> dict, the vendor's "
                                               "checkpoint-to-module name conversion")
    parser.add_argument("--ignore-tensors", help="regex of checkpoint tensor names deliberately not loaded")
    parser.add_argument("--forward-kwargs", default="{}", help="JSON object of keyword arguments for the forward, "
                                                               "e.g. '{\"use_cache\": false}'")
    add_prompt_arguments(parser)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("DAY0_REF_THREADS", "2")))
    try:
        forward_kwargs = json.loads(args.forward_kwargs)
    except json.JSONDecodeError as e:
        fail(f"--forward-kwargs: expected a JSON object, found {args.forward_kwargs!r} ({e})")
    if not isinstance(forward_kwargs, dict):
        fail(f"--forward-kwargs: expected a JSON object, found {args.forward_kwargs!r}")

    config_path = args.config or os.path.join(args.model, "config.json")
    with open(config_path) as f:
        raw = json.load(f)
    module, package = load_vendor_module(args.vendor_code)
    vendor_path = os.path.abspath(args.vendor_code)
    model_class = find_in(module, package, args.vendor_class, "--vendor-class")
    config, config_class = build_config(model_class, module, package, args.vendor_config_class, raw)
    model = model_class(config)
    model.to(DTYPES[args.dtype]).eval()

    tensors = read_checkpoint(args.model)
    converter = None
    if args.weight_names:
        converter, _ = load_vendor_module(args.weight_names)
        if not callable(getattr(converter, "convert", None)):
            fail(f"--weight-names {args.weight_names}: defines no convert(tensors) function")
        tensors = converter.convert(tensors)
    ignored = []
    if args.ignore_tensors:
        pattern = re.compile(args.ignore_tensors)
        ignored = sorted(name for name in tensors if pattern.search(name))
        tensors = {k: v for k, v in tensors.items() if k not in set(ignored)}
    model.load_state_dict(checked_state(model, tensors), strict=True)

    layers_path, layers = find_decoder_layers(model, raw, args.layers)
    norm_path, final_norm = find_final_norm(model, layers_path, args.final_norm)
    vocab = raw.get("vocab_size") or (raw.get("text_config") or {}).get("vocab_size")
    if not isinstance(vocab, int):
        fail(f"{config_path}: no vocab_size")
    prompts = parse_prompts(args, vocab)
    dumped = reference_tensors(logits_function(model, forward_kwargs), layers, final_norm, prompts, args.greedy,
                               args.no_hidden)
    metadata = {
        "producer": PRODUCER,
        "version": versions(model_class),
        "dtype": args.dtype,
        "model_type": raw.get("model_type") or model_class.__name__,
        "prompts": len(prompts),
        "source": "vendor-code",
        "vendor_code": vendor_path,
        "vendor_code_sha256": sha256_of(vendor_path),
        "vendor_class": model_class.__name__,
        "vendor_config_class": config_class.__name__,
        "vendor_files": json.dumps(vendor_files(os.path.dirname(vendor_path), package)),
        "decoder_layers": layers_path,
        "final_norm": norm_path or "none",
        "forward_kwargs": json.dumps(forward_kwargs),
    }
    if converter is not None:
        metadata["weight_names"] = os.path.abspath(args.weight_names)
        metadata["weight_names_sha256"] = sha256_of(args.weight_names)
    if ignored:
        metadata["ignored_tensors"] = f"{args.ignore_tensors} ({len(ignored)} tensors)"
    write_reference(args.out, dumped, metadata)
    print(f"wrote {args.out}: {len(prompts)} prompts, dtype {args.dtype}, {model_class.__name__} from {vendor_path}, "
          f"layers {layers_path} ({len(layers)}), {versions(model_class)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
