#include "day0/align/reference_dump.h"

#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "day0/io/safetensors_file.h"
#include "day0/io/safetensors_writer.h"

namespace day0 {
namespace {

Status reject(const std::string& path, const std::string& why) {
  return invalid_argument(fmt::format("{}: not a {} reference dump: {}", path, kReferenceFormat, why));
}

std::optional<int64_t> parse_index(std::string_view text) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || text.empty()) return std::nullopt;
  if (text.size() > 1 && text[0] == '0') return std::nullopt;
  return v;
}

std::string shape_text(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Result<FloatMatrix> read_f32_2d(const std::string& path, const TensorView& t) {
  if (t.dtype != DType::kF32 || t.shape.size() != 2) {
    return reject(path, fmt::format("tensor {}: expected F32 [rows, cols], found {} {}", t.name,
                                    dtype_name(t.dtype), shape_text(t.shape)));
  }
  FloatMatrix m(t.shape[0], t.shape[1]);
  std::memcpy(m.data.data(), t.data.data(), m.data.size() * sizeof(float));
  return m;
}

Result<std::vector<int64_t>> read_i64_1d(const std::string& path, const TensorView& t) {
  if (t.dtype != DType::kI64 || t.shape.size() != 1) {
    return reject(path, fmt::format("tensor {}: expected I64 [T], found {} {}", t.name, dtype_name(t.dtype),
                                    shape_text(t.shape)));
  }
  std::vector<int64_t> v(static_cast<size_t>(t.shape[0]));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(int64_t));
  return v;
}

}  // namespace

Status validate_reference_dump(const ReferenceDump& dump) {
  if (dump.prompts.empty()) return invalid_argument("no prompts (prompt.0.input_ids is missing)");
  const int64_t vocab = dump.prompts.front().logits.cols;
  // The layers' outputs share one width; the final norm's may differ (n hyper-connected streams side by
  // side [T, n H] against [T, H]).
  int64_t hidden = -1, final_width = -1;
  for (size_t i = 0; i < dump.prompts.size(); ++i) {
    const ReferencePrompt& p = dump.prompts[i];
    const auto t = static_cast<int64_t>(p.input_ids.size());
    if (t == 0) return invalid_argument(fmt::format("prompt.{}.input_ids is empty", i));
    if (p.logits.rows != t || p.logits.cols != vocab || vocab <= 0) {
      return invalid_argument(fmt::format("prompt.{}.logits: expected [{}, {}], found [{}, {}]", i, t, vocab,
                                          p.logits.rows, p.logits.cols));
    }
    auto check_hidden = [&](const FloatMatrix& m, const std::string& name, int64_t& width) -> Status {
      if (width < 0) width = m.cols;
      if (m.rows != t || m.cols != width || width <= 0) {
        return invalid_argument(fmt::format("prompt.{}.{}: expected [{}, {}], found [{}, {}]", i, name, t,
                                            width, m.rows, m.cols));
      }
      return Status::ok();
    };
    for (const auto& [l, m] : p.hidden)
      D0_RETURN_IF_ERROR(check_hidden(m, fmt::format("hidden.{}", l), hidden));
    if (p.final_norm) D0_RETURN_IF_ERROR(check_hidden(*p.final_norm, "final_norm", final_width));
    const auto n = static_cast<int64_t>(p.greedy_ids.size());
    if (p.greedy_logits.rows != n || (n > 0 && p.greedy_logits.cols != vocab)) {
      return invalid_argument(fmt::format("prompt.{}.greedy_logits: expected [{}, {}], found [{}, {}]", i, n,
                                          vocab, p.greedy_logits.rows, p.greedy_logits.cols));
    }
    auto check_flags = [&](const std::vector<int64_t>& flags, const std::string& name,
                           int64_t rows) -> Status {
      if (!flags.empty() && static_cast<int64_t>(flags.size()) != rows) {
        return invalid_argument(
            fmt::format("prompt.{}.{}: expected [{}], found [{}]", i, name, rows, flags.size()));
      }
      for (int64_t f : flags) {
        if (f != 0 && f != 1)
          return invalid_argument(fmt::format("prompt.{}.{}: value {} is not 0 or 1", i, name, f));
      }
      return Status::ok();
    };
    D0_RETURN_IF_ERROR(check_flags(p.selection_ties, "selection_ties", t));
    D0_RETURN_IF_ERROR(check_flags(p.greedy_selection_ties, "greedy_selection_ties", n));
    for (int64_t id : p.input_ids) {
      if (id < 0 || id >= vocab)
        return invalid_argument(fmt::format("prompt.{}.input_ids: id {} outside [0, {})", i, id, vocab));
    }
  }
  return Status::ok();
}

