#include "day0/align/align_runner.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace day0 {

AlignThresholds default_thresholds(ActivationPrecision precision) {
  AlignThresholds t;
  if (precision == ActivationPrecision::kBF16) {
    // BF16 activations against a float32 reference. Set so that transformers' own bf16 run passes on
    // every golden miniature (README `### align` lists the measurements): dense models stay near
    // KL 1e-4, but a near-tie in MoE routing that flips under bf16 moves single positions by KL ~0.3
    // and hidden elements by ~2.5 (transformers' bf16 run of one golden MoE miniature: KL mean
    // 1.5e-2, max 0.31).
    t.max_abs_err_of_range = 0.35;
    t.kl_mean = 2e-2;
    t.kl_max = 0.5;
    t.min_same_top1 = 0.9;
    t.max_ppl_ratio_dev = 0.05;
    t.layers.abs_fail = 4.0;
  }
  return t;
}

namespace {

FloatMatrix copy_rows(const FloatMatrix& m, int64_t r0, int64_t n) {
  FloatMatrix out(n, m.cols);
  std::copy(m.data.begin() + r0 * m.cols, m.data.begin() + (r0 + n) * m.cols, out.data.begin());
  return out;
}

// The first flagged index of `flags`, or n when none is (or none were recorded).
int64_t first_tie(const std::vector<int64_t>& flags, int64_t n) {
  for (size_t i = 0; i < flags.size() && static_cast<int64_t>(i) < n; ++i) {
    if (flags[i] != 0) return static_cast<int64_t>(i);
  }
  return n;
}

// The first `n` tokens and logits rows of a greedy continuation.
std::pair<std::vector<int64_t>, FloatMatrix> greedy_prefix(const ReferencePrompt& p, int64_t n) {
  return {std::vector<int64_t>(p.greedy_ids.begin(), p.greedy_ids.begin() + n),
          copy_rows(p.greedy_logits, 0, n)};
}

}  // namespace

Result<ReferencePrompt> run_prompt(Engine& engine, std::span<const int64_t> ids, int64_t greedy_steps,
                                   bool hidden) {
  ReferencePrompt p;
  p.input_ids.assign(ids.begin(), ids.end());
  std::vector<int32_t> tokens(ids.begin(), ids.end());
  KvCache cache = engine.new_cache();
  ForwardCapture capture;
  capture.want_hidden = hidden;
  capture.want_final_norm = hidden;
  // Ties are recorded where every layer runs here (a pipeline stage sees only its own).
  const ShardRange held = engine.held_layers();
  capture.want_selection_ties = held.begin == 0 && held.end == engine.spec().n_layers;
  const SequenceStep step{&cache, tokens};
  D0_ASSIGN_OR_RETURN(const ConstMatrix logits, engine.forward(std::span(&step, 1), false, &capture));
  p.logits = copy_matrix(logits);
  // Empty when no layer selected keys with an indexer: then nothing is recorded.
  const bool ties = !capture.selection_ties.empty();
  p.selection_ties.assign(capture.selection_ties.begin(), capture.selection_ties.end());
  if (hidden) {
    for (size_t l = 0; l < capture.hidden.size(); ++l)
      p.hidden[static_cast<int64_t>(l)] = std::move(capture.hidden[l]);
    p.final_norm = std::move(capture.final_norm);
  }
  if (greedy_steps <= 0) return p;
  p.greedy_logits = FloatMatrix(greedy_steps, p.logits.cols);
  FloatMatrix last = copy_rows(p.logits, p.logits.rows - 1, 1);
  int64_t last_tie = ties ? p.selection_ties.back() : 0;  // of the row that gave `last`
  for (int64_t s = 0; s < greedy_steps; ++s) {
    std::copy(last.data.begin(), last.data.end(), p.greedy_logits.row(s).begin());
    if (ties) p.greedy_selection_ties.push_back(last_tie);
    const int32_t next = static_cast<int32_t>(top_n_indices(last.row(0), 1).front());
    p.greedy_ids.push_back(next);
    if (s + 1 == greedy_steps) break;
    const SequenceStep decode{&cache, std::span<const int32_t>(&next, 1)};
    ForwardCapture step_ties;
    step_ties.want_selection_ties = ties;
    D0_ASSIGN_OR_RETURN(const ConstMatrix row, engine.forward(std::span(&decode, 1), true, &step_ties));
    last = copy_matrix(row);
    last_tie = step_ties.selection_ties.empty() ? 0 : step_ties.selection_ties.front();
  }
  return p;
}

