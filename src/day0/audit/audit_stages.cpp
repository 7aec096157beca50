#include "day0/audit/audit_stages.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "day0/audit/audit_session.h"
#include "day0/core/json_reader.h"
#include "day0/report/spot_check.h"
#include "day0/runtime/generate.h"
#include "day0/serve/bench_client.h"
#include "day0/serve/soak.h"
#include "day0/tokenizer/text_prompt.h"

namespace day0::audit {

namespace {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;
using report::StageResult;
using report::Verdict;

void mark_pass(StageResult& out, std::string summary) {
  out.verdict = Verdict::kPass;
  out.summary = std::move(summary);
}
void mark_fail(StageResult& out, std::string summary, std::string reason) {
  out.verdict = Verdict::kFail;
  out.summary = std::move(summary);
  out.reason = std::move(reason);
}
void mark_skip(StageResult& out, std::string reason) {
  out.verdict = Verdict::kSkipped;
  out.reason = std::move(reason);
}

struct AuditConversation {
  std::string id;
  OJson messages;
};

// Conversations of the tokens stage (the logprob stage uses the first three): a system prompt,
// several turns, scripts beyond ASCII, and the model's own special tokens written in a message.
std::vector<AuditConversation> audit_conversations(const tokenizer::Tokenizer& tok) {
  const auto& sp = tok.special_tokens();
  const std::string specials =
      (sp.bos.empty() ? std::string() : sp.bos + " ") + (sp.eos.empty() ? "" : sp.eos);
  return {
      {"system",
       OJson::array(
           {{{"role", "system"}, {"content", "You are a concise assistant. Answer in one sentence."}},
            {{"role", "user"}, {"content", "What is the boiling point of water at sea level?"}}})},
      {"multi-turn",
       OJson::array({{{"role", "user"}, {"content", "Name a prime number between 10 and 20."}},
                     {{"role", "assistant"}, {"content", "13 is a prime number between 10 and 20."}},
                     {{"role", "user"}, {"content", "And one between 20 and 30?"}}})},
      {"multilingual", OJson::array({{{"role", "user"},
                                      {"content",
                                       "Traduis en français : « good morning ». 日本語で「ありがとう」は？ "
                                       "Привет, мир! 🙂"}}})},
      {"special-tokens",
       OJson::array({{{"role", "user"},
                      {"content", "Repeat these markers exactly: " + specials + " <|im_end|> [INST]"}}})},
  };
}

std::string json_quoted(const std::string& text, size_t max_chars = 80) {
  std::string t = text.size() > max_chars ? text.substr(0, max_chars) + "…" : text;
  return Json(t).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The first position where two id sequences differ, both tokens shown; "" when equal.
std::string first_difference(const AuditSession& s, const std::vector<int32_t>& target,
                             const std::vector<int32_t>& ref) {
  const size_t n = std::min(target.size(), ref.size());
  for (size_t i = 0; i < n; ++i) {
    if (target[i] == ref[i]) continue;
    std::string diff =
        fmt::format("position {}: target {} vs Day0 {}", i, s.token_text(target[i]), s.token_text(ref[i]));
    // One token more that is the BOS: the template writes BOS and the server adds its own.
    const auto bos = s.tok->special_tokens().bos_id;
    if (bos && target[i] == *bos && target.size() == ref.size() + 1 &&
        std::equal(target.begin() + static_cast<std::ptrdiff_t>(i) + 1, target.end(),
                   ref.begin() + static_cast<std::ptrdiff_t>(i)))
      diff += " (a second BOS)";
    return diff;
  }
  if (target.size() == ref.size()) return "";
  if (target.size() > n)
    return fmt::format("position {}: target has {} more (first {}), Day0 ends", n, target.size() - n,
                       s.token_text(target[n]));
  return fmt::format("position {}: target ends, Day0 has {} more (first {})", n, ref.size() - n,
                     s.token_text(ref[n]));
}

// The target's ids of a conversation: vLLM / SGLang's POST /tokenize with messages, else
// llama-server's /apply-template then /tokenize. nullopt (with `why`) when neither is offered.
std::optional<std::vector<int32_t>> target_ids(AuditSession& s, const OJson& messages, std::string& form,
                                               std::string& target_text, std::string& why) {
  const Json msgs = Json::parse(messages.dump());
  if (form.empty() || form == "messages") {
    Exchange ex =
        s.post("/tokenize", {{"model", s.served_model}, {"messages", msgs}, {"add_generation_prompt", true}});
    if (ex.ok()) {
      auto ids = parse_tokenize_reply(ex.body);
      // llama-server answers this form with no tokens (it reads "content" only).
      if (ids.is_ok() && !ids->empty()) {
        form = "messages";
        return *ids;
      }
    }
    if (form == "messages") {
      why = "POST /tokenize: " + ex.describe();
      return std::nullopt;
    }
    why = "POST /tokenize with messages: " + ex.describe();
  }
  Exchange applied = s.post("/apply-template", {{"messages", msgs}});
  if (!applied.ok()) {
    why += "; POST /apply-template: " + applied.describe();
    form = "none";
    return std::nullopt;
  }
  auto doc = parse_json_text(applied.body, "/apply-template", JsonLimits{kMaxReplyBytes, 16});
  if (!doc.is_ok() || !doc->is_object() || !doc->contains("prompt") || !(*doc)["prompt"].is_string()) {
    why += "; POST /apply-template: no \"prompt\" string";
    form = "none";
    return std::nullopt;
  }
  target_text = (*doc)["prompt"].get<std::string>();
  Exchange ex =
      s.post("/tokenize", {{"content", target_text}, {"add_special", true}, {"parse_special", true}});
  auto ids =
      ex.ok() ? parse_tokenize_reply(ex.body) : Result<std::vector<int32_t>>(invalid_argument(ex.describe()));
  if (!ids.is_ok()) {
    why += "; POST /tokenize with content: " + ids.status().message();
    form = "none";
    return std::nullopt;
  }
  form = "apply-template+content";
  return *ids;
}

std::string first_text_difference(const std::string& target, const std::string& ref,
                                  const char* target_name = "target", const char* ref_name = "Day0") {
  const size_t n = std::min(target.size(), ref.size());
  size_t i = 0;
  while (i < n && target[i] == ref[i]) ++i;
  if (i == n && target.size() == ref.size()) return "";
  const size_t from = i > 20 ? i - 20 : 0;
  return fmt::format("byte {}: {} …{} vs {} …{}", i, target_name, json_quoted(target.substr(from, 40)),
                     ref_name, json_quoted(ref.substr(from, 40)));
}

// Logprob entries fewer than the tokens a reply counts (usage): llama-server holds back a token whose
// bytes end inside a UTF-8 character and lists it with the next one — one entry with both tokens'
// bytes — so the text is whole and only the per-token log-probabilities are short. "" when the
// entries are as many as the tokens, or spell the reply's text (then `*short_by` says by how many);
// else why they do not (the text lost, not only its entries).
std::string logprob_entries_against_text(const ReplyChoice& c, std::optional<int64_t> usage_tokens,
                                         const char* reply_name, int64_t* short_by) {
  *short_by = 0;
  if (!c.has_logprobs || !usage_tokens || static_cast<int64_t>(c.steps.size()) >= *usage_tokens) return "";
  // Spaces aside: a server that decodes each token alone drops a SentencePiece token's leading space
  // from its entry (day0 serve does), which loses no text.
  auto without_spaces = [](std::string text) {
    std::erase(text, ' ');
    return text;
  };
  std::string spelled;
  for (const ReplyStep& step : c.steps) spelled += step.chosen.bytes.value_or(step.chosen.text);
  const std::string diff = first_text_difference(without_spaces(spelled), without_spaces(c.text),
                                                 "its logprob entries", "its text");
  if (!diff.empty())
    return fmt::format(
        "the {} reply has {} logprob entries for {} tokens (usage), and they spell another "
        "text (spaces aside) at {}",
        reply_name, c.steps.size(), *usage_tokens, diff);
  *short_by = *usage_tokens - static_cast<int64_t>(c.steps.size());
  return "";
}

}  // namespace

// ---- 1. tokens and template ------------------------------------------------------------------------

void run_tokens_stage(AuditSession& s, StageResult& out) {
  Json rows = Json::array();
  std::vector<std::string> problems;
  std::string form;  // which /tokenize the target offers, found on the first conversation
  std::string tokenize_note;
  for (const AuditConversation& c : audit_conversations(*s.tok)) {
    Json row = {{"id", c.id}};
    auto rendered = s.render(c.messages);
    if (!rendered.is_ok()) {
      problems.push_back(c.id + ": Day0 cannot render it: " + rendered.status().message());
      row["error"] = rendered.status().message();
      rows.push_back(row);
      continue;
    }
    row["day0_tokens"] = rendered->ids.size();
    Exchange ex = s.post("/v1/chat/completions", s.chat_body(c.messages, 1));
    std::optional<int64_t> counted;
    if (!ex.ok()) {
      problems.push_back(c.id + ": the target refused the conversation: " + ex.describe());
      row["error"] = ex.describe();
    } else if (auto reply = parse_reply(ex.body); !reply.is_ok()) {
      problems.push_back(c.id + ": " + reply.status().message());
    } else if (!reply->prompt_tokens) {
      problems.push_back(c.id + ": the reply has no usage.prompt_tokens");
    } else {
      counted = reply->prompt_tokens;
      row["target_tokens"] = *counted;
    }
    std::string why, target_text;
    auto ids = form == "none" ? std::nullopt : target_ids(s, c.messages, form, target_text, why);
    if (ids) {
      row["target_ids_match"] = *ids == rendered->ids;
      if (*ids != rendered->ids) {
        const std::string diff = first_difference(s, *ids, rendered->ids);
        row["first_difference"] = diff;
        problems.push_back(fmt::format("{}: the target's ids differ from Day0's at {}", c.id, diff));
      }
      if (!target_text.empty()) {
        const std::string tdiff = first_text_difference(target_text, rendered->text);
        if (!tdiff.empty()) row["template_text_difference"] = tdiff;
      }
    } else if (tokenize_note.empty()) {
      tokenize_note = why;
    }
    if (counted && *counted != static_cast<int64_t>(rendered->ids.size())) {
      std::string where =
          ids ? first_difference(s, *ids, rendered->ids) : "the target offers no /tokenize to show where";
      problems.push_back(fmt::format("{}: the target counts {} prompt tokens, Day0's template {} ({})", c.id,
                                     *counted, rendered->ids.size(), where));
    }
    rows.push_back(row);
  }
  out.evidence = {
      {"conversations", rows},
      {"tokenize", form == "none" || form.empty() ? Json("not offered: " + tokenize_note) : Json(form)}};
  const size_t n = rows.size();
  if (!problems.empty()) {
    std::string reason = problems.front();
    if (problems.size() > 1) reason += fmt::format(" (and {} more)", problems.size() - 1);
    mark_fail(out, fmt::format("{} of {} conversations differ", std::min(problems.size(), n), n), reason);
    out.evidence["problems"] = problems;
    return;
  }
  mark_pass(out, fmt::format("{} conversations: prompt token counts{} equal Day0's", n,
                             form == "none" || form.empty() ? "" : " and ids"));
}

// ---- 2. logprobs -----------------------------------------------------------------------------------

namespace {

struct Position {
  double kl = 0;
  double abs_dlogprob = 0;
  bool top1 = false;
  int64_t rank = 0;
};

// Per-position comparison of one reply against the reference, teacher-forced on the target's tokens.
struct Forced {
  std::vector<int32_t> ids;                       // per step: its id, -1 when unresolved
  std::vector<Position> positions;                // the resolved steps, in order
  std::vector<size_t> steps_of;                   // positions[k] is step steps_of[k]
  std::vector<std::vector<int32_t>> support_ids;  // positions[k]'s KL support: the target's top list
  FloatMatrix rows;                               // [steps, vocab] the reference's log-softmax rows
  int64_t unresolved = 0;
  int64_t support = 0;  // tokens in the target's top lists (the KL's support), summed
};

// KL(p || q) over `support`, both renormalised over it (log-probabilities given).
double support_kl(std::span<const int32_t> support, const std::function<double(int32_t)>& lp,
                  std::span<const float> q_row) {
  if (support.size() < 2) return 0;
  double zp = 0, zq = 0;
  for (int32_t id : support) {
    zp += std::exp(lp(id));
    zq += std::exp(static_cast<double>(q_row[id]));
  }
  double kl = 0;
  for (int32_t id : support) {
    const double p = std::exp(lp(id)) / zp;
    const double q = std::exp(static_cast<double>(q_row[id])) / zq;
    if (p > 0 && q > 0) kl += p * (std::log(p) - std::log(q));
  }
  return std::max(0.0, kl);
}

Result<Forced> force_reply(AuditSession& s, const std::vector<int32_t>& prompt,
                           const std::vector<ReplyStep>& steps) {
  Forced f;
  std::vector<int32_t> ids(steps.size(), -1);
  for (size_t i = 0; i < steps.size(); ++i) ids[i] = s.resolve(steps[i].chosen, {}).value_or(-1);
  // Two passes: a text several ids share is resolved by the reference row of its position, which
  // depends only on the tokens before it.
  for (int pass_no = 0; pass_no < 2; ++pass_no) {
    std::vector<int32_t> fed = ids;
    for (int32_t& id : fed)
      if (id < 0) id = 0;  // an unresolved token still needs a position
    D0_ASSIGN_OR_RETURN(f.rows, s.teacher_force(prompt, fed));
    bool changed = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      const int32_t id = s.resolve(steps[i].chosen, f.rows.row(static_cast<int64_t>(i))).value_or(-1);
      changed = changed || id != ids[i];
      ids[i] = id;
    }
    if (!changed) break;
  }
  f.ids = ids;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (ids[i] < 0) {
      ++f.unresolved;
      continue;
    }
    auto row = f.rows.row(static_cast<int64_t>(i));
    Position p;
    const float chosen = row[ids[i]];
    p.abs_dlogprob = std::abs(steps[i].chosen.logprob - chosen);
    for (float v : row) p.rank += v > chosen ? 1 : 0;
    p.top1 = p.rank == 0;
    // KL(target || reference) over the target's top list.
    std::vector<int32_t> support;
    std::unordered_map<int32_t, double> target_lp;
    for (const ReplyToken& alt : steps[i].top) {
      auto id = s.resolve(alt, row);
      if (!id || target_lp.count(*id)) continue;
      support.push_back(*id);
      target_lp[*id] = alt.logprob;
    }
    p.kl = support_kl(
        support, [&](int32_t id) { return target_lp.at(id); }, row);
    if (support.size() >= 2) f.support += static_cast<int64_t>(support.size());
    f.positions.push_back(p);
    f.steps_of.push_back(i);
    f.support_ids.push_back(std::move(support));
  }
  return f;
}

// Day0's own run in the target's format on the same positions, against the same reference rows:
// the figures the bounds scale.
struct OwnFigures {
  double kl_sum = 0;
  int64_t top1 = 0;
  int64_t positions = 0;
  double max_abs_dlogprob = 0;
};

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

Status add_own_figures(AuditSession& s, Engine& own, const std::vector<int32_t>& prompt, const Forced& f,
                       OwnFigures& acc) {
  std::vector<int32_t> fed = f.ids;
  for (int32_t& id : fed)
    if (id < 0) id = 0;
  D0_ASSIGN_OR_RETURN(FloatMatrix own_rows, s.teacher_force(prompt, fed, &own));
  for (size_t k = 0; k < f.steps_of.size(); ++k) {
    const auto i = static_cast<int64_t>(f.steps_of[k]);
    auto ref = f.rows.row(i);
    auto mine = own_rows.row(i);
    const int32_t id = f.ids[static_cast<size_t>(i)];
    acc.max_abs_dlogprob = std::max(acc.max_abs_dlogprob,
                                    std::abs(static_cast<double>(mine[id]) - static_cast<double>(ref[id])));
    acc.top1 += argmax(mine) == argmax(ref) ? 1 : 0;
    acc.kl_sum += support_kl(
        f.support_ids[k], [&](int32_t t) { return static_cast<double>(mine[t]); }, ref);
    ++acc.positions;
  }
  return Status::ok();
}

Json bound_json(const MeasuredBound& b) {
  return {{"target", b.target}, {"day0_own", b.own}, {"bound", b.bound}};
}

}  // namespace

