#include "spec_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

namespace day0::cli {

DraftSource SpecFlags::draft_source() const {
  if (source == draft_source_name(DraftSource::kNgram)) return DraftSource::kNgram;
  if (source == draft_source_name(DraftSource::kSelfInt4)) return DraftSource::kSelfInt4;
  if (source == draft_source_name(DraftSource::kMtp)) return DraftSource::kMtp;
  return DraftSource::kNone;
}

void add_spec_flags(CLI::App& app, SpecFlags& flags) {
  app.add_option("--spec", flags.source,
                 "speculative decoding (output identical to plain decoding): none (default), ngram "
                 "(drafts copied from the prompt and the output so far), self-int4 (the model's INT4 copy "
                 "drafts greedily: the --spec-draft folder, or quantized at load); mtp (the checkpoint's own "
                 "multi-token-prediction layers draft greedily: DeepSeek-V3's and V4's layouts)")
      ->check(CLI::IsMember({"none", "ngram", "self-int4", "mtp"}));
  flags.tokens_option =
      app.add_option(
             "--spec-tokens", flags.tokens,
             fmt::format("with --spec: draft tokens verified per step, 1..{} (default 4)", kMaxSpecTokens))
          ->check(CLI::Range(int64_t{1}, kMaxSpecTokens));
  app.add_option("--spec-draft", flags.draft,
                 "with --spec self-int4: the draft folder, made by `day0 quantize MODEL --to int4 --out "
                 "DIR` (same tokenizer; default: quantize the model at load into a temporary folder)");
}

Status check_spec_flags(const SpecFlags& f) {
  if (!f.draft.empty() && f.source != "self-int4")
    return invalid_argument(fmt::format("--spec-draft needs --spec self-int4, found --spec {}", f.source));
  if (f.tokens_given() && f.source == "none")
    return invalid_argument("--spec-tokens needs --spec ngram or --spec self-int4, found --spec none");
  return Status::ok();
}

std::string spec_summary(const SpecStats& st) {
  std::vector<std::string> by_position;
  for (size_t i = 0; i < st.position_drafted.size(); ++i) {
    by_position.push_back(st.position_drafted[i] > 0
                              ? fmt::format("{:.0f}%", 100.0 * static_cast<double>(st.position_accepted[i]) /
                                                           static_cast<double>(st.position_drafted[i]))
                              : "-");
  }
  return fmt::format(
      "{} of {} drafts accepted ({:.1f}%), {:.2f} accepted per verification step ({} steps), by position {}",
      st.accepted, st.drafted, 100 * st.acceptance_rate(), st.mean_accepted_per_step(), st.verify_steps,
      fmt::join(by_position, " "));
}

}  // namespace day0::cli