Result<ReferenceDump> read_reference_dump(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  if (!file.is_ok()) {
    return invalid_argument(
        fmt::format("{}: not a {} reference dump: {}", path, kReferenceFormat, file.status().to_string()));
  }
  ReferenceDump dump;
  dump.metadata = file->metadata();
  const std::string format = dump.value("format");
  if (format != kReferenceFormat) {
    return reject(path, format.empty() ? "__metadata__ has no \"format\" key"
                                       : fmt::format("__metadata__.format is \"{}\"", format));
  }
  std::map<int64_t, ReferencePrompt> prompts;
  std::map<int64_t, bool> has_ids, has_logits;
  for (const TensorView& t : file->tensors()) {
    const std::string name(t.name);
    if (!name.starts_with("prompt.")) continue;
    const std::string rest = name.substr(7);
    const size_t dot = rest.find('.');
    const auto index = parse_index(std::string_view(rest).substr(0, dot));
    if (dot == std::string::npos || !index) return reject(path, "malformed tensor name " + name);
    ReferencePrompt& p = prompts[*index];
    const std::string field = rest.substr(dot + 1);
    if (field == "input_ids") {
      D0_ASSIGN_OR_RETURN(p.input_ids, read_i64_1d(path, t));
      has_ids[*index] = true;
    } else if (field == "logits") {
      D0_ASSIGN_OR_RETURN(p.logits, read_f32_2d(path, t));
      has_logits[*index] = true;
    } else if (field == "final_norm") {
      D0_ASSIGN_OR_RETURN(FloatMatrix m, read_f32_2d(path, t));
      p.final_norm = std::move(m);
    } else if (field == "greedy_ids") {
      D0_ASSIGN_OR_RETURN(p.greedy_ids, read_i64_1d(path, t));
    } else if (field == "greedy_logits") {
      D0_ASSIGN_OR_RETURN(p.greedy_logits, read_f32_2d(path, t));
    } else if (field == "selection_ties") {
      D0_ASSIGN_OR_RETURN(p.selection_ties, read_i64_1d(path, t));
    } else if (field == "greedy_selection_ties") {
      D0_ASSIGN_OR_RETURN(p.greedy_selection_ties, read_i64_1d(path, t));
    } else if (field.starts_with("hidden.")) {
      const auto layer = parse_index(std::string_view(field).substr(7));
      if (!layer) return reject(path, "malformed tensor name " + name);
      D0_ASSIGN_OR_RETURN(p.hidden[*layer], read_f32_2d(path, t));
    } else {
      return reject(path, "unknown tensor " + name);
    }
  }
  int64_t expected = 0;
  for (auto& [i, p] : prompts) {
    if (i != expected)
      return reject(path, fmt::format("prompt indices are not contiguous: prompt.{} is missing", expected));
    if (!has_ids[i]) return reject(path, fmt::format("prompt.{}.input_ids is missing", i));
    if (!has_logits[i]) return reject(path, fmt::format("prompt.{}.logits is missing", i));
    dump.prompts.push_back(std::move(p));
    ++expected;
  }
  const Status st = validate_reference_dump(dump);
  if (!st.is_ok()) return reject(path, st.message());
  return dump;
}

Status write_reference_dump(const ReferenceDump& dump, const std::string& path) {
  D0_RETURN_IF_ERROR(validate_reference_dump(dump));
  SafetensorsWriter w;
  for (const auto& [k, v] : dump.metadata) w.set_metadata(k, v);
  w.set_metadata("format", kReferenceFormat);
  auto matrix = [&](const std::string& name, const FloatMatrix& m) {
    return w.add(tensor_f32(name, {m.rows, m.cols}, m.data));
  };
  for (size_t i = 0; i < dump.prompts.size(); ++i) {
    const ReferencePrompt& p = dump.prompts[i];
    const std::string pre = fmt::format("prompt.{}.", i);
    D0_RETURN_IF_ERROR(
        w.add(tensor_i64(pre + "input_ids", {static_cast<int64_t>(p.input_ids.size())}, p.input_ids)));
    D0_RETURN_IF_ERROR(matrix(pre + "logits", p.logits));
    for (const auto& [l, m] : p.hidden) D0_RETURN_IF_ERROR(matrix(fmt::format("{}hidden.{}", pre, l), m));
    if (p.final_norm) D0_RETURN_IF_ERROR(matrix(pre + "final_norm", *p.final_norm));
    if (!p.greedy_ids.empty()) {
      D0_RETURN_IF_ERROR(
          w.add(tensor_i64(pre + "greedy_ids", {static_cast<int64_t>(p.greedy_ids.size())}, p.greedy_ids)));
      D0_RETURN_IF_ERROR(matrix(pre + "greedy_logits", p.greedy_logits));
    }
    auto flags = [&](const std::string& name, const std::vector<int64_t>& v) {
      return v.empty() ? Status::ok() : w.add(tensor_i64(pre + name, {static_cast<int64_t>(v.size())}, v));
    };
    D0_RETURN_IF_ERROR(flags("selection_ties", p.selection_ties));
    D0_RETURN_IF_ERROR(flags("greedy_selection_ties", p.greedy_selection_ties));
  }
  return w.write(path);
}

}  // namespace day0