void run_logprobs_stage(AuditSession& s, StageResult& out) {
  const LogprobPlan& plan = s.logprob_plan;
  // Day0's own run in the target's format (not loaded when it is the reference itself).
  std::optional<OwnRun> own;
  if (!plan.own.is_reference) {
    auto opened = open_own_run(plan.own);
    if (!opened.is_ok())
      return mark_fail(out, "", "Day0's own run in the target's format: " + opened.status().message());
    own = std::move(opened).value();
  }
  OwnFigures own_figures;
  Json rows = Json::array();
  std::vector<double> kls;
  int64_t positions = 0, top1 = 0, unresolved = 0, support = 0;
  double max_dlp = 0;
  std::string max_dlp_at, outside_topk;
  int64_t top_logprobs = 20;
  std::vector<std::string> short_replies;  // left out: fewer logprob entries than tokens
  auto convs = audit_conversations(*s.tok);
  convs.resize(std::min<size_t>(convs.size(), 3));
  for (const AuditConversation& c : convs) {
    auto rendered = s.render(c.messages);
    if (!rendered.is_ok())
      return mark_fail(out, "", c.id + ": Day0 cannot render it: " + rendered.status().message());
    Json body = s.chat_body(c.messages, s.options.new_tokens);
    body["logprobs"] = true;
    body["top_logprobs"] = top_logprobs;
    body["return_tokens_as_token_ids"] = true;  // vLLM: tokens named "token_id:N" (others ignore it)
    Exchange ex = s.post("/v1/chat/completions", body);
    if (ex.status >= 400 && ex.status < 500 && top_logprobs > 5) {
      top_logprobs = 5;  // a server with a lower cap
      body["top_logprobs"] = top_logprobs;
      ex = s.post("/v1/chat/completions", body);
    }
    if (!ex.ok()) {
      if (ex.status >= 400 && ex.status < 500)
        return mark_skip(out, "the target refuses logprobs: " + ex.describe());
      return mark_fail(out, "", c.id + ": " + ex.describe());
    }
    auto reply = parse_reply(ex.body);
    if (!reply.is_ok()) return mark_fail(out, "", c.id + ": " + reply.status().message());
    const ReplyChoice& choice = reply->choices.front();
    if (!choice.has_logprobs || choice.steps.empty())
      return mark_skip(out, "the target returned no logprobs for a request with logprobs: true");
    // Fewer entries than tokens (usage): a token held back at a split UTF-8 character and listed with
    // the next one (llama-server). Which position each later entry holds is then unknown, so the reply
    // is left out rather than compared out of step; target-limits judges whether its text is whole.
    if (reply->completion_tokens && static_cast<int64_t>(choice.steps.size()) < *reply->completion_tokens) {
      short_replies.push_back(
          fmt::format("{} ({} entries for {} tokens)", c.id, choice.steps.size(), *reply->completion_tokens));
      rows.push_back({{"id", c.id},
                      {"tokens", *reply->completion_tokens},
                      {"logprob_entries", choice.steps.size()},
                      {"compared", 0},
                      {"text", choice.text}});
      continue;
    }
    auto forced = force_reply(s, rendered->ids, choice.steps);
    if (!forced.is_ok()) return mark_fail(out, "", c.id + ": teacher forcing: " + forced.status().message());
    if (own) {
      if (Status st = add_own_figures(s, *own->engine.engine, rendered->ids, *forced, own_figures);
          !st.is_ok())
        return mark_fail(out, "", c.id + ": Day0's own run: " + st.message());
    }
    double conv_kl = 0, conv_dlp = 0;
    int64_t conv_top1 = 0;
    for (size_t k = 0; k < forced->positions.size(); ++k) {
      const Position& p = forced->positions[k];
      const size_t i = forced->steps_of[k];
      kls.push_back(p.kl);
      conv_kl += p.kl;
      conv_top1 += p.top1 ? 1 : 0;
      conv_dlp = std::max(conv_dlp, p.abs_dlogprob);
      if (p.abs_dlogprob > max_dlp) {
        max_dlp = p.abs_dlogprob;
        max_dlp_at = fmt::format("{} position {} ({})", c.id, i, s.token_text(forced->ids[i]));
      }
      if (p.rank >= plan.top_k && outside_topk.empty())
        outside_topk = fmt::format("{} position {}: the target chose {}, rank {} under the reference", c.id,
                                   i, s.token_text(forced->ids[i]), p.rank);
    }
    const auto compared = static_cast<int64_t>(forced->positions.size());
    positions += compared;
    top1 += conv_top1;
    unresolved += forced->unresolved;
    support += forced->support;
    rows.push_back({{"id", c.id},
                    {"tokens", choice.steps.size()},
                    {"compared", compared},
                    {"kl_mean", compared ? conv_kl / compared : 0.0},
                    {"top1_agreement", compared ? static_cast<double>(conv_top1) / compared : 1.0},
                    {"max_abs_dlogprob", conv_dlp},
                    {"text", choice.text}});
  }
  std::string short_note;
  if (!short_replies.empty()) {
    short_note = fmt::format(
        "{} of {} replies left out of the comparison, their logprob entries fewer "
        "than their tokens (usage): ",
        short_replies.size(), convs.size());
    for (size_t i = 0; i < short_replies.size(); ++i) short_note += (i ? ", " : "") + short_replies[i];
    short_note += " (tokens held back at split UTF-8 characters, their entries merged or dropped)";
    if (short_replies.size() == convs.size()) return mark_skip(out, short_note);
  }
  const double kl_mean = kls.empty() ? 0 : std::accumulate(kls.begin(), kls.end(), 0.0) / kls.size();
  const double kl_max = kls.empty() ? 0 : *std::max_element(kls.begin(), kls.end());
  const double top1_share = positions ? static_cast<double>(top1) / positions : 1.0;

  // Perplexity as the target computes it (echo with logprobs on /v1/completions), where offered;
  // Day0's own run computes it on the same ids.
  Json ppl;
  std::optional<MeasuredBound> ppl_bound;
  {
    const std::string text =
        "The river flows through the old town, past the market and the church, and on to the sea. In spring "
        "the water is high and the bridges are closed; in summer children swim below the mill.";
    Exchange ex = s.post("/v1/completions", {{"model", s.served_model},
                                             {"prompt", text},
                                             {"max_tokens", 1},
                                             {"temperature", 0},
                                             {"echo", true},
                                             {"logprobs", 0}});
    auto reply = ex.ok() ? parse_reply(ex.body) : Result<Reply>(invalid_argument(ex.describe()));
    auto ids = encode_text_prompt(*s.tok, text, s.vocab());
    if (!reply.is_ok() || reply->choices.front().steps.size() < 3 || !ids.is_ok() || ids->size() < 2) {
      ppl = "not offered (" +
            (reply.is_ok() ? std::string("no prompt logprobs in the reply") : reply.status().message()) + ")";
    } else {
      const auto& steps = reply->choices.front().steps;
      // The echoed prompt's tokens come first (the first has no logprob), then the generated one.
      double t_nll = 0;
      int64_t t_n = 0;
      for (size_t i = 1; i < steps.size() && i < ids->size(); ++i) {
        if (std::isfinite(steps[i].chosen.logprob)) {
          t_nll -= steps[i].chosen.logprob;
          ++t_n;
        }
      }
      std::vector<int32_t> first(ids->begin(), ids->begin() + 1), rest(ids->begin() + 1, ids->end());
      auto rows_ref = s.teacher_force(first, rest);
      auto nll_of = [&](const FloatMatrix& m) {
        double nll = 0;
        for (size_t i = 0; i < rest.size(); ++i) nll -= m.row(static_cast<int64_t>(i))[rest[i]];
        return nll;
      };
      if (rows_ref.is_ok() && t_n > 0) {
        const double ppl_t = std::exp(t_nll / t_n), ppl_r = std::exp(nll_of(*rows_ref) / rest.size());
        double ppl_own = ppl_r;
        if (own) {
          auto rows_own = s.teacher_force(first, rest, own->engine.engine.get());
          if (!rows_own.is_ok())
            return mark_fail(out, "", "perplexity: Day0's own run: " + rows_own.status().message());
          ppl_own = std::exp(nll_of(*rows_own) / rest.size());
        }
        MeasuredBound b;
        b.target = std::abs(std::log(ppl_t / ppl_r));
        b.own = std::abs(std::log(ppl_own / ppl_r));
        b.bound = bound_from_own(b.own, kFloorPplLogRatio);
        ppl = {{"target", ppl_t},
               {"reference", ppl_r},
               {"day0_own", ppl_own},
               {"target_tokens", t_n},
               {"reference_tokens", rest.size()},
               {"abs_log_ratio", bound_json(b)}};
        // A count that differs is the tokens stage's to judge; the ratio is compared on equal texts.
        if (t_n == static_cast<int64_t>(rest.size())) ppl_bound = b;
      }
    }
  }

  // The bounds: max(floor, factor x Day0's own figure in the target's format).
  const int64_t own_n = own_figures.positions;
  MeasuredBound kl_b{kl_mean, own_n ? own_figures.kl_sum / own_n : 0.0, 0};
  kl_b.bound = bound_from_own(kl_b.own, kFloorKlMean);
  MeasuredBound dlp_b{max_dlp, own_figures.max_abs_dlogprob, 0};
  dlp_b.bound = bound_from_own(dlp_b.own, kFloorAbsDlogprob);
  // Top-1 is bounded through its disagreement (1 - agreement), the figure that scales.
  MeasuredBound top1_b{top1_share, own_n ? static_cast<double>(own_figures.top1) / own_n : 1.0, 0};
  top1_b.bound = 1.0 - bound_from_own(1.0 - top1_b.own, kFloorTop1Disagreement);
  const std::string fmt_name = plan.format.name;
  out.evidence = {{"weight_format", fmt_name},
                  {"weight_format_source", plan.format.source},
                  {"own_run", plan.own.description},
                  {"own_run_positions", own_n},
                  {"bound_rule",
                   {{"factor", kOwnRunFactor},
                    {"floors",
                     {{"kl_mean", kFloorKlMean},
                      {"max_abs_dlogprob", kFloorAbsDlogprob},
                      {"top1_disagreement", kFloorTop1Disagreement},
                      {"perplexity_abs_log_ratio", kFloorPplLogRatio}}}}},
                  {"bounds",
                   {{"kl_mean", bound_json(kl_b)},
                    {"max_abs_dlogprob", bound_json(dlp_b)},
                    {"top1_agreement", bound_json(top1_b)},
                    {"top_k", plan.top_k}}},
                  {"top_logprobs", top_logprobs},
                  {"positions", positions},
                  {"unresolved_tokens", unresolved},
                  {"kl_support_tokens", support},
                  {"kl_mean", kl_mean},
                  {"kl_max", kl_max},
                  {"top1_agreement", top1_share},
                  {"max_abs_dlogprob", max_dlp},
                  {"max_abs_dlogprob_at", max_dlp_at},
                  {"first_outside_top_k", outside_topk.empty() ? Json(nullptr) : Json(outside_topk)},
                  {"prompt_perplexity", ppl},
                  {"completions", rows}};
  std::vector<std::string> problems;
  auto bound_note = [&](double own_v, double floor) {
    return fmt::format("({} bound: max({:.3g}, {} x Day0's own {:.3g}))", fmt_name, floor, kOwnRunFactor,
                       own_v);
  };
  if (positions == 0) problems.push_back("no token of the target could be mapped to an id");
  if (unresolved * 10 > positions + unresolved)
    problems.push_back(
        fmt::format("{} of {} tokens could not be mapped to an id", unresolved, positions + unresolved));
  if (kl_b.target > kl_b.bound)
    problems.push_back(fmt::format("KL mean {:.4g} above {:.4g} {}", kl_b.target, kl_b.bound,
                                   bound_note(kl_b.own, kFloorKlMean)));
  if (dlp_b.target > dlp_b.bound)
    problems.push_back(fmt::format("|Δ logprob| of the chosen token {:.4g} above {:.4g} at {} {}",
                                   dlp_b.target, dlp_b.bound, max_dlp_at,
                                   bound_note(dlp_b.own, kFloorAbsDlogprob)));
  if (top1_b.target < top1_b.bound)
    problems.push_back(fmt::format("top-1 agreement {:.3f} below {:.3f} {}", top1_b.target, top1_b.bound,
                                   bound_note(1.0 - top1_b.own, kFloorTop1Disagreement)));
  if (!outside_topk.empty())
    problems.push_back(fmt::format("outside the reference's top-{}: {}", plan.top_k, outside_topk));
  if (ppl_bound && ppl_bound->target > ppl_bound->bound)
    problems.push_back(
        fmt::format("the target's prompt perplexity {:.4g} against the reference's {:.4g}: |log ratio| "
                    "{:.3g} above {:.3g} {}",
                    ppl["target"].get<double>(), ppl["reference"].get<double>(), ppl_bound->target,
                    ppl_bound->bound, bound_note(ppl_bound->own, kFloorPplLogRatio)));
  std::string summary = fmt::format("{} positions: KL mean {:.2e}, top-1 {:.3f}, max |Δ logprob| {:.3g}",
                                    positions, kl_mean, top1_share, max_dlp);
  if (ppl_bound)
    summary += fmt::format(", prompt ppl {:.4g} vs {:.4g}", ppl["target"].get<double>(),
                           ppl["reference"].get<double>());
  if (!problems.empty()) {
    std::string reason = "logprobs: " + problems.front();
    for (size_t i = 1; i < problems.size(); ++i) reason += "; " + problems[i];
    return mark_fail(out, summary, reason);
  }
  if (!short_note.empty()) out.warnings.push_back({"logprobs_short", short_note});
  mark_pass(out, summary + fmt::format(" ({} bounds: {} x Day0's own {} run, from {})", fmt_name,
                                       kOwnRunFactor, fmt_name, plan.format.source));
}

