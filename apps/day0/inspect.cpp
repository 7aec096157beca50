// day0 inspect MODEL: what a model is, what it weighs and what its forward pass runs, from its
// config.json (or the built-in catalog), before a single weight is downloaded.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "day0/core/human.h"
#include "day0/model/catalog.h"
#include "day0/model/family_registry.h"
#include "day0/model/model_memory.h"
#include "day0/model/model_summary.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/op_recording.h"

namespace day0::cli {
namespace {

// Columns padded to their widest cell; `right` marks right-aligned (numeric) columns.
void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right,
                 const std::string& indent = "  ") {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool r = c < right.size() && right[c];
      const std::string pad(width[c] - row[c].size(), ' ');
      line += r ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
}

std::string layer_plan(const ModelSpec& s) {
  std::vector<int64_t> dense, moe, sliding, chunked, nope, linear, mamba, attention_only;
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const LayerSpec& l = s.layers[static_cast<size_t>(n)];
    if (l.mamba) mamba.push_back(n);
    if (l.no_ffn && !l.mamba) attention_only.push_back(n);
    if (!l.no_ffn) (l.moe ? moe : dense).push_back(n);
    if (l.linear_attention) linear.push_back(n);
    if (l.mask == AttentionMask::kSliding) sliding.push_back(n);
    if (l.mask == AttentionMask::kChunked) chunked.push_back(n);
    if (!l.use_rope) nope.push_back(n);
  }
  std::string out = fmt::format("{} layers: dense FFN {} ({}), MoE {} ({})", s.n_layers, dense.size(),
                                describe_layer_indices(dense), moe.size(), describe_layer_indices(moe));
  if (!sliding.empty()) {
    out += fmt::format("; sliding window {} on {} ({})", s.sliding_window, sliding.size(),
                       describe_layer_indices(sliding));
  }
  if (!chunked.empty()) {
    out += fmt::format("; chunked {} on {} ({})", s.attention_chunk_size, chunked.size(),
                       describe_layer_indices(chunked));
  }
  if (!nope.empty()) out += fmt::format("; no RoPE on {} ({})", nope.size(), describe_layer_indices(nope));
  if (!mamba.empty() && s.mamba) {  // layers of one block: the FFN counts above are the FFN-only layers
    const MambaSpec& m = *s.mamba;
    out += fmt::format(
        "; Mamba-2 alone on {} ({}: {} heads x {}, {} groups, state {}, conv {}), attention alone "
        "on {} ({})",
        mamba.size(), describe_layer_indices(mamba), m.n_heads, m.head_dim, m.n_groups, m.state_size,
        m.conv_kernel, attention_only.size(), describe_layer_indices(attention_only));
  }
  if (!linear.empty() && s.linear_attention) {
    const LinearAttentionSpec& la = *s.linear_attention;
    out += fmt::format(
        "; Gated DeltaNet on {} ({}: {} key heads x {} / {} value heads x {}, conv {}), full attention on "
        "the "
        "other {}{}",
        linear.size(), describe_layer_indices(linear), la.n_key_heads, la.key_head_dim, la.n_value_heads,
        la.value_head_dim, la.conv_kernel, s.n_layers - static_cast<int64_t>(linear.size()),
        s.attention_output_gate ? " (sigmoid output gate)" : "");
  }
  return out;
}

std::string count_row(int64_t v) {
  return with_commas(v);
}

std::string attrs_text(const OpSpec& op) {
  std::string out;
  for (const auto& [key, value] : op.attrs) {
    // Shown in the header lines already (the JSON keeps every attribute).
    if (key == "scale" || key == "eps" || key == "n_experts" || key == "top_k" ||
        key == "routed_scaling_factor" || key == "renormalize" || key == "kv_lora_rank" ||
        key == "rope_dim" || (key == "groups" && op.name != "paged_attention")) {
      continue;
    }
    if (!out.empty()) out += " ";
    out += key + "=" + value;
  }
  return out;
}

