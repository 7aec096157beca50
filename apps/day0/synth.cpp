// day0 synth MODEL --out DIR: a miniature checkpoint with the same structure as MODEL and random
// weights (deterministic from --seed), for single-card smoke tests and test fixtures.
#include <algorithm>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "day0/core/human.h"
#include "day0/model/catalog.h"
#include "day0/model/model_summary.h"
#include "day0/ops/tensor.h"
#include "day0/synth/synth_checkpoint.h"

namespace day0::cli {
namespace {

struct SynthArgs {
  std::string model;
  std::string out;
  uint64_t seed = 0;
  MiniatureOptions dims;
  int shards = 3;
  bool no_mtp = false;
  bool json = false;
};

std::string attention_line(const ModelSpec& s) {
  // Shared key = value attention (DeepSeek-V4): its layers' kinds of KV are part of the mechanism, so
  // the summary's own line (inspect's) rather than a second description here.
  if (s.shared_kv_low_rank) return describe_attention(s);
  std::string attention = s.attention == AttentionKind::kMla
                              ? fmt::format("MLA (q_lora {}, kv_lora {}, nope {}, rope {}, v {})",
                                            s.mla->q_lora_rank, s.mla->kv_lora_rank, s.mla->qk_nope_head_dim,
                                            s.mla->qk_rope_head_dim, s.mla->v_head_dim)
                              : fmt::format("GQA {}/{} heads x {}", s.n_heads, s.n_kv_heads, s.head_dim);
  if (s.attention_sinks) attention += ", sinks";
  if (s.qk_norm) attention += s.qk_norm_full_width ? ", qk-norm over all heads" : ", qk-norm";
  if (s.sliding_window > 0 && count_masked_layers(s, AttentionMask::kSliding) > 0) {
    attention += fmt::format(", sliding {} on {} layers", s.sliding_window,
                             count_masked_layers(s, AttentionMask::kSliding));
  }
  if (count_masked_layers(s, AttentionMask::kChunked) > 0)
    attention += fmt::format(", chunked {}", s.attention_chunk_size);
  return attention;
}

std::string structure_line(const ModelSpec& s) {
  const std::string attention = attention_line(s);
  std::string ffn = "dense";
  if (s.moe) {
    ffn = fmt::format("{} dense + {} MoE layers, {} experts top-{} ({})", s.n_layers - count_moe_layers(s),
                      count_moe_layers(s), s.moe->n_experts, s.moe->experts_per_token,
                      topk_method_name(s.moe->topk_method));
    if (s.moe->n_group > 1) ffn += fmt::format(", {} groups keep {}", s.moe->n_group, s.moe->topk_group);
    if (s.moe->n_shared_experts > 0 || s.moe->shared_intermediate > 0) ffn += ", shared expert";
    if (s.moe->routed_scaling_factor != 1.0)
      ffn += fmt::format(", routed scaling {}", s.moe->routed_scaling_factor);
    const auto hashed =
        std::count_if(s.layers.begin(), s.layers.end(), [](auto& l) { return l.hash_routed; });
    if (hashed > 0) ffn += fmt::format(", {} hash-routed", hashed);
  }
  if (s.hyper_connections) ffn += fmt::format("; {} hyper-connected streams", s.hyper_connections->streams);
  // The rope words are inspect's (one description of the scaling, not the config's type name).
  return fmt::format("{} layers, hidden {}, vocab {}; {}; {}; rope {}; weights {}", s.n_layers, s.hidden_size,
                     s.vocab_size, attention, ffn, describe_rope(s), weight_format_name(s.weights.format));
}

int run_synth(const SynthArgs& args) {
  auto resolved = resolve_model(args.model);
  if (!resolved.is_ok()) return report_error("synth", resolved.status());
  SynthOptions options;
  options.seed = args.seed;
  options.n_shards = args.shards;
  options.mtp_layers = !args.no_mtp;
  auto result = synthesize_miniature(resolved->spec, args.dims, options, args.out);
  if (!result.is_ok()) return report_error("synth", result.status());
  const SynthResult& r = *result;
  if (args.json) {
    nlohmann::json out = {{"source", resolved->source},
                          {"dir", r.dir},
                          {"family", r.spec.family},
                          {"seed", args.seed},
                          {"shards", r.shards},
                          {"n_tensors", r.n_tensors},
                          {"n_mtp_tensors", r.n_mtp_tensors},
                          {"tensor_bytes", r.tensor_bytes},
                          {"params", r.params},
                          {"structure", structure_line(r.spec)}};
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("Miniature of {} ({}), seed {}\n", resolved->source, r.spec.family, args.seed);
  fmt::print("  structure  {}\n", structure_line(r.spec));
  fmt::print("  weights    {} parameters, {} tensors{}, {}\n", with_commas(r.params), r.n_tensors,
             r.n_mtp_tensors > 0
                 ? fmt::format(" (incl. {} of {} MTP layer(s))", r.n_mtp_tensors, r.spec.n_mtp_layers)
                 : "",
             human_bytes(static_cast<double>(r.tensor_bytes)));
  fmt::print("  wrote      {}/ : config.json, {} shards + model.safetensors.index.json, SHA256SUMS\n", r.dir,
             r.shards.size());
  return kExitOk;
}

const Registrar kSynthCommand(
    "synth",
    "Write a miniature checkpoint with the same structure as MODEL (family, attention, routing, layer "
    "pattern, "
    "weight format) and small dimensions, random weights from --seed",
    30, [](CLI::App& app) -> CommandRunner {
      auto args = std::make_shared<SynthArgs>();
      app.add_option("MODEL", args->model, "Model folder, config.json or catalog name (e.g. deepseek-v3)")
          ->required();
      app.add_option("--out", args->out, "Directory to create (must not exist, or be empty)")->required();
      app.add_option("--seed", args->seed, "Random seed (weights are a function of seed and tensor name)");
      app.add_option("--layers", args->dims.layers, "Decoder layers (default 4)")->check(CLI::Range(1, 4096));
      app.add_option("--hidden", args->dims.hidden, "Hidden size (default 64)")->check(CLI::Range(8, 65536));
      app.add_option("--heads", args->dims.heads, "Attention heads (default 4)")->check(CLI::Range(1, 1024));
      app.add_option("--head-dim", args->dims.head_dim, "Head dim for GQA models (default 16)")
          ->check(CLI::Range(2, 1024));
      app.add_option("--intermediate", args->dims.intermediate, "Dense MLP width (default 128)")
          ->check(CLI::Range(1, 1 << 20));
      app.add_option("--experts", args->dims.experts,
                     "Routed experts (default 8, 16 with group-limited routing)")
          ->check(CLI::Range(2, 1 << 16));
      app.add_option("--experts-per-token", args->dims.experts_per_token, "Experts chosen per token")
          ->check(CLI::Range(1, 1 << 16));
      app.add_option("--expert-intermediate", args->dims.expert_intermediate, "Expert MLP width (default 64)")
          ->check(CLI::Range(1, 1 << 20));
      app.add_option("--vocab", args->dims.vocab, "Vocabulary size (default 256)")
          ->check(CLI::Range(2, 1 << 24));
      app.add_option("--window", args->dims.window, "Cap on sliding window / attention chunk (default 16)")
          ->check(CLI::Range(1, 1 << 24));
      app.add_flag("--release-attention", args->dims.release_attention,
                   "Keep the release's MLA ranks, head widths and sparse-attention indexer (bench shapes): "
                   "attention then costs per head what it does in the release");
      app.add_option("--shards", args->shards, "Number of shards to aim for (default 3)")
          ->check(CLI::Range(1, 10000));
      app.add_flag("--no-mtp", args->no_mtp, "Leave out the release's multi-token-prediction layers");
      app.add_flag("--json", args->json, "Print the result as JSON");
      return [args] { return run_synth(*args); };
    });

}  // namespace
}  // namespace day0::cli