// ---- 3. generation spot checks ---------------------------------------------------------------------

void run_target_generation_stage(AuditSession& s, StageResult& out) {
  std::vector<report::SpotPrompt> prompts = report::spot_prompts();
  for (auto& p : prompts) p.max_new_tokens = std::min<int64_t>(p.max_new_tokens, s.options.new_tokens);
  auto refs = report::run_spot_prompts(*s.reference.engine, *s.tok, prompts);
  if (!refs.is_ok()) return mark_fail(out, "", "the reference's greedy run: " + refs.status().message());
  constexpr double kMinAgreement = 0.5;
  Json rows = Json::array();
  double sum = 0;
  std::string worst;
  double worst_agreement = 2;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    Exchange ex = s.post("/v1/chat/completions", s.chat_body(p.messages, static_cast<int>(p.max_new_tokens)));
    if (!ex.ok()) return mark_fail(out, "", p.id + ": " + ex.describe());
    auto reply = parse_reply(ex.body);
    if (!reply.is_ok()) return mark_fail(out, "", p.id + ": " + reply.status().message());
    const std::string& target = reply->choices.front().text;
    const std::string& ref = (*refs)[i].text;
    size_t shared = 0;
    while (shared < target.size() && shared < ref.size() && target[shared] == ref[shared]) ++shared;
    const double agreement =
        ref.empty() ? (target.empty() ? 1.0 : 0.0) : static_cast<double>(shared) / ref.size();
    sum += agreement;
    if (agreement < worst_agreement) {
      worst_agreement = agreement;
      worst = p.id;
    }
    rows.push_back({{"id", p.id},
                    {"kind", p.kind},
                    {"target", target},
                    {"reference", ref},
                    {"target_finish_reason", reply->choices.front().finish_reason},
                    {"reference_finish_reason", (*refs)[i].finish_reason},
                    {"prefix_agreement", agreement}});
  }
  const double mean = prompts.empty() ? 1.0 : sum / prompts.size();
  out.evidence = {{"prompts", rows}, {"mean_prefix_agreement", mean}, {"min_agreement", kMinAgreement}};
  const std::string summary =
      fmt::format("{} prompts side by side: mean prefix agreement {:.2f} (lowest {} {:.2f})", prompts.size(),
                  mean, worst, worst_agreement);
  if (mean < kMinAgreement)
    return mark_fail(
        out, summary,
        fmt::format("generation: the target's greedy text agrees with the reference's on {:.2f} of its "
                    "length on average, below {:.2f}",
                    mean, kMinAgreement));
  mark_pass(out, summary);
}

