"""Tests of tools/reference/dump_vendor_reference.py (a day0-reference/1 dump from a vendor's modeling file).

Run by vendor_reference_test.sh with a Python that has torch and safetensors; the DeepSeek-V4 case also
needs transformers >= 5.8 (DeepseekV4ForCausalLM) and is skipped, saying so, without it.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch
from safetensors import safe_open
from safetensors.torch import save_file

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(REPO, "tools", "reference")
TOY_FOLDER = os.path.join(REPO, "tests", "data", "vendor_model")
TOY_FILE = os.path.join(TOY_FOLDER, "toy_model.py")
sys.path.insert(0, TOOLS)
import dump_vendor_reference  # noqa: E402
from dump_vendor_reference import load_vendor_module  # noqa: E402

PROMPTS = [[1, 2, 3, 4, 5], [7, 0, 31]]
GREEDY = 2


def toy_module():
    module, _ = load_vendor_module(TOY_FILE)
    return module


class ToyVendorModel(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="day0-vendor-test-")

    def tearDown(self):
        shutil.rmtree(self.folder, ignore_errors=True)

    def make_checkpoint(self, tie=False, edit=None):
        """A ToyLM with seeded random weights, saved by name with its config.json; returns the model."""
        toy = toy_module()
        config = {"model_type": "toy", "vocab_size": 32, "dim": 8, "n_layers": 2, "tie_embeddings": tie}
        torch.manual_seed(1)
        model = toy.ToyLM(toy.ToyConfig(**{k: v for k, v in config.items() if k != "model_type"})).eval()
        with torch.no_grad():
            for block in model.blocks:  # norm gains away from 1, where a skipped gain would go unseen
                block.norm.weight.uniform_(0.5, 1.5)
        state = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
        if tie:
            del state["head.weight"]  # stored once, as a release with tied embeddings stores it
        if edit:
            edit(state)
        save_file(state, os.path.join(self.folder, "model.safetensors"))
        with open(os.path.join(self.folder, "config.json"), "w") as f:
            json.dump(config, f)
        return model

    def dump(self, *extra, vendor_class="ToyLM"):
        """Runs the tool in this process (torch is imported once for all cases); returns (error or None,
        output path)."""
        out = os.path.join(self.folder, "ref.safetensors")
        prompts = ";".join(",".join(str(t) for t in p) for p in PROMPTS)
        argv = [self.folder, "--vendor-code", TOY_FILE, "--vendor-class", vendor_class, "--out", out, "--prompts",
                prompts, "--greedy", str(GREEDY), *extra]
        try:
            self.assertEqual(dump_vendor_reference.main(argv), 0)
        except SystemExit as stop:
            return str(stop.code), out
        return None, out

    def assert_refused(self, error, *fragments):
        self.assertIsNotNone(error, "the dump was written")
        for fragment in fragments:
            self.assertIn(fragment, error)

    @torch.no_grad()
    def assert_dump_is_the_model(self, model, path):
        """Every tensor of the dump equals what the model computes here, layer by layer."""
        with safe_open(path, "pt") as f:
            for i, ids in enumerate(PROMPTS):
                tokens = torch.tensor([ids])
                self.assertEqual(f.get_tensor(f"prompt.{i}.input_ids").tolist(), ids)
                x = model.embed(tokens)  # [1, T, dim]
                for layer, block in enumerate(model.blocks):
                    x = block(x)
                    torch.testing.assert_close(f.get_tensor(f"prompt.{i}.hidden.{layer}"), x[0], rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(f.get_tensor(f"prompt.{i}.final_norm"), model.norm(x)[0], rtol=1e-6,
                                           atol=1e-6)
                torch.testing.assert_close(f.get_tensor(f"prompt.{i}.logits"), model(tokens)[0], rtol=1e-6, atol=1e-6)
                continuation = list(ids)
                for _ in range(GREEDY):
                    continuation.append(int(model(torch.tensor([continuation]))[0, -1].argmax()))
                self.assertEqual(f.get_tensor(f"prompt.{i}.greedy_ids").tolist(), continuation[len(ids):])

    def test_dump_holds_the_vendor_forward_and_names_its_source(self):
        model = self.make_checkpoint()
        result, out = self.dump()
        self.assertIsNone(result)
        self.assert_dump_is_the_model(model, out)
        with safe_open(out, "pt") as f:
            meta = f.metadata()
        with open(TOY_FILE, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(meta["format"], "day0-reference/1")
        self.assertEqual(meta["source"], "vendor-code")
        self.assertEqual(meta["vendor_code"], TOY_FILE)
        self.assertEqual(meta["vendor_code_sha256"], digest)
        self.assertEqual(meta["vendor_class"], "ToyLM")
        self.assertEqual(meta["vendor_config_class"], "ToyConfig")
        self.assertEqual(meta["version"], f"torch {torch.__version__}")  # the toy builds on torch alone
        self.assertEqual(meta["decoder_layers"], "blocks")
        self.assertEqual(meta["final_norm"], "norm")
        # The sibling imported relatively was resolved from the vendor's folder, and is recorded.
        self.assertEqual(sorted(json.loads(meta["vendor_files"])), ["toy_config.py", "toy_model.py"])

    def test_tied_head_loads_from_the_embedding(self):
        model = self.make_checkpoint(tie=True)
        result, out = self.dump()
        self.assertIsNone(result)
        self.assert_dump_is_the_model(model, out)

    def test_missing_tensor_is_named(self):
        self.make_checkpoint(edit=lambda s: s.pop("blocks.1.mix.weight"))
        result, _ = self.dump()
        self.assert_refused(result, "1 missing from the checkpoint: blocks.1.mix.weight")

    def test_unexpected_tensor_is_named(self):
        self.make_checkpoint(edit=lambda s: s.update({"blocks.2.mix.weight": torch.zeros(8, 8)}))
        result, _ = self.dump()
        self.assert_refused(result, "1 not in the model: blocks.2.mix.weight")

    def test_wrong_shape_is_named(self):
        self.make_checkpoint(edit=lambda s: s.update({"norm.weight": torch.ones(9)}))
        result, _ = self.dump()
        self.assert_refused(result, "norm.weight: checkpoint shape [9], model norm.weight [8]")

    def test_integer_tensor_for_a_float_one_is_refused(self):
        self.make_checkpoint(edit=lambda s: s.update({"norm.weight": torch.ones(8, dtype=torch.int64)}))
        result, _ = self.dump()
        self.assert_refused(result, "norm.weight: checkpoint dtype torch.int64")

    def test_ignored_tensors_are_left_out_and_recorded(self):
        self.make_checkpoint(edit=lambda s: s.update({"mtp.0.proj.weight": torch.zeros(8, 8)}))
        refused, _ = self.dump()
        self.assert_refused(refused, "mtp.0.proj.weight")
        result, out = self.dump("--ignore-tensors", r"^mtp\.")
        self.assertIsNone(result)
        with safe_open(out, "pt") as f:
            self.assertEqual(f.metadata()["ignored_tensors"], r"^mtp\. (1 tensors)")

    def test_layers_not_found_without_a_layer_count_ask_for_the_flag(self):
        model = self.make_checkpoint()
        with open(os.path.join(self.folder, "config.json")) as f:
            config = json.load(f)
        del config["n_layers"]  # the dataclass default (2) builds the same model; nothing says which list
        with open(os.path.join(self.folder, "config.json"), "w") as f:
            json.dump(config, f)
        result, _ = self.dump()
        self.assert_refused(result, "cannot tell the decoder layers apart", "blocks (2)", "give --layers")
        result, out = self.dump("--layers", "blocks")
        self.assertIsNone(result)
        self.assert_dump_is_the_model(model, out)

    def test_layers_flag_must_name_a_module_list(self):
        self.make_checkpoint()
        result, _ = self.dump("--layers", "norm")
        self.assert_refused(result, "--layers norm is a RMSNorm, not a torch.nn.ModuleList")

    def test_unknown_class_is_named(self):
        self.make_checkpoint()
        result, _ = self.dump(vendor_class="NoSuchLM")
        self.assert_refused(result, "--vendor-class 'NoSuchLM' is not defined")

    def test_forward_kwargs_must_be_an_object(self):
        self.make_checkpoint()
        result, _ = self.dump("--forward-kwargs", "[1]")
        self.assert_refused(result, "--forward-kwargs: expected a JSON object, found '[1]'")


def has_deepseek_v4():
    try:
        import transformers
    except ImportError:
        return False
    return hasattr(transformers, "DeepseekV4ForCausalLM")


@unittest.skipUnless(has_deepseek_v4(), "transformers with DeepseekV4ForCausalLM (>= 5.8) is not installed")
class DeepseekV4VendorCode(unittest.TestCase):
    def test_vendor_copy_and_transformers_dump_agree(self):
        result = subprocess.run([sys.executable, os.path.join(TOOLS, "vendor_code_deepseek_v4.py")],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        report = json.loads(result.stdout)
        self.assertTrue(report["agree"])
        self.assertTrue(report["ids_equal"])
        for kind in ("logits", "hidden", "final_norm", "greedy_logits"):
            self.assertIn(kind, report["max_abs_diff"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