// FLOP counts in decimal units: "142.88 G".
std::string flops_text(double flops) {
  static const char* const kUnits[] = {"", " k", " M", " G", " T", " P"};
  int unit = 0;
  while (flops >= 1000.0 && unit < 5) {
    flops /= 1000.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f}", flops) : fmt::format("{:.2f}{}", flops, kUnits[unit]);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

void print_human(const ModelSummary& m) {
  const ModelSpec& s = m.spec;
  const ParamCounts& p = m.params;
  std::vector<std::vector<std::string>> info = {
      {"Model", m.source},
      {"Family", fmt::format("{} ({}, model_type {})", s.family, s.architecture, s.model_type)},
      {"Layer plan", layer_plan(s)},
      {"Attention", describe_attention(s)},
      {"MoE", describe_moe(s)},
      {"Vocabulary", with_commas(s.vocab_size) + (s.tie_word_embeddings ? " (tied embeddings)" : "")},
      {"Hidden size", with_commas(s.hidden_size)},
      {"Context", with_commas(s.max_position_embeddings) + " tokens"},
      {"RoPE", describe_rope(s)},
      {"Weights", describe_weights(s)},
  };
  if (s.n_mtp_layers > 0) {
    // After the decoder's layers (DeepSeek's layout) or in a module of their own (mtp.*).
    std::string where = fmt::format("model.layers.{}+", s.n_layers);
    int64_t params = 0;  // counted apart from the model's parameters
    if (auto manifest = build_tensor_manifest(s); manifest.is_ok()) {
      bool first = true;
      for (const TensorSpec& t : manifest->tensors) {
        if (!t.mtp) continue;
        if (first && !t.name.starts_with(decoder_prefix(s) + "layers."))
          where = t.name.substr(0, t.name.find('.')) + ".*";
        first = false;
        params += t.params;
      }
    }
    info.push_back({"MTP", fmt::format("{} multi-token-prediction layer(s) stored as {} ({} parameters); "
                                       "skipped by decoding, not counted below",
                                       s.n_mtp_layers, where, human_count(static_cast<double>(params)))});
  }
  print_table(info, {false, false}, "");

  fmt::print("\nParameters\n");
  print_table(
      {{"", "exact", "human"},
       {"total", count_row(p.total), human_count(static_cast<double>(p.total))},
       {p.active_min != p.active ? "active per token (most)" : "active per token", count_row(p.active),
        human_count(static_cast<double>(p.active))},
       {"  without input embedding", count_row(p.active_without_embedding),
        human_count(static_cast<double>(p.active_without_embedding))},
       {"  without embedding + lm_head", count_row(p.active_without_embeddings),
        human_count(static_cast<double>(p.active_without_embeddings))},
       {"embedding", count_row(p.embedding), human_count(static_cast<double>(p.embedding))},
       {"lm_head", count_row(p.lm_head), p.lm_head ? human_count(static_cast<double>(p.lm_head)) : "tied"},
       {"routed experts", count_row(p.routed_experts), human_count(static_cast<double>(p.routed_experts))},
       {"shared experts", count_row(p.shared_experts), human_count(static_cast<double>(p.shared_experts))},
       {"attention", count_row(p.attention), human_count(static_cast<double>(p.attention))},
       {"dense MLP", count_row(p.dense_mlp), human_count(static_cast<double>(p.dense_mlp))}},
      {false, true, true});
  if (p.hyper_connections > 0) {
    fmt::print("  hyper-connections: {} ({}), within total\n", with_commas(p.hyper_connections),
               human_count(static_cast<double>(p.hyper_connections)));
  }
  if (p.active_min != p.active) {
    fmt::print(
        "  Zero-computation experts: a token uses {} ({}) to {} ({}) parameters, {} without the input "
        "embedding; the planner plans for {:.0f}% of the top-{} picks on real experts.\n",
        with_commas(p.active_min), human_count(static_cast<double>(p.active_min)), with_commas(p.active),
        human_count(static_cast<double>(p.active)),
        fmt::format(
            "{} to {}",
            human_count(static_cast<double>(p.active_min - (s.tie_word_embeddings ? 0 : p.embedding))),
            human_count(static_cast<double>(p.active_without_embedding))),
        100.0 * s.moe->mean_real_expert_share, s.moe->experts_per_token);
  }
  fmt::print(
      "  Counting: total = every stored weight of the main model, the input embedding and the untied "
      "lm_head\n"
      "  both included, MTP layers and quantization scales excluded; active = the same with only the top-{}\n"
      "  routed experts, embedding and lm_head counted in full. {} tensors in the manifest.\n",
      s.moe ? s.moe->experts_per_token : 0, with_commas(m.n_tensors));

  fmt::print("\nWeight memory\n");
  std::vector<std::vector<std::string>> memory = {{"format", "bits/param", "bytes", "human"}};
  for (const auto& row : m.weight_memory) {
    memory.push_back({row.format, fmt::format("{:.2f}", row.bits_per_param),
                      with_commas(static_cast<int64_t>(row.bytes)),
                      human_bytes(static_cast<double>(row.bytes))});
  }
  print_table(memory, {false, true, true, true});

  const char* kv_label = m.kv_cache.dtype == KvDtype::kF32
                             ? "F32"
                             : (m.kv_cache.dtype == KvDtype::kFp8E4M3 ? "FP8 E4M3" : "BF16");
  fmt::print("\nKV cache ({}; {})\n", kv_label, m.kv_cache.layout);
  std::vector<std::vector<std::string>> kv_rows = {
      {m.kv_cache.state_layers > 0 ? "per token (KV layers)" : "per token (all layers)",
       with_commas(static_cast<int64_t>(m.kv_cache.bytes_per_token)) + " B",
       human_bytes(static_cast<double>(m.kv_cache.bytes_per_token))},
      {"per 1k-token sequence (1,000 tokens)",
       with_commas(static_cast<int64_t>(m.kv_cache.bytes_per_1k_tokens)) + " B",
       human_bytes(static_cast<double>(m.kv_cache.bytes_per_1k_tokens))}};
  if (m.kv_cache.state_layers > 0) {
    // Fixed per sequence, whatever its length: each linear-attention layer's conv window and state.
    kv_rows.push_back(
        {fmt::format("recurrent state per sequence ({} layers, fixed)", m.kv_cache.state_layers),
         with_commas(static_cast<int64_t>(m.kv_cache.state_bytes_per_sequence)) + " B",
         human_bytes(static_cast<double>(m.kv_cache.state_bytes_per_sequence))});
    // The engine keeps a snapshot of it at the sequence's last whole block (prefix caching, rollback).
    kv_rows.push_back({"recurrent state per running sequence (live + snapshot)",
                       with_commas(static_cast<int64_t>(2 * m.kv_cache.state_bytes_per_sequence)) + " B",
                       human_bytes(static_cast<double>(2 * m.kv_cache.state_bytes_per_sequence))});
  }
  print_table(kv_rows, {false, true, true});
  if (m.kv_cache.bounded_layers > 0) {
    fmt::print("  {} sliding/chunked layers hold at most their window in the sequence figure.\n",
               m.kv_cache.bounded_layers);
  }
  if (m.kv_cache.kinds.size() > 1 || (!m.kv_cache.kinds.empty() && m.kv_cache.kinds[0].compress_ratio > 0)) {
    std::vector<std::vector<std::string>> kinds = {
        {"layer kind", "layers", "raw row B/token", "compressed B/token"}};
    for (const KvLayerKind& k : m.kv_cache.kinds) {
      kinds.push_back({k.name, std::to_string(k.layers), fmt::format("{:.0f}", k.raw_bytes_per_token),
                       fmt::format("{:.2f}", k.compressed_bytes_per_token)});
    }
    print_table(kinds, {false, true, true, true});
    fmt::print("  past every window a token adds {} B (all layers).\n",
               with_commas(static_cast<int64_t>(m.kv_cache.bytes_per_token_past_windows)));
  }

  fmt::print("\nLayer recipes (the steps the engine replays for each layer)\n");
  std::vector<std::vector<std::string>> recipes;
  for (const auto& g : m.recipes)
    recipes.push_back({describe_layer_indices(g.layers), describe_recipe(g.recipe)});
  print_table(recipes, {false, false});
  if (m.ops.ops.empty()) {
    fmt::print("\nOperators: none recorded (the engine does not run this model yet)\n");
    return;
  }
  fmt::print(
      "\nOperators (recorded: the kernels of one prefill and one decode step{}; figures per decoded token, "
      "{} "
      "tokens cached)\n",
      m.ops.bf16_activations ? " with BF16 activations, the integer kernels' path of a quantized checkpoint"
                             : "",
      m.ops.context_tokens);
  std::vector<std::vector<std::string>> ops = {
      {"op", "where", "shape", "steps", "calls", "FLOP/token", "bytes/token", "attributes"}};
  for (const auto& op : m.ops.ops) {
    const char* steps = op.prefill && op.decode ? "both" : (op.prefill ? "prefill" : "decode");
    ops.push_back({op.name, op.label.empty() ? "-" : op.label,
                   op.shapes.empty() ? "" : shape_text(op.shapes.front()), steps,
                   std::to_string(op.calls_per_token), flops_text(op.flops_per_token),
                   human_bytes(op.bytes_per_token), attrs_text(op)});
  }
  ops.push_back({"total", "", "", "", "", flops_text(m.ops.total_flops_per_token()),
                 human_bytes(m.ops.total_bytes_per_token()), ""});
  print_table(ops, {false, false, false, false, true, true, true, false});
}

struct InspectOptions {
  std::string model;
  bool json = false;
  bool families = false;
  bool strict_config = false;
  int64_t context = kDefaultOpContext;
  std::string kv_dtype = "bf16";
};

int run_inspect(const InspectOptions& options) {
  if (options.families) {
    if (options.json) {
      fmt::print("{}\n", supported_families_json().dump(2));
    } else {
      fmt::print("{}", supported_families_markdown());
    }
    return kExitOk;
  }
  if (options.model.empty()) {
    return report_error("inspect",
                        invalid_argument("MODEL is required (or --families for the supported list)"));
  }
  auto resolved = resolve_model(options.model, options.strict_config);
  if (!resolved.is_ok()) return report_error("inspect", resolved.status());
  // A model the engine does not run yet has no recorded operators: the rest of the summary stands.
  const std::vector<std::string> unimplemented = unimplemented_mechanisms(resolved->spec);
  auto ops =
      unimplemented.empty() ? record_op_list(resolved->spec, options.context) : Result<OpList>(OpList{});
  if (!ops.is_ok()) return report_error("inspect", ops.status());
  auto summary = summarize_model(resolved->spec, resolved->source, std::move(ops).value());
  if (!summary.is_ok()) return report_error("inspect", summary.status());
  const auto& unknown = resolved->config_audit.unknown_keys;
  // The figure the engine's paged pool holds for this dtype (the same function sizes its blocks).
  summary->kv_cache =
      kv_cache_summary(resolved->spec, parse_kv_dtype(options.kv_dtype).value_or(KvDtype::kBF16));
  if (options.json) {
    auto out = summary_to_json(*summary);
    out["unknown_config_keys"] = unknown;
    out["unimplemented_mechanisms"] = unimplemented;
    fmt::print("{}\n", out.dump(2));
  } else {
    print_human(*summary);
    if (!unimplemented.empty()) {
      fmt::print("\nNot runnable yet: the engine has no block for {}; run, align and serve refuse it.\n",
                 fmt::join(unimplemented, ", "));
    }
    if (!unknown.empty()) fmt::print("\n{}", unknown_keys_text(resolved->config_audit));
  }
  return kExitOk;
}

const Registrar kInspect(
    "inspect", "Describe a model from its config.json: layers, parameters, memory, KV cache, operators", 10,
    [](CLI::App& app) -> CommandRunner {
      auto options = std::make_shared<InspectOptions>();
      app.add_option("MODEL", options->model,
                     "A model folder (with config.json), a config.json file, or a catalog name (" +
                         catalog_names_text() + ")");
      app.add_flag(
             "--families", options->families,
             "List the model families Day0 runs (a Markdown table; with --json, JSON) instead of a model")
          ->excludes("MODEL");
      app.add_flag("--json", options->json, "Print everything as JSON");
      app.add_flag("--strict-config", options->strict_config,
                   "Fail (exit 2) on a config key Day0 does not account for");
      app.add_option("--kv-dtype", options->kv_dtype,
                     "KV cache element type for the KV figures: bf16 (default), f32, fp8")
          ->check(CLI::IsMember({"bf16", "f32", "fp8"}));
      app.add_option("--context", options->context, "Cached tokens assumed for per-token operator figures")
          ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
          ->capture_default_str();
      return [options] { return run_inspect(*options); };
    });

}  // namespace
}  // namespace day0::cli