Result<ReferenceDump> run_reference_prompts(Engine& engine, const ReferenceDump& ref,
                                            const std::string& producer) {
  ReferenceDump out;
  out.metadata["producer"] = producer;
  out.metadata["version"] = DAY0_VERSION;
  out.metadata["dtype"] = precision_name(engine.options().precision);
  out.metadata["kv_dtype"] = kv_dtype_name(engine.options().kv_dtype);
  for (const ReferencePrompt& p : ref.prompts) {
    const bool hidden = !p.hidden.empty() || p.final_norm.has_value();
    D0_ASSIGN_OR_RETURN(ReferencePrompt mine,
                        run_prompt(engine, p.input_ids, static_cast<int64_t>(p.greedy_ids.size()), hidden));
    out.prompts.push_back(std::move(mine));
  }
  return out;
}

AlignReport compare_dumps(const ReferenceDump& ref, const ReferenceDump& engine, const AlignThresholds& th) {
  D0_CHECK_MSG(ref.prompts.size() == engine.prompts.size(), "compare_dumps: different prompt counts");
  AlignReport r;
  r.thresholds = th;
  r.prompts = static_cast<int64_t>(ref.prompts.size());
  r.reference = fmt::format("{} ({}, {})", ref.producer(), ref.version(), ref.dtype());
  LogitAccumulator logits;
  LayerAccumulator layers(th.layers);
  int64_t compared_rows = 0;
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    const ReferencePrompt& a = ref.prompts[i];
    const ReferencePrompt& b = engine.prompts[i];
    // Either side's first tied selection ends what can be compared (SelectionTieCut).
    const auto t = static_cast<int64_t>(a.input_ids.size());
    const int64_t rows = std::min(first_tie(a.selection_ties, t), first_tie(b.selection_ties, t));
    const auto n = static_cast<int64_t>(std::min(a.greedy_ids.size(), b.greedy_ids.size()));
    const int64_t steps =
        rows < t ? 0 : std::min(first_tie(a.greedy_selection_ties, n), first_tie(b.greedy_selection_ties, n));
    if (rows < t || steps < n) {
      r.tie_cuts.push_back(
          {.prompt = static_cast<int64_t>(i), .rows = rows, .of_rows = t, .steps = steps, .of_steps = n});
    }
    compared_rows += rows;
    auto part = [&](const FloatMatrix& m) { return rows == t ? m : copy_rows(m, 0, rows); };
    if (rows > 0) {
      logits.add_prompt(part(a.logits), part(b.logits),
                        std::span(a.input_ids).first(static_cast<size_t>(rows)));
      for (const auto& [l, m] : a.hidden) {
        auto it = b.hidden.find(l);
        if (it != b.hidden.end()) layers.add(fmt::format("layer {}", l), l, part(m), part(it->second));
      }
      if (a.final_norm && b.final_norm) {
        layers.add("final_norm", static_cast<int64_t>(b.hidden.size()), part(*a.final_norm),
                   part(*b.final_norm));
      }
    }
    if (!a.greedy_ids.empty() && !b.greedy_ids.empty()) {
      const auto [a_ids, a_logits] =
          greedy_prefix(a, steps == n ? static_cast<int64_t>(a.greedy_ids.size()) : steps);
      const auto [b_ids, b_logits] =
          greedy_prefix(b, steps == n ? static_cast<int64_t>(b.greedy_ids.size()) : steps);
      r.greedy.push_back(compare_greedy(a_ids, a_logits, b_ids, b_logits, th.greedy_top_n));
    }
  }
  r.logits = logits.summary();
  r.layers = layers.report();

  const LogitSummary& s = r.logits;
  auto fail = [&](std::string text) { r.failures.push_back(std::move(text)); };
  if (compared_rows == 0) {
    fail("nothing compared: every prompt's first row has a tied sparse-attention selection");
  }
  const double abs_limit = th.max_abs_err_of_range * s.logit_range;
  if (s.max_abs_err > abs_limit) {
    fail(fmt::format("logits max abs error {:.3g} > {:.3g} ({:.3g} of the logit range {:.4g})", s.max_abs_err,
                     abs_limit, th.max_abs_err_of_range, s.logit_range));
  }
  if (s.kl_mean > th.kl_mean) fail(fmt::format("KL mean {:.3g} > {:.3g}", s.kl_mean, th.kl_mean));
  if (s.kl_max > th.kl_max) fail(fmt::format("KL max {:.3g} > {:.3g}", s.kl_max, th.kl_max));
  if (s.same_top1 < th.min_same_top1) {
    fail(fmt::format("same top-1 {:.2f}% < {:.2f}%", 100 * s.same_top1, 100 * th.min_same_top1));
  }
  if (s.predicted_positions > 0 && std::fabs(s.ppl_ratio - 1) > th.max_ppl_ratio_dev) {
    fail(fmt::format("perplexity ratio {:.6f} off 1 by more than {:.3g}", s.ppl_ratio, th.max_ppl_ratio_dev));
  }
  if (r.layers.first_failing >= 0) {
    fail(fmt::format("layer-wise: first failing row is {} (cosine {:.6f}, max abs err {:.3g})",
                     r.layers.first_failing_name(),
                     r.layers.rows[static_cast<size_t>(r.layers.first_failing)].compare.cosine,
                     r.layers.rows[static_cast<size_t>(r.layers.first_failing)].compare.max_abs_err));
  }
  for (size_t i = 0; i < r.greedy.size(); ++i) {
    const GreedyCheck& g = r.greedy[i];
    if (!g.pass) {
      fail(
          fmt::format("greedy prompt {}: diverges at step {} (reference {} / engine {}), ranks {} and {} not "
                      "within top-{}",
                      i, g.first_divergence, g.ref_token, g.engine_token, g.engine_token_rank_in_ref,
                      g.ref_token_rank_in_engine, th.greedy_top_n));
    }
  }
  return r;
}

