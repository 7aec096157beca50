#pragma once
// The committed golden miniatures (tests/golden/<name>/: config.json, model.safetensors made by
// `day0 synth`, reference.safetensors made by tools/reference/dump_reference.py) and helpers to run
// the engine on them.
#include <memory>
#include <string>
#include <vector>

#include "day0/align/reference_dump.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_loader.h"

namespace day0::testing {

// Names of the golden folders that hold a model and a reference dump, sorted: those the engine runs.
std::vector<std::string> golden_names();
// Those whose config names mechanisms no engine block runs yet (unimplemented_mechanisms): transformers'
// reference is committed, the engine refuses them.
std::vector<std::string> pending_golden_names();
std::string golden_dir(const std::string& name);

struct GoldenRun {
  LoadedModel model;
  ReferenceDump reference;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
};

// Loads golden `name` and an engine over it (throws via ASSERT-friendly Result on failure).
Result<GoldenRun> open_golden(const std::string& name, const std::string& backend = "cpu",
                              EngineOptions options = {});

}  // namespace day0::testing
