#include "day0/io/gguf_convert.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "day0/core/atomic_file.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/io/gguf_convert_internal.h"
#include "day0/io/progress.h"
#include "day0/io/safetensors_writer.h"

namespace day0::gguf {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// The dimensions an architecture's tensors and config need.
struct Dims {
  int64_t n_layers = 0;
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
};

// One architecture: how its metadata becomes a config.json and its tensor names HF names. Adding a
// family is one more entry in kArchitectures.
struct Architecture {
  const char* gguf_name;
  // Fills config (HF keys) and dims; refuses keys it does not understand.
  Status (*config)(const GgufFile& f, ojson& config, Dims& dims);
  // The HF name of a GGUF tensor and whether its rows carry llama.cpp's rotary interleave (q: n_heads,
  // k: n_kv_heads, 0: none); nullopt for a tensor with no HF counterpart.
  std::optional<std::pair<std::string, int64_t>> (*tensor_name)(const std::string& gguf_name,
                                                                const Dims& dims);
};

Result<int64_t> positive(const GgufFile& f, const std::string& key) {
  D0_ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
  if (v <= 0)
    return invalid_argument(fmt::format("{}: {}: expected a positive integer, found {}", f.name(), key, v));
  return v;
}

Status llama_config(const GgufFile& f, ojson& config, Dims& dims) {
  const std::string p = "llama.";
  // Keys this conversion understands; anything else under llama.* is refused.
  static const std::set<std::string, std::less<>> kKnown = {
      "context_length",       "embedding_length",
      "block_count",          "feed_forward_length",
      "attention.head_count", "attention.head_count_kv",
      "rope.freq_base",       "attention.layer_norm_rms_epsilon",
      "vocab_size",           "rope.dimension_count",
      "attention.key_length", "attention.value_length",
      "rope.scaling.type",    "rope.scaling.factor",
      "expert_count",         "expert_used_count"};
  for (const auto& [key, value] : f.metadata()) {
    if (key.rfind(p, 0) != 0) continue;
    if (!kKnown.count(std::string_view(key).substr(p.size()))) {
      return unsupported(fmt::format(
          "{}: metadata {} is not understood by the GGUF -> Hugging Face conversion and may change the "
          "model's math; refusing to convert",
          f.name(), key));
    }
  }
  if (f.optional_int(p + "expert_count").value_or(0) > 0) {
    return unsupported(
        fmt::format("{}: llama.expert_count > 0 (a mixture of experts) is not converted yet", f.name()));
  }
  D0_ASSIGN_OR_RETURN(dims.n_layers, positive(f, p + "block_count"));
  D0_ASSIGN_OR_RETURN(dims.hidden, positive(f, p + "embedding_length"));
  D0_ASSIGN_OR_RETURN(int64_t ffn, positive(f, p + "feed_forward_length"));
  D0_ASSIGN_OR_RETURN(dims.n_heads, positive(f, p + "attention.head_count"));
  dims.n_kv_heads = dims.n_heads;
  if (f.find(p + "attention.head_count_kv")) {
    D0_ASSIGN_OR_RETURN(dims.n_kv_heads, positive(f, p + "attention.head_count_kv"));
  }
  if (dims.n_heads % dims.n_kv_heads != 0) {
    return invalid_argument(fmt::format("{}: {} heads are not a multiple of {} KV heads", f.name(),
                                        dims.n_heads, dims.n_kv_heads));
  }
  dims.head_dim = dims.hidden / dims.n_heads;
  if (f.find(p + "attention.key_length")) {
    D0_ASSIGN_OR_RETURN(dims.head_dim, positive(f, p + "attention.key_length"));
  } else if (dims.hidden % dims.n_heads != 0) {
    return invalid_argument(
        fmt::format("{}: hidden {} is not a multiple of {} heads", f.name(), dims.hidden, dims.n_heads));
  }
  if (f.find(p + "attention.value_length")) {
    D0_ASSIGN_OR_RETURN(int64_t v_len, positive(f, p + "attention.value_length"));
    if (v_len != dims.head_dim) {
      return unsupported(fmt::format("{}: attention.value_length {} differs from key_length {}", f.name(),
                                     v_len, dims.head_dim));
    }
  }
  if (f.find(p + "rope.dimension_count")) {
    D0_ASSIGN_OR_RETURN(int64_t rot, positive(f, p + "rope.dimension_count"));
    if (rot != dims.head_dim) {
      return unsupported(
          fmt::format("{}: llama.rope.dimension_count {} differs from the head size {} (partial "
                      "rotary is not a Llama feature)",
                      f.name(), rot, dims.head_dim));
    }
  }
  double theta = 10000.0;
  if (f.find(p + "rope.freq_base")) {
    D0_ASSIGN_OR_RETURN(theta, f.get_float(p + "rope.freq_base"));
  }
  double eps = 1e-5;
  if (f.find(p + "attention.layer_norm_rms_epsilon")) {
    D0_ASSIGN_OR_RETURN(eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  } else {
    return not_found(fmt::format("{}: metadata llama.attention.layer_norm_rms_epsilon is missing", f.name()));
  }
  int64_t context = 2048;
  if (f.find(p + "context_length")) {
    D0_ASSIGN_OR_RETURN(context, positive(f, p + "context_length"));
  }
  ojson rope_scaling = nullptr;
  if (f.find(p + "rope.scaling.type")) {
    D0_ASSIGN_OR_RETURN(std::string type, f.get_string(p + "rope.scaling.type"));
    if (type == "linear") {
      D0_ASSIGN_OR_RETURN(double factor, f.get_float(p + "rope.scaling.factor"));
      rope_scaling = {{"rope_type", "linear"}, {"factor", factor}};
    } else if (type != "none") {
      return unsupported(fmt::format("{}: llama.rope.scaling.type \"{}\" is not converted yet (none, linear)",
                                     f.name(), type));
    }
  }
  // The vocabulary: the embedding's rows are authoritative; the metadata must agree.
  const TensorInfo* embed = f.find_tensor("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2 || embed->dims[0] != dims.hidden) {
    return not_found(fmt::format("{}: token_embd.weight [hidden {}, vocab] is missing or misshapen", f.name(),
                                 dims.hidden));
  }
  dims.vocab = embed->dims[1];
  if (auto v = f.optional_int(p + "vocab_size"); v && *v != dims.vocab) {
    return invalid_argument(fmt::format("{}: llama.vocab_size {} differs from token_embd.weight's {} rows",
                                        f.name(), *v, dims.vocab));
  }
  const bool tied = f.find_tensor("output.weight") == nullptr;
  const bool attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  config = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", dims.hidden},
            {"intermediate_size", ffn},
            {"num_hidden_layers", dims.n_layers},
            {"num_attention_heads", dims.n_heads},
            {"num_key_value_heads", dims.n_kv_heads},
            {"head_dim", dims.head_dim},
            {"hidden_act", "silu"},
            {"max_position_embeddings", context},
            {"rms_norm_eps", eps},
            {"rope_theta", theta},
            {"rope_scaling", rope_scaling},
            {"attention_bias", attention_bias},
            {"attention_dropout", 0.0},
            {"mlp_bias", false},
            {"tie_word_embeddings", tied},
            {"vocab_size", dims.vocab}};
  return Status::ok();
}

std::optional<std::pair<std::string, int64_t>> llama_tensor_name(const std::string& name, const Dims& dims) {
  if (name == "token_embd.weight") return std::pair{std::string("model.embed_tokens.weight"), int64_t{0}};
  if (name == "output_norm.weight") return std::pair{std::string("model.norm.weight"), int64_t{0}};
  if (name == "output.weight") return std::pair{std::string("lm_head.weight"), int64_t{0}};
  static const std::regex kBlock(R"(blk\.(\d+)\.([a-z_]+)\.(weight|bias))");
  std::smatch m;
  if (!std::regex_match(name, m, kBlock)) return std::nullopt;
  const std::string layer = m[1].str();
  if (layer.size() > 6 || std::stoll(layer) >= dims.n_layers) return std::nullopt;
  static const std::map<std::string, std::pair<std::string, int>> kParts = {
      {"attn_norm", {"input_layernorm", 0}}, {"ffn_norm", {"post_attention_layernorm", 0}},
      {"attn_q", {"self_attn.q_proj", 1}},   {"attn_k", {"self_attn.k_proj", 2}},
      {"attn_v", {"self_attn.v_proj", 0}},   {"attn_output", {"self_attn.o_proj", 0}},
      {"ffn_gate", {"mlp.gate_proj", 0}},    {"ffn_up", {"mlp.up_proj", 0}},
      {"ffn_down", {"mlp.down_proj", 0}}};
  auto it = kParts.find(m[2].str());
  if (it == kParts.end()) return std::nullopt;
  const int64_t heads = it->second.second == 1 ? dims.n_heads : it->second.second == 2 ? dims.n_kv_heads : 0;
  return std::pair{fmt::format("model.layers.{}.{}.{}", layer, it->second.first, m[3].str()), heads};
}

const Architecture kArchitectures[] = {
    {"llama", llama_config, llama_tensor_name},
};

Result<std::vector<uint8_t>> encode(std::span<const float> values, DType dtype) {
  std::vector<uint8_t> out;
  if (dtype == DType::kF32) {
    out.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  if (dtype == DType::kBF16) {
    out.resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t b = f32_to_bf16(values[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
    return out;
  }
  return invalid_argument(fmt::format("--dtype {}: expected f32 or bf16", dtype_name(dtype)));
}

std::string cache_root() {
  if (const char* d = std::getenv("DAY0_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/day0";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/day0";
  return "/tmp/day0-cache";
}

}  // namespace

void unpermute_rotary_rows(std::span<const float> in, std::span<float> out, int64_t n_heads, int64_t head_dim,
                           int64_t cols) {
  D0_CHECK(head_dim % 2 == 0);
  D0_CHECK(in.size() == out.size() && static_cast<int64_t>(in.size()) == n_heads * head_dim * cols);
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t from = h * head_dim + 2 * j + i;   // llama.cpp: the two halves interleaved
        const int64_t to = h * head_dim + i * half + j;  // Hugging Face: first half, then second half
        std::memcpy(out.data() + to * cols, in.data() + from * cols,
                    static_cast<size_t>(cols) * sizeof(float));
      }
    }
  }
}

Result<HfConversion> plan_hf_conversion(const GgufFile& f) {
  HfConversion out;
  D0_ASSIGN_OR_RETURN(out.architecture, f.get_string("general.architecture"));
  const Architecture* arch = nullptr;
  for (const Architecture& a : kArchitectures) {
    if (out.architecture == a.gguf_name) arch = &a;
  }
  if (arch == nullptr) {
    return unsupported(
        fmt::format("{}: general.architecture \"{}\" has no Hugging Face conversion yet (llama)", f.name(),
                    out.architecture));
  }
  Dims dims;
  D0_RETURN_IF_ERROR(arch->config(f, out.config, dims));
  D0_RETURN_IF_ERROR(build_hf_tokenizer(f, out));
  if (out.generation_config.contains("bos_token_id"))
    out.config["bos_token_id"] = out.generation_config["bos_token_id"];
  if (out.generation_config.contains("eos_token_id"))
    out.config["eos_token_id"] = out.generation_config["eos_token_id"];
  std::set<std::string> seen;
  for (const TensorInfo& t : f.tensors()) {
    auto mapped = arch->tensor_name(t.name, dims);
    if (!mapped) {
      return unsupported(fmt::format("{}: tensor {} has no Hugging Face counterpart in the {} conversion",
                                     f.name(), t.name, out.architecture));
    }
    HfTensorPlan p;
    p.hf_name = mapped->first;
    p.source = &t;
    p.shape = t.hf_shape();
    p.unpermute_heads = mapped->second;
    if (p.unpermute_heads > 0) {
      const int64_t rows = p.shape[0];
      if (rows != p.unpermute_heads * dims.head_dim || dims.head_dim % 2 != 0) {
        return invalid_argument(fmt::format("{}: tensor {}: {} rows, expected {} heads x {}", f.name(),
                                            t.name, rows, p.unpermute_heads, dims.head_dim));
      }
    }
    seen.insert(p.hf_name);
    out.tensors.push_back(std::move(p));
  }
  if (out.config.value("tie_word_embeddings", false) == false && !seen.count("lm_head.weight")) {
    return internal_error("untied embeddings without lm_head.weight");
  }
  return out;
}

Result<std::vector<float>> hf_tensor_f32(const HfTensorPlan& plan) {
  D0_ASSIGN_OR_RETURN(std::vector<float> values, dequantize_tensor(*plan.source));
  if (plan.unpermute_heads == 0) return values;
  const int64_t rows = plan.shape[0];
  const int64_t cols = plan.shape.size() > 1 ? static_cast<int64_t>(values.size()) / rows : 1;
  std::vector<float> out(values.size());
  unpermute_rotary_rows(values, out, plan.unpermute_heads, rows / plan.unpermute_heads, cols);
  return out;
}

Status convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir,
                          const ConvertOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16) {
    return invalid_argument(fmt::format("dtype {}: expected F32 or BF16", dtype_name(options.dtype)));
  }
  D0_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(gguf_path));
  D0_ASSIGN_OR_RETURN(HfConversion plan, plan_hf_conversion(file));
  std::error_code ec;
  const fs::path target(out_dir);
  if (fs::exists(target, ec) && !(fs::is_directory(target, ec) && fs::is_empty(target, ec))) {
    return failed_precondition(
        fmt::format("{}: exists and is not an empty folder; choose another --out", out_dir));
  }
  // A hidden sibling ".<name>.tmp-<pid>-XXXXXX" that a signal removes and a later run sweeps when
  // its process is gone (a SIGKILL); renamed into place only once complete.
  const fs::path parent = fs::absolute(target, ec).parent_path();
  if (!fs::is_directory(parent, ec)) return not_found(parent.string() + ": no such folder (parent of --out)");
  remove_stale_temps(parent, target.filename().string());
  D0_ASSIGN_OR_RETURN(TempDir staging, TempDir::create(parent, target.filename().string()));
  const fs::path tmp = staging.path();
  ojson config = plan.config;
  config["torch_dtype"] = options.dtype == DType::kF32 ? "float32" : "bfloat16";
  D0_RETURN_IF_ERROR(write_file_atomic((tmp / "config.json").string(), config.dump(2) + "\n"));
  D0_RETURN_IF_ERROR(write_file_atomic((tmp / "tokenizer.json").string(), plan.tokenizer.dump() + "\n"));
  D0_RETURN_IF_ERROR(
      write_file_atomic((tmp / "tokenizer_config.json").string(), plan.tokenizer_config.dump(2) + "\n"));
  D0_RETURN_IF_ERROR(
      write_file_atomic((tmp / "generation_config.json").string(), plan.generation_config.dump(2) + "\n"));

  uint64_t total = 0;
  const uint64_t elem_bytes = options.dtype == DType::kF32 ? 4 : 2;
  for (const HfTensorPlan& p : plan.tensors) total += p.source->n_elements * elem_bytes;
  const bool tty = options.progress != nullptr && isatty(fileno(options.progress)) != 0;
  ByteProgress progress("converting", total, options.progress, tty);
  CheckpointWriter writer(uint64_t{4} << 30, /*single_file=*/true);
  writer.set_metadata("format", "pt");
  for (const HfTensorPlan& p : plan.tensors) {
    PendingTensor t;
    t.name = p.hf_name;
    t.dtype = options.dtype;
    t.shape = p.shape;
    const HfTensorPlan* plan_ptr = &p;
    const DType dtype = options.dtype;
    t.fill = [plan_ptr, dtype, &progress](std::span<uint8_t> dst) -> Status {
      D0_ASSIGN_OR_RETURN(std::vector<float> values, hf_tensor_f32(*plan_ptr));
      D0_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, encode(values, dtype));
      if (bytes.size() != dst.size())
        return internal_error("tensor byte size mismatch: " + plan_ptr->hf_name);
      std::memcpy(dst.data(), bytes.data(), bytes.size());
      progress.add(bytes.size());
      return Status::ok();
    };
    D0_RETURN_IF_ERROR(writer.add(std::move(t)));
  }
  D0_ASSIGN_OR_RETURN(std::vector<std::string> shards, writer.write(tmp.string()));
  (void)shards;
  progress.finish();
  return staging.commit_to(fs::absolute(target, ec));
}

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && fs::is_regular_file(path, ec);
}