std::string align_setting_text(const AlignSetting& setting) {
  std::string name = setting.key, flag = "--" + setting.key;
  std::replace(name.begin(), name.end(), '_', ' ');
  std::replace(flag.begin(), flag.end(), '_', '-');
  const std::string source = setting.source == "flag"   ? flag
                             : setting.source == "dump" ? std::string("from the dump's settings")
                                                        : setting.source;
  return fmt::format("{} {} ({})", name, setting.value, source);
}

nlohmann::json align_report_json(const AlignReport& r) {
  using nlohmann::json;
  const LogitSummary& s = r.logits;
  json j;
  j["model"] = r.model;
  j["backend"] = r.backend;
  j["precision"] = r.precision;
  j["kv_dtype"] = r.kv_dtype;
  j["reference"] = r.reference;
  j["settings_from_dump"] = r.settings_from_dump;
  json settings = json::object();
  for (const AlignSetting& a : r.settings) {
    settings[a.key] = {{"value", a.value}, {"source", a.source}, {"text", align_setting_text(a)}};
  }
  j["settings"] = settings;
  j["warnings"] = r.warnings;
  j["prompts"] = r.prompts;
  j["pass"] = r.pass();
  j["failures"] = r.failures;
  j["logits"] = {{"positions", s.positions},
                 {"max_abs_err", s.max_abs_err},
                 {"max_rel_err", s.max_rel_err},
                 {"logit_range", s.logit_range},
                 {"max_abs_err_of_range", s.logit_range > 0 ? s.max_abs_err / s.logit_range : 0.0},
                 {"min_cosine", s.min_cosine},
                 {"mean_cosine", s.mean_cosine},
                 {"kl_mean", s.kl_mean},
                 {"kl_median", s.kl_median},
                 {"kl_p99", s.kl_p99},
                 {"kl_max", s.kl_max},
                 {"rms_delta_p", s.rms_delta_p},
                 {"same_top1", s.same_top1},
                 {"top5_overlap", s.top5_overlap},
                 {"ppl_reference", s.ppl_ref},
                 {"ppl_engine", s.ppl_engine},
                 {"ppl_ratio", s.ppl_ratio}};
  json rows = json::array();
  for (const LayerRow& row : r.layers.rows) {
    const TensorCompare& c = row.compare;
    rows.push_back({{"name", row.name},
                    {"cosine", c.cosine},
                    {"euclidean", c.euclidean},
                    {"max_abs_err", c.max_abs_err},
                    {"max_rel_err", c.max_rel_err},
                    {"within_0.1pct", c.within_0p1},
                    {"within_0.5pct", c.within_0p5},
                    {"pass", row.pass}});
  }
  j["layers"] = rows;
  j["first_failing_layer"] = r.layers.first_failing < 0 ? json(nullptr) : json(r.layers.first_failing_name());
  json greedy = json::array();
  for (const GreedyCheck& g : r.greedy) {
    greedy.push_back({{"compared", g.compared},
                      {"first_divergence", g.first_divergence},
                      {"reference_token", g.ref_token},
                      {"engine_token", g.engine_token},
                      {"engine_token_rank_in_reference", g.engine_token_rank_in_ref},
                      {"reference_token_rank_in_engine", g.ref_token_rank_in_engine},
                      {"pass", g.pass}});
  }
  j["greedy"] = greedy;
  json cuts = json::array();
  for (const SelectionTieCut& c : r.tie_cuts) {
    cuts.push_back({{"prompt", c.prompt},
                    {"rows_compared", c.rows},
                    {"rows", c.of_rows},
                    {"greedy_steps_compared", c.steps},
                    {"greedy_steps", c.of_steps}});
  }
  j["selection_tie_cuts"] = cuts;
  j["thresholds"] = {{"max_abs_err_of_range", r.thresholds.max_abs_err_of_range},
                     {"kl_mean", r.thresholds.kl_mean},
                     {"kl_max", r.thresholds.kl_max},
                     {"min_same_top1", r.thresholds.min_same_top1},
                     {"max_ppl_ratio_dev", r.thresholds.max_ppl_ratio_dev},
                     {"greedy_top_n", r.thresholds.greedy_top_n}};
  return j;
}

