#pragma once
// The reference dump format `day0-reference/1` (a contract: other tools write these files too).
// A safetensors file whose __metadata__ holds format = "day0-reference/1", producer, version and dtype,
// and for prompts i = 0, 1, ... (contiguous):
//   prompt.<i>.input_ids      I64 [T]
//   prompt.<i>.logits         F32 [T, vocab]
//   prompt.<i>.hidden.<l>     F32 [T, hidden]   output of decoder layer l (0-based), optional per layer;
//                                                [T, n * hidden] for n hyper-connected streams, side by side
//   prompt.<i>.final_norm     F32 [T, hidden]   optional
// Our own extension, optional (the vLLM-style generation check uses it when present):
//   prompt.<i>.greedy_ids     I64 [N]           greedy continuation of the prompt
//   prompt.<i>.greedy_logits  F32 [N, vocab]    logits each greedy token was chosen from
//   prompt.<i>.selection_ties         I64 [T]   1 where an indexer's top-k selection of that row tied
//   prompt.<i>.greedy_selection_ties  I64 [N]   1 where the row that gave greedy token s's logits tied
//     (an engine's dump of a sparse-attention model; `align` compares only the rows before a tie)
// Tensors whose names do not start with "prompt." are ignored; malformed prompt.* names, wrong
// dtypes or shapes and a missing or foreign format are rejected with a message naming the problem.
// A dump of day0's own engine (`day0 run --dump`) also records the settings that shaped it, so that
// `day0 align` can repeat them: dtype (activations), kv_dtype, backend, mla (MLA models), tp, ep and,
// under EP, moe_combine, dp_attention, comm_overlap. Other tools' dumps have no kv_dtype.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "day0/align/float_matrix.h"
#include "day0/core/status.h"

namespace day0 {

inline constexpr const char* kReferenceFormat = "day0-reference/1";

struct ReferencePrompt {
  std::vector<int64_t> input_ids;
  FloatMatrix logits;                     // [T, vocab]
  std::map<int64_t, FloatMatrix> hidden;  // layer -> [T, hidden] ([T, n * hidden]: n streams)
  std::optional<FloatMatrix> final_norm;  // [T, hidden]
  std::vector<int64_t> greedy_ids;        // [N] (may be empty)
  FloatMatrix greedy_logits;              // [N, vocab]
  // Rows / greedy steps whose sparse-attention selection tied (0/1), or empty when not recorded.
  std::vector<int64_t> selection_ties;         // [T]
  std::vector<int64_t> greedy_selection_ties;  // [N]
};

struct ReferenceDump {
  std::map<std::string, std::string> metadata;  // format, producer, version, dtype, ...
  std::vector<ReferencePrompt> prompts;
  std::string producer() const { return value("producer"); }
  std::string version() const { return value("version"); }
  std::string dtype() const { return value("dtype"); }
  // Whether the dump records day0 engine settings (above): only an engine has a KV cache.
  bool has_engine_settings() const { return metadata.contains("kv_dtype"); }
  std::string value(const std::string& key) const {
    auto it = metadata.find(key);
    return it == metadata.end() ? std::string() : it->second;
  }
};

// Reads and validates a dump. InvalidArgument (with the reason) for a file that is not in the format.
Result<ReferenceDump> read_reference_dump(const std::string& path);
// Writes a dump; sets metadata "format". Shapes are checked (InvalidArgument on inconsistency).
Status write_reference_dump(const ReferenceDump& dump, const std::string& path);
// Checks the in-memory consistency a file must have (shared by reader and writer).
Status validate_reference_dump(const ReferenceDump& dump);

}  // namespace day0