// ---- 4. tool calls ---------------------------------------------------------------------------------

namespace {

const OJson& weather_tools() {
  static const OJson tools = OJson::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "description": "Current weather of a city",
      "parameters": {"type": "object", "properties": {
          "city": {"type": "string", "description": "City name"},
          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}])");
  return tools;
}

// A tool call in raw model text: the first JSON object with a "name" of a known tool and
// "arguments" (or "parameters"), as the common formats write it (<tool_call>{...}</tool_call>,
// [TOOL_CALLS][{...}], a bare object).
std::optional<std::pair<std::string, Json>> call_in_text(const std::string& text) {
  for (size_t start = text.find('{'); start != std::string::npos; start = text.find('{', start + 1)) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = start; i < text.size() && i - start < 4096; ++i) {
      const char ch = text[i];
      if (in_string) {
        if (ch == '\\')
          ++i;
        else if (ch == '"')
          in_string = false;
        continue;
      }
      if (ch == '"') in_string = true;
      if (ch == '{') ++depth;
      if (ch == '}' && --depth == 0) {
        auto doc = parse_json_text(text.substr(start, i - start + 1), "tool call", JsonLimits{1 << 16, 16});
        if (doc.is_ok() && doc->is_object() && doc->contains("name") && (*doc)["name"] == "get_weather") {
          Json args =
              doc->contains("arguments") ? (*doc)["arguments"] : doc->value("parameters", Json::object());
          if (args.is_string()) {
            auto parsed = parse_json_text(args.get<std::string>(), "arguments", JsonLimits{1 << 16, 16});
            if (parsed.is_ok()) args = *parsed;
          }
          return std::pair{std::string("get_weather"), args};
        }
        break;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

void run_tools_stage(AuditSession& s, StageResult& out) {
  const OJson& tools = weather_tools();
  const OJson ask = OJson::array(
      {{{"role", "user"}, {"content", "What is the weather in Paris right now? Use the get_weather tool."}}});
  std::vector<std::string> problems;
  Json evidence;
  // 1. The request with tools: the prompt as Day0's template renders it, the parsed calls well formed
  //    and the ones the raw output implies.
  auto rendered = s.render(ask, tools);
  if (!rendered.is_ok())
    return mark_skip(out, "Day0 cannot render the tools conversation: " + rendered.status().message());
  Json body = s.chat_body(ask, 48);
  body["tools"] = Json::parse(tools.dump());
  // With logprobs the reply's tokens spell the raw text the target generated, markup included, which
  // its tool parser turned into tool_calls (or left in content): the two are compared.
  body["logprobs"] = true;
  Exchange ex = s.post("/v1/chat/completions", body);
  if (ex.status >= 400 && ex.status < 500) {
    body.erase("logprobs");  // a server that refuses logprobs beside tools: content is the raw text
    ex = s.post("/v1/chat/completions", body);
  }
  if (!ex.ok()) return mark_fail(out, "", "tool calls: the request with tools was refused: " + ex.describe());
  auto reply = parse_reply(ex.body);
  if (!reply.is_ok()) return mark_fail(out, "", "tool calls: " + reply.status().message());
  const ReplyChoice& choice = reply->choices.front();
  // Token counts are compared as differences (what the tools add to the same conversation, what the
  // tool turn adds to the request), so that a fault of the template's frame (a second BOS, which the
  // tokens stage names) does not fail this stage too.
  evidence["day0_prompt_tokens"] = rendered->ids.size();
  evidence["target_prompt_tokens"] = reply->prompt_tokens ? Json(*reply->prompt_tokens) : Json(nullptr);
  {
    auto plain_rendered = s.render(ask);
    Exchange plain = s.post("/v1/chat/completions", s.chat_body(ask, 1));
    auto plain_reply =
        plain.ok() ? parse_reply(plain.body) : Result<Reply>(invalid_argument(plain.describe()));
    if (plain_rendered.is_ok() && plain_reply.is_ok() && plain_reply->prompt_tokens && reply->prompt_tokens) {
      const int64_t day0_added =
          static_cast<int64_t>(rendered->ids.size()) - static_cast<int64_t>(plain_rendered->ids.size());
      const int64_t target_added = *reply->prompt_tokens - *plain_reply->prompt_tokens;
      evidence["tools_add"] = {{"day0", day0_added}, {"target", target_added}};
      if (day0_added != target_added)
        problems.push_back(fmt::format("the tools add {} prompt tokens on the target, {} in Day0's template",
                                       target_added, day0_added));
    }
  }
  Json calls = Json::array();
  for (const ReplyToolCall& call : choice.tool_calls) {
    Json c = {{"name", call.name}, {"arguments", call.arguments}};
    auto args = parse_json_text(call.arguments, "arguments", JsonLimits{1 << 20, 16});
    if (call.name != "get_weather") {
      problems.push_back("the target's tool call names " + json_quoted(call.name) +
                         ", not a tool of the request");
    } else if (!args.is_ok() || !args->is_object()) {
      problems.push_back("the target's tool call arguments are not a JSON object: " +
                         json_quoted(call.arguments));
    } else if (!args->contains("city") || !(*args)["city"].is_string()) {
      problems.push_back("the target's tool call lacks the required argument city: " +
                         json_quoted(call.arguments));
    }
    calls.push_back(c);
  }
  evidence["target_tool_calls"] = calls;
  evidence["target_content"] = choice.text;
  // The target's raw output: its logprob tokens joined (bytes where given), else its content.
  std::string target_raw;
  for (const ReplyStep& st : choice.steps) target_raw += st.chosen.bytes.value_or(st.chosen.text);
  const bool raw_from_tokens = choice.has_logprobs && !choice.steps.empty();
  if (!raw_from_tokens) target_raw = choice.text;
  evidence["target_raw_output"] = target_raw;
  evidence["target_raw_output_from"] = raw_from_tokens ? "logprob tokens" : "content (no logprobs)";
  const auto raw_call = call_in_text(target_raw);
  auto parsed_equals = [](const ReplyToolCall& call, const std::pair<std::string, Json>& want) {
    auto args = parse_json_text(call.arguments, "arguments", JsonLimits{1 << 20, 16});
    return call.name == want.first && args.is_ok() && *args == want.second;
  };
  auto describe_call = [](const std::pair<std::string, Json>& c) { return c.first + " " + c.second.dump(); };
  if (raw_call) {
    evidence["target_raw_call"] = {{"name", raw_call->first}, {"arguments", raw_call->second}};
    const bool parsed = std::any_of(choice.tool_calls.begin(), choice.tool_calls.end(),
                                    [&](const ReplyToolCall& c) { return parsed_equals(c, *raw_call); });
    if (choice.tool_calls.empty()) {
      problems.push_back("the target generated a call (" + describe_call(*raw_call) +
                         ") but its reply has no tool_calls: the call was left in content " +
                         json_quoted(choice.text) + " (its parser missed it, or it parses none)");
    } else if (!parsed) {
      const ReplyToolCall& c = choice.tool_calls.front();
      problems.push_back("the target's tool_calls (" + c.name + " " + c.arguments +
                         ") disagree with the call its raw output holds (" + describe_call(*raw_call) + ")");
    }
  } else if (raw_from_tokens && !choice.tool_calls.empty()) {
    problems.push_back("the target's tool_calls (" + choice.tool_calls.front().name + " " +
                       choice.tool_calls.front().arguments + ") are not in the raw output it generated " +
                       json_quoted(target_raw));
  }
  // What the raw output implies: the reference's greedy continuation of Day0's rendering.
  GenerationRequest greq;
  greq.prompt = rendered->ids;
  greq.max_new = 48;
  greq.stop_tokens = s.tok->special_tokens().stop_ids;
  auto gen = generate_batch(*s.reference.engine, std::span<const GenerationRequest>(&greq, 1));
  if (gen.is_ok()) {
    std::vector<int32_t> toks = gen->front().tokens();
    const std::string raw = s.tok->decode(toks);
    evidence["reference_raw_output"] = raw;
    auto implied = call_in_text(raw);
    if (implied) {
      evidence["reference_call"] = {{"name", implied->first}, {"arguments", implied->second}};
      const bool parsed = std::any_of(choice.tool_calls.begin(), choice.tool_calls.end(),
                                      [&](const ReplyToolCall& c) { return parsed_equals(c, *implied); });
      // The target generating the same call is enough here: whether it parsed it is judged above.
      const bool generated = raw_call && *raw_call == *implied;
      if (!parsed && !generated)
        problems.push_back("the reference's greedy output calls " + describe_call(*implied) +
                           " but the target's reply does not hold that call");
    }
  } else {
    evidence["reference_raw_output"] = "reference run failed: " + gen.status().message();
  }
  // 2. The follow-up turn with the tool result: accepted, and rendered as Day0 renders it.
  const OJson call_args = OJson{{"city", "Paris"}};
  OJson follow = ask;
  follow.push_back(
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls", OJson::array({{{"id", "call12345"},
                                     {"type", "function"},
                                     {"function", {{"name", "get_weather"}, {"arguments", call_args}}}}})}});
  follow.push_back({{"role", "tool"},
                    {"tool_call_id", "call12345"},
                    {"name", "get_weather"},
                    {"content", R"({"temperature": 18, "unit": "celsius", "sky": "cloudy"})"}});
  auto follow_rendered = s.render(follow, tools);
  // On the wire the arguments are a JSON string, as OpenAI's clients send them.
  OJson wire = follow;
  wire[1]["tool_calls"][0]["function"]["arguments"] = call_args.dump();
  Json fbody = s.chat_body(wire, 24);
  fbody["tools"] = Json::parse(tools.dump());
  Exchange fex = s.post("/v1/chat/completions", fbody);
  if (!fex.ok()) {
    problems.push_back("the follow-up turn with the tool result was refused: " + fex.describe());
  } else if (auto freply = parse_reply(fex.body); !freply.is_ok()) {
    problems.push_back("the follow-up turn: " + freply.status().message());
  } else {
    evidence["follow_up_reply"] = freply->choices.front().text;
    evidence["follow_up_target_prompt_tokens"] =
        freply->prompt_tokens ? Json(*freply->prompt_tokens) : Json(nullptr);
    if (follow_rendered.is_ok()) {
      evidence["follow_up_day0_prompt_tokens"] = follow_rendered->ids.size();
      if (freply->prompt_tokens && reply->prompt_tokens) {
        const int64_t day0_added =
            static_cast<int64_t>(follow_rendered->ids.size()) - static_cast<int64_t>(rendered->ids.size());
        const int64_t target_added = *freply->prompt_tokens - *reply->prompt_tokens;
        evidence["tool_turn_adds"] = {{"day0", day0_added}, {"target", target_added}};
        if (day0_added != target_added)
          problems.push_back(
              fmt::format("the follow-up turn with the tool call and its result adds {} prompt tokens on the "
                          "target, {} in "
                          "Day0's template",
                          target_added, day0_added));
      }
    } else {
      evidence["follow_up_day0_prompt_tokens"] =
          "Day0 cannot render it: " + follow_rendered.status().message();
    }
  }
  out.evidence = evidence;
  const std::string summary = fmt::format("{} tool call(s) parsed; follow-up turn {}", calls.size(),
                                          fex.ok() ? "accepted" : "refused");
  if (!problems.empty()) {
    std::string reason = "tool calls: " + problems.front();
    for (size_t i = 1; i < problems.size(); ++i) reason += "; " + problems[i];
    return mark_fail(out, summary, reason);
  }
  mark_pass(out, summary + ", prompts rendered as Day0 renders them");
}

