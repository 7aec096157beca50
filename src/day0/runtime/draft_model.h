#pragma once
// The draft model of `--spec self-int4`: the target's INT4 copy, opened once for `run`, `serve` and
// `bench`, and greedy drafting from it for many sequences at once (serve's continuous batching): every
// sequence keeps its own cache on the draft engine, brought in step with its history (accepted and
// rejected drafts) at each call, and draft position i of every sequence runs in one forward call.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_loader.h"

namespace day0 {

// The INT4 copy and an engine over it. A copy quantized at load lives in a temporary folder removed
// with this object.
struct SelfDraft {
  LoadedModel model;
  std::unique_ptr<Engine> engine;
  std::filesystem::path temporary;  // empty: the draft came from a folder
  SelfDraft() = default;
  SelfDraft(const SelfDraft&) = delete;
  SelfDraft& operator=(const SelfDraft&) = delete;
  ~SelfDraft();
};

// Opens the draft of `target`: `draft_folder` (made by `day0 quantize --to int4`), or, when empty, the
// target quantized to INT4 now (the widest group of 128, 64, 32 that divides every projection). The
// draft runs with BF16 activations on the integer kernels whatever `options` say (drafting fast is its
// point), on `backend`, which must outlive it. InvalidArgument when its vocabulary or tokenizer differs
// from the target's (check_draft_matches).
Result<std::unique_ptr<SelfDraft>> open_self_draft(const LoadedModel& target, const std::string& draft_folder,
                                                   Backend& backend, EngineOptions options);

// Cuts `cache` back to at most `tokens` (a recurrent state goes back only to its checkpoint or a
// whole-block snapshot at or before `tokens`, else to 0; the rest is fed again) and returns the length
// it now holds.
int64_t cut_back_draft_cache(Engine& draft, KvCache& cache, int64_t tokens);

// One sequence's state on the draft engine: its cache (made at its first draft) and the tokens it holds.
struct DraftCache {
  std::optional<KvCache> cache;
  std::vector<int32_t> fed;
  void reset() {
    cache.reset();
    fed.clear();
  }
};

// A sequence asking for drafts: its state, every token known so far (the last not yet fed to the
// target) and how many drafts it wants (>= 1).
struct DraftAsk {
  DraftCache* state = nullptr;
  std::span<const int32_t> history;
  int64_t k = 0;
  std::vector<int32_t> drafts;  // out: k greedy tokens
  bool pool_full = false;       // out: no drafts, the pool's capacity had no room for them (state reset)
};

// Greedy drafts for every ask, in max(k) forward calls on `draft`: the first feeds each sequence's
// tokens its cache lacks (at least the history's last, whose logits give the first draft), each later
// one the previous draft of the sequences that want more. On a failed call every ask's state is reset
// (its cache rebuilt at the next call) and the error returned; no ask has drafts then.
// `pool_blocks` > 0 bounds the draft pool's allocated blocks: an ask whose rows would take it past that
// (blocks_needed, an over-estimate) gets no drafts, its state reset so that its blocks go back and the
// cache is rebuilt at a later call (`pool_full`); 0: the pool grows as the caches need.
Status draft_greedy_batch(Engine& draft, std::span<DraftAsk> asks, int64_t pool_blocks = 0);

}  // namespace day0