std::string align_report_text(const AlignReport& r) {
  const LogitSummary& s = r.logits;
  std::string out;
  out += fmt::format(
      "model      {}\nbackend    {} ({} activations, {} KV cache)\nreference  {}\nprompts    {} ({} "
      "positions)\n",
      r.model, r.backend, r.precision, r.kv_dtype.empty() ? "?" : r.kv_dtype, r.reference, r.prompts,
      s.positions);
  // Where the settings came from, before the figures: a day0 dump's settings are repeated.
  if (r.settings_from_dump) {
    std::vector<std::string> items;
    for (const AlignSetting& a : r.settings) items.push_back(align_setting_text(a));
    out += fmt::format("settings   {}\n", fmt::join(items, ", "));
  }
  for (const std::string& w : r.warnings) out += fmt::format("warning    {}\n", w);
  out += "\n";
  out += "logits\n";
  auto line = [&](const char* name, const std::string& value) {
    out += fmt::format("  {:<22} {}\n", name, value);
  };
  line("max abs error", fmt::format("{:.3e}  ({:.2e} of the logit range {:.4g})", s.max_abs_err,
                                    s.logit_range > 0 ? s.max_abs_err / s.logit_range : 0.0, s.logit_range));
  line("max rel error", fmt::format("{:.3e}", s.max_rel_err));
  line("cosine min / mean", fmt::format("{:.8f} / {:.8f}", s.min_cosine, s.mean_cosine));
  line("KL mean / median", fmt::format("{:.3e} / {:.3e}", s.kl_mean, s.kl_median));
  line("KL p99 / max", fmt::format("{:.3e} / {:.3e}", s.kl_p99, s.kl_max));
  line("RMS delta-p", fmt::format("{:.3e}", s.rms_delta_p));
  line("same top-1", fmt::format("{:.2f}%", 100 * s.same_top1));
  line("top-5 overlap", fmt::format("{:.2f}%", 100 * s.top5_overlap));
  line("perplexity ref / eng",
       fmt::format("{:.6g} / {:.6g}  (ratio {:.6f})", s.ppl_ref, s.ppl_engine, s.ppl_ratio));
  if (!r.layers.rows.empty()) {
    out += fmt::format(
        "\nlayer-wise (fail: cosine < {} and MaxAbsErr > {}, or cosine < {}, or MaxAbsErr > {})\n",
        r.thresholds.layers.cosine_warn, r.thresholds.layers.abs_floor, r.thresholds.layers.cosine_fail,
        r.thresholds.layers.abs_fail);
    out += fmt::format("  {:<12} {:>12} {:>11} {:>11} {:>14} {:>9} {:>9}  {}\n", "layer", "Cosine", "EucDist",
                       "MaxAbsErr", "MaxRelativeErr", "<0.1%", "<0.5%", "result");
    for (const LayerRow& row : r.layers.rows) {
      const TensorCompare& c = row.compare;
      out += fmt::format("  {:<12} {:>12.8f} {:>11.3e} {:>11.3e} {:>14.3e} {:>8.2f}% {:>8.2f}%  {}\n",
                         row.name, c.cosine, c.euclidean, c.max_abs_err, c.max_rel_err, 100 * c.within_0p1,
                         100 * c.within_0p5, row.pass ? "pass" : "FAIL");
    }
    if (r.layers.first_failing >= 0)
      out += fmt::format("  first failing: {}\n", r.layers.first_failing_name());
  }
  if (!r.greedy.empty()) {
    out += fmt::format("\ngreedy continuations (top-{} rule at the first divergence)\n",
                       r.thresholds.greedy_top_n);
    for (size_t i = 0; i < r.greedy.size(); ++i) {
      const GreedyCheck& g = r.greedy[i];
      if (g.first_divergence < 0) {
        out += fmt::format("  prompt {:<3} identical over {} tokens\n", i, g.compared);
      } else {
        out += fmt::format(
            "  prompt {:<3} diverges at step {}: ref {} (rank {} in engine), engine {} (rank {} in ref)  "
            "{}\n",
            i, g.first_divergence, g.ref_token, g.ref_token_rank_in_engine, g.engine_token,
            g.engine_token_rank_in_ref, g.pass ? "pass" : "FAIL");
      }
    }
  }
  if (!r.tie_cuts.empty()) {
    out +=
        "\nsparse-attention selection ties (the indexer's last pick and best left-out key score alike: a\n"
        "reference breaking ties another way attends elsewhere, so nothing from there on is compared)\n";
    for (const SelectionTieCut& c : r.tie_cuts) {
      if (c.rows < c.of_rows) {
        out += fmt::format("  prompt {:<3} row {} ties: compared rows 0..{} of {}, no greedy step\n",
                           c.prompt, c.rows, c.rows - 1, c.of_rows);
      } else {
        out += fmt::format("  prompt {:<3} greedy step {} ties: compared {} of {} greedy steps\n", c.prompt,
                           c.steps, c.steps, c.of_steps);
      }
    }
  }
  out += "\n";
  if (r.pass()) {
    out += "verdict: PASS\n";
  } else {
    out += "verdict: FAIL\n";
    for (const auto& f : r.failures) out += "  - " + f + "\n";
  }
  return out;
}

}  // namespace day0