// ---- 5. limits and errors --------------------------------------------------------------------------

void run_limits_stage(AuditSession& s, StageResult& out) {
  std::vector<std::string> problems;
  std::vector<report::StageWarning> warnings;
  // Replies whose logprob entries are fewer than their tokens while spelling the whole text (the
  // warning `logprobs_short`): "the streamed reply 12 of 24" per reply.
  std::vector<std::string> short_entries;
  int replies_with_logprobs = 0;
  auto note_short_entries = [&](const ReplyChoice& c, std::optional<int64_t> usage_tokens,
                                const char* reply_name) -> std::string {
    int64_t short_by = 0;
    if (c.has_logprobs) ++replies_with_logprobs;
    std::string why = logprob_entries_against_text(c, usage_tokens, reply_name, &short_by);
    if (why.empty() && short_by > 0)
      short_entries.push_back(
          fmt::format("the {} reply {} of {}", reply_name, c.steps.size(), *usage_tokens));
    return why;
  };
  Json checks = Json::object();
  const OJson ask =
      OJson::array({{{"role", "user"}, {"content", "Write a short story about a lighthouse keeper."}}});
  auto fail_check = [&](const std::string& name, const std::string& why) {
    problems.push_back(name + ": " + why);
    checks[name] = {{"pass", false}, {"why", why}};
  };
  auto pass_check = [&](const std::string& name, Json detail) {
    detail["pass"] = true;
    checks[name] = detail;
  };

  // max_tokens: a reply cut by its budget holds exactly that many tokens.
  {
    const int budget = 5;
    Json body = s.chat_body(ask, budget);
    body["ignore_eos"] = true;  // vLLM, llama-server, day0 (others ignore it)
    body["logprobs"] = true;
    Exchange ex = s.post("/v1/chat/completions", body);
    auto reply = ex.ok() ? parse_reply(ex.body) : Result<Reply>(invalid_argument(ex.describe()));
    if (!reply.is_ok()) {
      fail_check("max_tokens", reply.status().message());
    } else {
      const ReplyChoice& c = reply->choices.front();
      const int64_t counted = reply->completion_tokens.value_or(-1);
      const int64_t listed = c.has_logprobs ? static_cast<int64_t>(c.steps.size()) : -1;
      Json detail = {{"max_tokens", budget},
                     {"finish_reason", c.finish_reason},
                     {"completion_tokens", counted},
                     {"logprob_tokens", listed}};
      const std::string entries_wrong = note_short_entries(c, reply->completion_tokens, "max_tokens");
      // Entries short of usage but spelling the text count the tokens by usage (a warning, below).
      const int64_t listed_whole = entries_wrong.empty() && counted >= 0 ? std::max(listed, counted) : listed;
      if (!entries_wrong.empty()) {
        fail_check("max_tokens", entries_wrong);
      } else if (counted > budget || listed > budget) {
        fail_check("max_tokens",
                   fmt::format("{} tokens for max_tokens {}", std::max(counted, listed), budget));
      } else if (c.finish_reason == "length" &&
                 ((counted >= 0 && counted != budget) || (listed >= 0 && listed_whole != budget))) {
        fail_check("max_tokens",
                   fmt::format("finish_reason length with {} tokens (usage) and {} logprob entries for "
                               "max_tokens {}: the reply lost tokens",
                               counted, listed, budget));
      } else if (c.finish_reason != "length" && c.finish_reason != "stop") {
        fail_check("max_tokens",
                   "finish_reason " + json_quoted(c.finish_reason) + ", expected length or stop");
      } else {
        pass_check("max_tokens", detail);
      }
    }
  }

  // Streaming and non-streaming replies of the same greedy request are the same text.
  std::string plain_text;
  {
    Json body = s.chat_body(ask, s.options.new_tokens);
    body["logprobs"] = true;  // entries against usage and text, in both forms
    Exchange plain = s.post("/v1/chat/completions", body);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    Exchange streamed = s.post("/v1/chat/completions", body);
    auto a = plain.ok() ? parse_reply(plain.body) : Result<Reply>(invalid_argument(plain.describe()));
    auto b =
        streamed.ok() ? parse_stream(streamed.body) : Result<Reply>(invalid_argument(streamed.describe()));
    if (!a.is_ok() || !b.is_ok()) {
      fail_check("stream",
                 !a.is_ok() ? "non-streamed: " + a.status().message() : "streamed: " + b.status().message());
    } else {
      plain_text = a->choices.front().text;
      const std::string& st = b->choices.front().text;
      const std::string diff = first_text_difference(st, plain_text, "streamed", "non-streamed");
      if (!diff.empty()) {
        fail_check("stream", "streamed and non-streamed greedy replies differ at " + diff);
      } else if (a->choices.front().finish_reason != b->choices.front().finish_reason) {
        fail_check("stream", "finish_reason " + json_quoted(b->choices.front().finish_reason) +
                                 " streamed, " + json_quoted(a->choices.front().finish_reason) + " not");
      } else if (std::string why = note_short_entries(b->choices.front(), b->completion_tokens, "streamed");
                 !why.empty()) {
        fail_check("stream", why);
      } else if (why = note_short_entries(a->choices.front(), a->completion_tokens, "non-streamed");
                 !why.empty()) {
        fail_check("stream", why);
      } else {
        pass_check("stream",
                   {{"chars", plain_text.size()}, {"usage_streamed", b->completion_tokens.has_value()}});
      }
    }
  }

  // Stop strings: a piece of the greedy reply as the stop string cuts the reply before it.
  {
    // The stop string: 3 to 8 bytes from the middle of the reply, cut at UTF-8 boundaries.
    std::string stop;
    if (plain_text.size() >= 12) {
      size_t from = plain_text.size() / 2;
      while (from > 0 && (static_cast<unsigned char>(plain_text[from]) & 0xC0) == 0x80) --from;
      size_t to = std::min(plain_text.size(), from + 6);
      while (to < plain_text.size() && (static_cast<unsigned char>(plain_text[to]) & 0xC0) == 0x80) ++to;
      stop = plain_text.substr(from, to - from);
    }
    if (stop.empty() || stop.find_first_not_of(" \n\t") == std::string::npos) {
      checks["stop"] = {{"pass", true},
                        {"skipped", "the greedy reply is too short to take a stop string from"}};
    } else {
      Json body = s.chat_body(ask, s.options.new_tokens);
      body["stop"] = Json::array({stop});
      Exchange ex = s.post("/v1/chat/completions", body);
      auto reply = ex.ok() ? parse_reply(ex.body) : Result<Reply>(invalid_argument(ex.describe()));
      const std::string expected = plain_text.substr(0, plain_text.find(stop));
      if (!reply.is_ok()) {
        fail_check("stop", reply.status().message());
      } else if (reply->choices.front().text != expected) {
        fail_check("stop", fmt::format("with stop {} the reply is {}, expected {}", json_quoted(stop),
                                       json_quoted(reply->choices.front().text), json_quoted(expected)));
      } else if (reply->choices.front().finish_reason != "stop") {
        fail_check("stop", "finish_reason " + json_quoted(reply->choices.front().finish_reason) +
                               " after a stop string");
      } else {
        pass_check("stop", {{"stop", stop}, {"chars", expected.size()}});
      }
    }
  }

  // n = 2: two choices, or a clear refusal (4xx); one choice for n = 2 is wrong.
  {
    Json body = s.chat_body(ask, 4);
    body["n"] = 2;
    Exchange ex = s.post("/v1/chat/completions", body);
    if (ex.status >= 400 && ex.status < 500) {
      pass_check("n", {{"refused", ex.describe()}});
    } else if (!ex.ok()) {
      fail_check("n", "n = 2: " + ex.describe());
    } else if (auto reply = parse_reply(ex.body); !reply.is_ok()) {
      fail_check("n", reply.status().message());
    } else if (reply->choices.size() != 2) {
      fail_check("n", fmt::format("n = 2 answered with {} choice(s)", reply->choices.size()));
    } else {
      pass_check("n", {{"choices", 2}});
    }
  }

  // The context edge, with token-id prompts: context - 2 tokens and 2 more fit; context + 1 is a 4xx.
  if (s.context > 0 && s.context <= (int64_t{1} << 20)) {
    auto prompt = [&](int64_t n) {
      Json ids = Json::array();
      const int32_t word = static_cast<int32_t>(std::min<int64_t>(s.vocab() - 1, 300));
      for (int64_t i = 0; i < n; ++i) ids.push_back(i % 7 == 0 ? word - 1 : word);
      return ids;
    };
    Exchange fits = s.post("/v1/completions", {{"model", s.served_model},
                                               {"prompt", prompt(s.context - 2)},
                                               {"max_tokens", 2},
                                               {"temperature", 0}});
    Exchange over = s.post("/v1/completions", {{"model", s.served_model},
                                               {"prompt", prompt(s.context + 1)},
                                               {"max_tokens", 1},
                                               {"temperature", 0}});
    if (!fits.ok()) {
      fail_check("context", fmt::format("a prompt of {} tokens (context {} from {}) with max_tokens 2: {}",
                                        s.context - 2, s.context, s.context_source, fits.describe()));
    } else if (!(over.status >= 400 && over.status < 500)) {
      fail_check("context",
                 fmt::format("a prompt of {} tokens, past the context {} ({}): {}", s.context + 1, s.context,
                             s.context_source, over.status == 200 ? "answered 200" : over.describe()));
    } else {
      pass_check("context",
                 {{"context", s.context}, {"source", s.context_source}, {"over", over.describe()}});
    }
  } else {
    checks["context"] = {{"pass", true}, {"skipped", "the context is unknown"}};
  }

  // Bad requests must be refused: no 2xx (no generated text), an answer (not a dropped connection),
  // and the server answers the next valid request. A 5xx refusal is HTTP's wrong class for a client's
  // error, not a wrong answer: a named warning (a failure under --strict). Not retried: a 5xx here is
  // the answer.
  {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"malformed JSON", "{\"model\": "},
        {"no messages", Json({{"model", s.served_model}}).dump()},
        // -5, not -1: llama-server documents max_tokens -1 as "until the end" (and refuses -2).
        {"negative max_tokens",
         Json({{"model", s.served_model}, {"messages", Json::parse(ask.dump())}, {"max_tokens", -5}}).dump()},
        {"temperature as text",
         Json({{"model", s.served_model}, {"messages", Json::parse(ask.dump())}, {"temperature", "hot"}})
             .dump()},
    };
    Json answers = Json::object();
    std::string wrong;
    std::vector<std::string> server_errors;
    for (const auto& [name, body] : bad) {
      Exchange ex = s.post_raw("/v1/chat/completions", body, /*retry=*/false);
      answers[name] = ex.status;
      if (ex.status >= 400 && ex.status < 500) continue;
      if (ex.status >= 500) {
        server_errors.push_back(name + " answered " + ex.describe());
      } else if (wrong.empty()) {
        wrong = name + " answered " +
                (ex.ok() ? fmt::format("HTTP {}: a bad request was not refused", ex.status) : ex.describe());
      }
    }
    // Still serving after them.
    Exchange next = s.post("/v1/chat/completions", s.chat_body(ask, 1));
    if (!next.ok() && wrong.empty())
      wrong = "after the bad requests the server does not answer a valid one: " + next.describe();
    if (!wrong.empty()) {
      fail_check("bad_requests", wrong);
      checks["bad_requests"]["answers"] = answers;
    } else {
      Json detail = {{"answers", answers}, {"next_request", next.status}};
      if (!server_errors.empty()) {
        std::string message = server_errors.front();
        for (size_t i = 1; i < server_errors.size(); ++i) message += "; " + server_errors[i];
        message +=
            " (refused, and the server answered the next request, but with a server-error status for a "
            "client's error; 4xx is the class)";
        warnings.push_back({"bad_request_5xx", message});
        detail["warning"] = "bad_request_5xx";
      }
      pass_check("bad_requests", detail);
    }
  }
  if (!short_entries.empty()) {
    std::string message = fmt::format(
        "{} of {} replies with logprobs carried fewer logprob entries than "
        "tokens (usage) while their entries spell the whole text: ",
        short_entries.size(), replies_with_logprobs);
    for (size_t i = 0; i < short_entries.size(); ++i) message += (i ? ", " : "") + short_entries[i];
    message += " (tokens held back at split UTF-8 characters and listed with the next token's entry)";
    warnings.push_back({"logprobs_short", message});
  }
  out.evidence = {{"checks", checks}, {"retried_5xx", s.total_retries}};
  const std::string summary =
      fmt::format("{} checks: max_tokens, stream, stop, n, context, bad requests", checks.size());
  if (!problems.empty()) {
    std::string reason = "limits: " + problems.front();
    for (size_t i = 1; i < problems.size(); ++i) reason += "; " + problems[i];
    return mark_fail(out, summary, reason);
  }
  out.warnings = std::move(warnings);
  mark_pass(out, summary + (out.warnings.empty()
                                ? " as expected"
                                : fmt::format(" as expected, {} warning(s)", out.warnings.size())));
}