Result<std::string> gguf_cached_hf_folder(const std::string& gguf_path, std::FILE* progress) {
  std::error_code ec;
  const fs::path abs = fs::absolute(gguf_path, ec);
  const uint64_t size = fs::file_size(abs, ec);
  if (ec) return io_error(fmt::format("{}: {}", gguf_path, ec.message()));
  const auto mtime = fs::last_write_time(abs, ec).time_since_epoch().count();
  const size_t key = std::hash<std::string>{}(fmt::format("{}|{}|{}", abs.string(), size, mtime));
  const fs::path folder =
      fs::path(cache_root()) / "gguf" / fmt::format("{}-{:016x}", abs.stem().string(), key);
  if (fs::exists(folder / "config.json", ec) && fs::exists(folder / "model.safetensors", ec))
    return folder.string();
  fs::create_directories(folder.parent_path(), ec);
  if (progress != nullptr) {
    fmt::print(progress, "day0: converting {} to a Hugging Face folder (F32) in {}\n", gguf_path,
               folder.string());
  }
  ConvertOptions options;
  options.dtype = DType::kF32;
  options.progress = progress;
  Status st = convert_gguf_to_hf(gguf_path, folder.string(), options);
  // Another process may have converted the same file at the same time: its folder is as good.
  if (!st.is_ok() && !fs::exists(folder / "model.safetensors", ec)) return st;
  return folder.string();
}

}  // namespace day0::gguf
