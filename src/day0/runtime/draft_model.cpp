#include "day0/runtime/draft_model.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

#include "day0/quant/quantize_checkpoint.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/speculative.h"

namespace day0 {

SelfDraft::~SelfDraft() {
  engine.reset();
  std::error_code ec;
  if (!temporary.empty()) std::filesystem::remove_all(temporary, ec);
}

Result<std::unique_ptr<SelfDraft>> open_self_draft(const LoadedModel& target, const std::string& draft_folder,
                                                   Backend& backend, EngineOptions options) {
  auto draft = std::make_unique<SelfDraft>();
  std::string folder = draft_folder;
  if (folder.empty()) {
    // One folder per draft: a process may hold several (the server tests open one after another).
    static std::atomic<int> opened = 0;
    draft->temporary = std::filesystem::temp_directory_path() /
                       fmt::format("day0-self-int4-{}-{}", ::getpid(), opened.fetch_add(1));
    std::error_code ec;
    // The widest group that divides every projection's rows (SmolLM2's 576 columns take 64).
    Result<QuantizeResult> made = invalid_argument("no group size tried");
    for (const int64_t group : {128, 64, 32}) {
      std::filesystem::remove_all(draft->temporary, ec);
      QuantizeOptions q;
      q.bits = 4;
      q.group_size = group;
      made = quantize_checkpoint(target.folder, draft->temporary.string(), q);
      if (made.is_ok() || made.status().to_string().find("does not divide") == std::string::npos) break;
    }
    if (!made.is_ok())
      return made.status().with_context("--spec self-int4: quantizing the model to INT4 at load");
    folder = draft->temporary.string();
  }
  auto loaded = load_model(folder, load_options_for(ActivationPrecision::kBF16));
  if (!loaded.is_ok()) return loaded.status().with_context("--spec-draft " + folder);
  draft->model = std::move(loaded).value();
  D0_RETURN_IF_ERROR(check_draft_matches(target.spec, target.folder, draft->model.spec, folder));
  options.precision = ActivationPrecision::kBF16;
  auto engine = Engine::create(draft->model.spec, draft->model.weights, backend, options);
  if (!engine.is_ok()) return engine.status().with_context("--spec-draft " + folder);
  draft->engine = std::move(engine).value();
  return draft;
}

int64_t cut_back_draft_cache(Engine& draft, KvCache& cache, int64_t tokens) {
  if (tokens >= cache.length()) return cache.length();
  if (!cache.can_truncate(tokens)) {
    // A recurrent state goes back only to a saved point at or before `tokens`; the rest is fed again.
    int64_t to = 0;
    if (cache.checkpoint_tokens() >= 0 && cache.checkpoint_tokens() <= tokens) to = cache.checkpoint_tokens();
    if (cache.snapshot_tokens() >= 0 && cache.snapshot_tokens() <= tokens)
      to = std::max(to, cache.snapshot_tokens());
    tokens = to;
  }
  if (!cache.truncate(tokens).is_ok()) {
    cache = draft.new_cache();
    return 0;
  }
  return tokens;
}

Status draft_greedy_batch(Engine& draft, std::span<DraftAsk> asks, int64_t pool_blocks) {
  std::vector<std::vector<int32_t>> feeds(asks.size());
  std::vector<SequenceStep> batch;
  std::vector<size_t> in_batch;  // ask of each batch entry
  std::vector<bool> drafting(asks.size(), false);
  int64_t positions = 0;
  int64_t claimed = 0;  // blocks the asks admitted so far may take
  for (size_t a = 0; a < asks.size(); ++a) {
    DraftAsk& ask = asks[a];
    ask.drafts.clear();
    ask.pool_full = false;
    if (ask.k <= 0 || ask.history.empty()) continue;
    DraftCache& st = *ask.state;
    if (!st.cache) st.cache.emplace(draft.new_cache());
    // Keep the prefix the cache shares with the history, short of its last token: its logits give the
    // first draft.
    size_t common = 0;
    while (common < st.fed.size() && common + 1 < ask.history.size() && st.fed[common] == ask.history[common])
      ++common;
    st.fed.resize(static_cast<size_t>(cut_back_draft_cache(draft, *st.cache, static_cast<int64_t>(common))));
    feeds[a].assign(ask.history.begin() + static_cast<std::ptrdiff_t>(st.fed.size()), ask.history.end());
    if (pool_blocks > 0) {
      // The feed, then k - 1 drafts fed back: every row this call may append to the cache.
      const int64_t need = st.cache->blocks_needed(static_cast<int64_t>(feeds[a].size()) + ask.k - 1);
      if (draft.kv_pool().blocks_allocated() + claimed + need > pool_blocks) {
        // No room: this ask waits, and what it holds goes back to the others.
        st.reset();
        ask.pool_full = true;
        continue;
      }
      claimed += need;
    }
    drafting[a] = true;
    positions = std::max(positions, ask.k);
  }
  SamplingParams greedy;
  for (int64_t i = 0; i < positions; ++i) {
    batch.clear();
    in_batch.clear();
    for (size_t a = 0; a < asks.size(); ++a) {
      if (!drafting[a] || asks[a].k <= i) continue;
      batch.push_back({&*asks[a].state->cache, feeds[a]});
      in_batch.push_back(a);
    }
    auto logits = draft.forward(batch, true);  // [asks in this call, vocab]
    if (!logits.is_ok()) {
      for (DraftAsk& ask : asks) {
        ask.drafts.clear();
        ask.state->reset();
      }
      return logits.status().with_context(fmt::format("draft position {}", i + 1));
    }
    for (size_t b = 0; b < in_batch.size(); ++b) {
      DraftAsk& ask = asks[in_batch[b]];
      DraftCache& st = *ask.state;
      std::vector<int32_t>& feed = feeds[in_batch[b]];
      st.fed.insert(st.fed.end(), feed.begin(), feed.end());
      // The accepted history ends here: the next call most likely goes back to this point.
      if (i == 0 && st.cache->recurrent_model()) st.cache->checkpoint();
      ask.drafts.push_back(pick_token(draft.backend(), logits->row_span(static_cast<int64_t>(b)), greedy, 0));
      feed.assign(1, ask.drafts.back());
    }
  }
  return Status::ok();
}

}  // namespace day0