// ---- 6. speed and stability ------------------------------------------------------------------------

void run_speed_stage(AuditSession& s, StageResult& out) {
  Json levels = Json::array();
  int64_t failed = 0, requests = 0, short_streams = 0, streams = 0;
  std::string first_error, first_short;
  serve::BenchOptions base;
  base.url = s.base_url;
  base.model = s.served_model;
  base.api_key = s.options.api_key;
  base.prompt_len = {32, 32};
  base.output_len = {s.options.new_tokens, s.options.new_tokens};
  base.max_token_id = static_cast<int32_t>(std::min<int64_t>(s.vocab(), 1000));
  // With log-probabilities each chunk says how many tokens it carries: a server may stream several in
  // one chunk (llama-server does under load), which OpenAI's protocol allows. One alternative, not 0:
  // llama-server answers `logprobs: 0` with none at all.
  base.logprobs = 1;
  if (!s.path_prefix.empty())
    return mark_skip(out, "the load generator needs a target at the server's root, not " + s.path_prefix);
  for (int c : s.options.concurrency) {
    serve::BenchOptions o = base;
    o.concurrency = c;
    o.requests =
        s.options.bench_requests_per_level > 0 ? s.options.bench_requests_per_level : std::max(8, 2 * c);
    auto r = serve::run_serve_bench(o);
    if (!r.is_ok())
      return mark_fail(out, "", fmt::format("speed: concurrency {}: {}", c, r.status().message()));
    failed += r->failed;
    requests += r->requests;
    if (first_error.empty() && !r->first_error.empty()) first_error = r->first_error;
    short_streams += r->short_streams;
    streams += r->requests;
    if (first_short.empty()) first_short = r->first_short_stream;
    levels.push_back({{"concurrency", c},
                      {"requests", r->requests},
                      {"failed", r->failed},
                      {"short_streams", r->short_streams},
                      {"output_tok_s", r->output_throughput},
                      {"ttft_p50_s", r->ttft.p50},
                      {"ttft_p99_s", r->ttft.p99},
                      {"itl_p50_s", r->itl.p50},
                      {"itl_p99_s", r->itl.p99}});
  }
  out.evidence = {{"levels", levels}};
  std::vector<std::string> problems;
  if (failed > 0)
    problems.push_back(
        fmt::format("{} of {} load requests failed (first: {})", failed, requests, first_error));
  std::string soak_note = "no soak (none asked)";
  if (s.options.soak_seconds > 0) {
    serve::SoakOptions so;
    so.load = base;
    so.load.concurrency = std::min(4, s.options.concurrency.back());
    so.load.requests = so.load.concurrency * 2;
    so.duration_s = s.options.soak_seconds;
    so.sample_every_s = std::max(1.0, s.options.soak_seconds / 30);
    // The target's process, when it runs here: its memory, threads and open files over the soak.
    std::string process_note = "the target's process not sampled (not on this host, or not found)";
    so.server_pid = s.options.target_pid;
    if (so.server_pid > 0) {
      process_note = fmt::format("process {} (--target-pid)", so.server_pid);
    } else if (const int port = serve::loopback_port(s.base_url); port > 0) {
      so.server_pid = serve::listening_pid(port);
      if (so.server_pid > 0)
        process_note = fmt::format("process {} (listening on port {})", so.server_pid, port);
    }
    auto soak = serve::run_soak(so);
    if (!soak.is_ok()) return mark_fail(out, "", "speed: soak: " + soak.status().message());
    Json samples = Json::array();
    for (const auto& smp : soak->samples)
      samples.push_back({{"t_s", smp.t_s},
                         {"rss_mb", smp.rss_mb},
                         {"threads", smp.threads},
                         {"open_files", smp.open_files},
                         {"e2e_p50_s", smp.e2e_p50_s},
                         {"e2e_p99_s", smp.e2e_p99_s},
                         {"requests", smp.requests},
                         {"failed", smp.failed}});
    // Drift: the median latency of the last third of the samples against the first third's; a
    // growth counts when it is both relative (over half) and absolute (over 50 ms, above the noise
    // of a short soak on a fast server).
    std::vector<double> p50;
    for (const auto& smp : soak->samples) p50.push_back(smp.e2e_p50_s);
    const size_t third = p50.size() / 3;
    double drift = 0, grown_s = 0;
    if (third >= 1) {
      std::vector<double> head(p50.begin(), p50.begin() + static_cast<std::ptrdiff_t>(third));
      std::vector<double> tail(p50.end() - static_cast<std::ptrdiff_t>(third), p50.end());
      std::sort(head.begin(), head.end());
      std::sort(tail.begin(), tail.end());
      const double a = head[head.size() / 2], z = tail[tail.size() / 2];
      drift = a > 0 ? z / a - 1 : 0;
      grown_s = z - a;
    }
    const double error_rate = soak->requests ? static_cast<double>(soak->failed) / soak->requests : 0;
    out.evidence["soak"] = {{"seconds", so.duration_s},
                            {"requests", soak->requests},
                            {"failed", soak->failed},
                            {"error_rate", error_rate},
                            {"e2e_p50_slope_s_per_min", soak->slopes.e2e_p50_s},
                            {"process", process_note},
                            {"rss_mb_slope_per_min", soak->slopes.rss_mb},
                            {"latency_drift", drift},
                            {"samples", samples}};
    soak_note = fmt::format("soak {:.0f} s: {} requests, error rate {:.3g}, latency drift {:+.1f}%",
                            so.duration_s, soak->requests, error_rate, drift * 100);
    if (so.server_pid > 0 && !soak->samples.empty())
      soak_note +=
          fmt::format(", RSS {:.0f} MB ({:+.2f} MB/min)", soak->samples.back().rss_mb, soak->slopes.rss_mb);
    // A process's memory settles over minutes (allocator arenas, caches filling): a shorter soak shows
    // its figures without judging their slope.
    constexpr double kMinSoakToJudgeGrowth_s = 300;
    if (so.server_pid > 0 && so.duration_s < kMinSoakToJudgeGrowth_s)
      soak_note += fmt::format(" (growth judged from a {:.0f}-s soak on)", kMinSoakToJudgeGrowth_s);
    else
      for (const std::string& growth : soak->process_growth) problems.push_back("soak: " + growth);
    out.evidence["soak"]["short_streams"] = soak->short_streams;
    short_streams += soak->short_streams;
    streams += soak->requests;
    if (first_short.empty()) first_short = soak->first_short_stream;
    if (soak->failed > 0)
      problems.push_back(fmt::format("soak: {} of {} requests failed (first: {})", soak->failed,
                                     soak->requests, soak->first_error));
    // A latency drift over seconds measures what else the host ran then as much as the server (a soak of
    // 1.5 s on a 2-core host beside a compiler grew 320%): a soak shorter than a minute shows it only.
    constexpr double kMinSoakToJudgeDrift_s = 60;
    if (drift > 0.5 && grown_s > 0.05 && so.duration_s >= kMinSoakToJudgeDrift_s)
      problems.push_back(fmt::format("soak: the median latency grew {:.0f}% over the run", drift * 100));
  }
  out.evidence["soak_note"] = soak_note;
  std::string summary;
  for (const auto& l : levels)
    summary += fmt::format("{}c {:.1f} tok/s TTFT p50 {:.3f} s; ", l["concurrency"].get<int>(),
                           l["output_tok_s"].get<double>(), l["ttft_p50_s"].get<double>());
  summary += soak_note;
  // Fewer chunks than the usage's tokens: the tokens were generated and counted (by the usage); a
  // server that holds a token ending inside a UTF-8 character back and sends it with the next one does
  // this (target-limits checks that such a reply's text arrives whole).
  if (short_streams > 0)
    out.warnings.push_back(
        {"stream_chunks_short",
         fmt::format("{} of {} streams carried fewer chunks than their usage's tokens (first: {})",
                     short_streams, streams, first_short)});
  if (!problems.empty()) {
    std::string reason = "speed and stability: " + problems.front();
    for (size_t i = 1; i < problems.size(); ++i) reason += "; " + problems[i];
    return mark_fail(out, summary, reason);
  }
  mark_pass(out, summary + (out.warnings.empty() ? "" : fmt::format("; {} warning(s)", out.warnings.size())));
}

}  // namespace day0::audit
