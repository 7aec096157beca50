// One NaN in one weight of a checkpoint makes the forward pass fail with DataLoss naming where it first
// showed (a decoder layer, or the LM head), on the reference backend and on the cpu backend at every SIMD
// level this CPU has, with float32 and BF16 activations: no kernel may swallow it (a clamp or a max that
// drops NaN turns it into plausible, wrong tokens).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/backends/backend.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/model/catalog.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_loader.h"
#include "day0/synth/synth_checkpoint.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

// Writes BF16 NaN (0x7fc0) over element `element` of tensor `name` in the folder's shards.
void poison(const fs::path& dir, const std::string& name, int64_t element) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_bytes = 0;
    f.read(reinterpret_cast<char*>(&header_bytes), 8);
    std::string header(header_bytes, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_bytes));
    const auto j = nlohmann::json::parse(header);
    if (!j.contains(name)) continue;
    ASSERT_EQ(j[name]["dtype"], "BF16") << name;
    const auto begin = j[name]["data_offsets"][0].get<uint64_t>();
    const uint16_t nan = 0x7fc0;
    f.seekp(static_cast<std::streamoff>(8 + header_bytes + begin + 2 * static_cast<uint64_t>(element)));
    f.write(reinterpret_cast<const char*>(&nan), 2);
    return;
  }
  FAIL() << name << " is in no shard of " << dir;
}

struct Case {
  std::string tensor;
  int64_t element;    // inside a row every token reads (row 0, or the prompt's first token's row)
  std::string where;  // what the error must name
};

// Runs `prompt` through the poisoned model on one backend configuration; the status of the forward.
Status forward_status(const fs::path& dir, const std::string& backend, std::optional<SimdLevel> simd,
                      ActivationPrecision precision) {
  auto model = load_model(dir.string(), load_options_for(precision));
  if (!model.is_ok()) return model.status();
  BackendOptions bo;
  bo.n_threads = 2;
  bo.quiet = true;
  bo.simd = simd;
  auto be = open_backend(backend, bo);
  if (!be.is_ok()) return be.status();
  EngineOptions eo;
  eo.precision = precision;
  auto engine = Engine::create(model->spec, model->weights, **be, eo);
  if (!engine.is_ok()) return engine.status();
  KvCache cache = (*engine)->new_cache();
  const std::vector<int32_t> prompt = {3, 7, 11, 5, 9};
  const SequenceStep step{&cache, prompt};
  auto prefill = (*engine)->forward(std::span(&step, 1), true);
  if (!prefill.is_ok()) return prefill.status();
  const std::vector<int32_t> next = {4};
  const SequenceStep decode{&cache, next};
  auto out = (*engine)->forward(std::span(&decode, 1), true);
  return out.is_ok() ? Status::ok() : out.status();
}

void expect_every_backend_refuses(const std::string& release, const std::vector<Case>& cases) {
  auto full = catalog_model(release);
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  const fs::path root =
      fs::path(::testing::TempDir()) / ("day0_nan_" + release + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor);
    const fs::path dir = root / fs::path(c.tensor).filename();
    SynthOptions so;
    so.n_shards = 1;
    MiniatureOptions dims;
    dims.layers = 2;
    auto mini = synthesize_miniature(*full, dims, so, dir.string());
    ASSERT_TRUE(mini.is_ok()) << mini.status().to_string();
    fs::remove(dir / "SHA256SUMS");
    poison(dir, c.tensor, c.element);
    std::vector<std::pair<std::string, std::optional<SimdLevel>>> backends = {{"reference", std::nullopt}};
    for (SimdLevel level : available_simd_levels()) backends.emplace_back("cpu", level);
    for (const auto& [backend, simd] : backends) {
      for (ActivationPrecision p : {ActivationPrecision::kF32, ActivationPrecision::kBF16}) {
        const std::string label = backend + (simd ? std::string("/") + simd_level_name(*simd) : "") +
                                  (p == ActivationPrecision::kF32 ? " f32" : " bf16");
        const Status st = forward_status(dir, backend, simd, p);
        ASSERT_FALSE(st.is_ok()) << label << ": a NaN in " << c.tensor << " gave finite logits";
        EXPECT_EQ(st.code(), StatusCode::kDataLoss) << label << ": " << st.to_string();
        EXPECT_NE(st.message().find(c.where), std::string::npos) << label << ": " << st.to_string();
      }
    }
  }
  fs::remove_all(root);
}

TEST(NonFiniteWeights, ANanInAnyDenseWeightKindFailsTheStepNamingTheLayer) {
  // Row 3 of the embedding is the prompt's first token; every other element sits in row 0 of a
  // projection (one output every token computes) or in a norm's gain.
  const int64_t embed_row3 = 3 * 64;
  expect_every_backend_refuses("llama-3.1-8b",
                               {{"model.embed_tokens.weight", embed_row3, "decoder layer 0"},
                                {"model.layers.1.input_layernorm.weight", 5, "decoder layer 1"},
                                {"model.layers.1.self_attn.q_proj.weight", 5, "decoder layer 1"},
                                {"model.layers.1.self_attn.k_proj.weight", 5, "decoder layer 1"},
                                {"model.layers.1.self_attn.v_proj.weight", 5, "decoder layer 1"},
                                {"model.layers.1.self_attn.o_proj.weight", 5, "decoder layer 1"},
                                {"model.layers.0.post_attention_layernorm.weight", 5, "decoder layer 0"},
                                {"model.layers.0.mlp.gate_proj.weight", 5, "decoder layer 0"},
                                {"model.layers.0.mlp.up_proj.weight", 5, "decoder layer 0"},
                                {"model.layers.0.mlp.down_proj.weight", 5, "decoder layer 0"},
                                {"model.norm.weight", 5, "logits"},
                                {"lm_head.weight", 5, "logits"}});
}

TEST(NonFiniteWeights, ANanInTheRouterOrAnExpertFailsTheStep) {
  // Every expert's row 0 of gate_proj would only be read when the expert is picked: poison all of the
  // router's row 0 instead (expert 0's logit is NaN for every token) and a shared-everywhere norm.
  expect_every_backend_refuses("qwen3-30b-a3b",
                               {{"model.layers.1.mlp.gate.weight", 5, "decoder layer 1"},
                                {"model.layers.1.self_attn.q_norm.weight", 2, "decoder layer 1"}});
}

}  // namespace
}  // namespace day0
