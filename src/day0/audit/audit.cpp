#include "day0/audit/audit.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <thread>

#include "day0/audit/audit_session.h"
#include "day0/audit/audit_stages.h"
#include "day0/core/json_reader.h"
#include "day0/report/machine_info.h"
#include "day0/tokenizer/chat_template.h"

namespace day0::audit {

namespace {

struct AuditStageEntry {
  AuditStageDescriptor descriptor;
  void (*run)(AuditSession&, report::StageResult&);
};

const std::vector<AuditStageEntry>& audit_stage_table() {
  static const std::vector<AuditStageEntry> table = {
      {{"target-tokens", "Target: tokens and template"}, run_tokens_stage},
      {{"target-logprobs", "Target: logprobs"}, run_logprobs_stage},
      {{"target-generation", "Target: generation"}, run_target_generation_stage},
      {{"target-tools", "Target: tool calls"}, run_tools_stage},
      {{"target-limits", "Target: limits and errors"}, run_limits_stage},
      {{"target-speed", "Target: speed and stability"}, run_speed_stage},
  };
  return table;
}

// "http://h:p/v1/" -> ("http://h:p", ""); "http://h:p/proxy/v1" -> ("http://h:p", "/proxy").
Status split_target_url(const std::string& url, std::string& base, std::string& prefix) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0))
    return invalid_argument("--target " + url + ": expected a URL like http://127.0.0.1:8000");
  std::string rest = url;
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.size() >= 3 && rest.compare(rest.size() - 3, 3, "/v1") == 0) rest.resize(rest.size() - 3);
  const size_t path = rest.find('/', scheme + 3);
  base = path == std::string::npos ? rest : rest.substr(0, path);
  prefix = path == std::string::npos ? "" : rest.substr(path);
  if (base.size() <= scheme + 3) return invalid_argument("--target " + url + ": no host");
  return Status::ok();
}

int64_t json_int(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* key : path) {
    if (!at->is_object()) return 0;
    auto it = at->find(key);
    if (it == at->end()) return 0;
    at = &*it;
  }
  return at->is_number_integer() && at->get<int64_t>() > 0 && at->get<int64_t>() < (int64_t{1} << 32)
             ? at->get<int64_t>()
             : 0;
}

}  // namespace

std::string Exchange::describe() const {
  if (status == 0) return "no response (" + error + ")";
  return fmt::format("HTTP {}: {}", status, error_message(body));
}

const std::vector<AuditStageDescriptor>& audit_stages() {
  static const std::vector<AuditStageDescriptor> out = [] {
    std::vector<AuditStageDescriptor> v;
    for (const auto& e : audit_stage_table()) v.push_back(e.descriptor);
    return v;
  }();
  return out;
}

Exchange AuditSession::post_raw(const std::string& path, const std::string& body, bool retry) const {
  Exchange ex;
  const int attempts = retry ? 3 : 1;
  for (int a = 0; a < attempts; ++a) {
    httplib::Client cli(base_url);
    const auto timeout = std::chrono::duration<double>(options.timeout_s);
    cli.set_read_timeout(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
    cli.set_write_timeout(std::chrono::seconds(30));
    cli.set_connection_timeout(std::chrono::seconds(10));
    httplib::Headers headers;
    if (!options.api_key.empty()) headers.emplace("Authorization", "Bearer " + options.api_key);
    auto res = cli.Post(path_prefix + path, headers, body, "application/json");
    ex = Exchange{};
    ex.retries = a;
    if (!res) {
      ex.error = httplib::to_string(res.error());
    } else {
      ex.status = res->status;
      ex.body = std::move(res->body);
    }
    if (ex.status != 0 && ex.status < 500) break;
    if (a + 1 < attempts) std::this_thread::sleep_for(std::chrono::milliseconds(100 * (a + 1)));
  }
  return ex;
}

Exchange AuditSession::post(const std::string& path, const nlohmann::json& body, bool retry) const {
  Exchange ex = post_raw(path, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), retry);
  const_cast<AuditSession*>(this)->total_retries += ex.retries;
  return ex;
}

Exchange AuditSession::get(const std::string& path) const {
  Exchange ex;
  httplib::Client cli(base_url);
  cli.set_read_timeout(std::chrono::seconds(30));
  cli.set_connection_timeout(std::chrono::seconds(10));
  httplib::Headers headers;
  if (!options.api_key.empty()) headers.emplace("Authorization", "Bearer " + options.api_key);
  auto res = cli.Get(path_prefix + path, headers);
  if (!res) {
    ex.error = httplib::to_string(res.error());
  } else {
    ex.status = res->status;
    ex.body = std::move(res->body);
  }
  return ex;
}

nlohmann::json AuditSession::chat_body(const nlohmann::ordered_json& messages, int max_tokens) const {
  return {{"model", served_model},
          {"messages", nlohmann::json::parse(messages.dump())},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", false}};
}

Result<AuditSession::Rendered> AuditSession::render(const nlohmann::ordered_json& messages,
                                                    const nlohmann::ordered_json& tools) const {
  tokenizer::ChatRequest request;
  request.messages = messages;
  request.tools = tools;
  Rendered out;
  D0_ASSIGN_OR_RETURN(out.text, tokenizer::apply_chat_template(*tok, request));
  // The template writes BOS itself: the text is encoded without adding special tokens again.
  out.ids = tok->encode(out.text);
  return out;
}

Result<FloatMatrix> AuditSession::teacher_force(const std::vector<int32_t>& prompt,
                                                const std::vector<int32_t>& tokens, Engine* engine) {
  if (engine == nullptr) engine = reference.engine.get();
  if (prompt.empty()) return invalid_argument("teacher forcing: empty prompt");
  std::vector<int32_t> ids = prompt;
  if (!tokens.empty()) ids.insert(ids.end(), tokens.begin(), tokens.end() - 1);
  const int64_t v = vocab();
  for (int32_t id : ids) {
    if (id < 0 || id >= v)
      return invalid_argument(
          fmt::format("teacher forcing: token id {} outside the vocabulary of {}", id, v));
  }
  if (context > 0 && static_cast<int64_t>(ids.size()) > model.spec.max_position_embeddings &&
      model.spec.max_position_embeddings > 0)
    return invalid_argument("teacher forcing: the sequence is longer than the model's context");
  KvCache cache = engine->new_cache();
  SequenceStep step{&cache, ids};
  D0_ASSIGN_OR_RETURN(ConstMatrix logits, engine->forward(std::span<const SequenceStep>(&step, 1)));
  // logits: [ids.size(), vocab]; row P-1+i predicts tokens[i].
  FloatMatrix out(static_cast<int64_t>(tokens.size()), v);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* row = logits.row(static_cast<int64_t>(prompt.size() - 1 + i));
    float mx = row[0];
    for (int64_t k = 1; k < v; ++k) mx = std::max(mx, row[k]);
    double sum = 0;
    for (int64_t k = 0; k < v; ++k) sum += std::exp(static_cast<double>(row[k]) - mx);
    const double lse = mx + std::log(sum);
    auto dst = out.row(static_cast<int64_t>(i));
    for (int64_t k = 0; k < v; ++k) dst[k] = static_cast<float>(row[k] - lse);
  }
  return out;
}

std::optional<int32_t> AuditSession::resolve(const ReplyToken& t, std::span<const float> ref_row) const {
  if (t.id) {
    if (*t.id >= 0 && *t.id < vocab()) return *t.id;
    return std::nullopt;
  }
  auto it = ids_by_text.find(t.text);
  if (it == ids_by_text.end() && t.bytes) it = ids_by_text.find(*t.bytes);
  if (it == ids_by_text.end() || it->second.empty()) return std::nullopt;
  if (it->second.size() == 1 || ref_row.empty()) return it->second.front();
  int32_t best = it->second.front();
  for (int32_t id : it->second) {
    if (id < static_cast<int32_t>(ref_row.size()) && ref_row[id] > ref_row[best]) best = id;
  }
  return best;
}

int64_t AuditSession::vocab() const {
  return model.spec.vocab_size;
}

std::string AuditSession::token_text(int32_t id) const {
  if (id < 0) return "(none)";
  const int32_t one[] = {id};
  return fmt::format(
      "{} {}", id,
      nlohmann::json(tok->decode(one)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Result<std::shared_ptr<AuditSession>> open_audit(const AuditOptions& options) {
  auto s = std::make_shared<AuditSession>();
  s->options = options;
  D0_RETURN_IF_ERROR(split_target_url(options.target, s->base_url, s->path_prefix));
  if (options.concurrency.empty()) return invalid_argument("--concurrency: at least one level");
  // The reference: float32 activations and KV cache, the weights dequantized exactly.
  D0_ASSIGN_OR_RETURN(s->model, load_model(options.model, load_options_for(ActivationPrecision::kF32)));
  const std::string tok_path = options.tokenizer.empty() ? options.model : options.tokenizer;
  auto tok = tokenizer::load_tokenizer(tok_path);
  if (!tok.is_ok()) return tok.status().with_context("the tokenizer of " + tok_path);
  s->tok = *tok;
  if (!s->tok->chat_template())
    return not_found(tok_path + ": no chat template (the audit renders conversations)");
  EngineOptions eo;
  eo.kv_dtype = KvDtype::kF32;
  D0_ASSIGN_OR_RETURN(s->reference, open_engine(s->model, "cpu", eo));
  // The target's weight format and Day0's own run in it, checked before anything is sent: a format
  // the audit cannot measure bounds for is an error, never a silent guess.
  D0_ASSIGN_OR_RETURN(s->logprob_plan.format, resolve_target_format(options.model, options.target_format));
  D0_ASSIGN_OR_RETURN(s->logprob_plan.own,
                      plan_own_run(options.model, s->logprob_plan.format, options.quantized_reference));
  // A token's text alone and after another token: decoders that strip a leading space at the start
  // of a sequence (SentencePiece's) give "Rules" for both "Rules" and "▁Rules" alone, while servers
  // name the second " Rules" as it reads in the text; both spellings lead to the candidates.
  const std::vector<int32_t> lead = s->tok->encode("a");
  const std::string lead_text =
      lead.empty() ? std::string() : s->tok->decode(std::span<const int32_t>(lead.data(), 1));
  for (int32_t id = 0; id < static_cast<int32_t>(std::min<int64_t>(s->vocab(), s->tok->vocab_size())); ++id) {
    const int32_t one[] = {id};
    const std::string alone = s->tok->decode(one);
    s->ids_by_text[alone].push_back(id);
    if (lead.empty()) continue;
    const int32_t two[] = {lead[0], id};
    const std::string after = s->tok->decode(two);
    if (after.size() >= lead_text.size() && after.compare(0, lead_text.size(), lead_text) == 0) {
      const std::string in_text = after.substr(lead_text.size());
      if (in_text != alone) s->ids_by_text[in_text].push_back(id);
    }
  }

  // The served model: --served-model-name, else the first of /v1/models.
  Exchange models = s->get("/v1/models");
  if (models.status == 0)
    return Status(StatusCode::kFailedPrecondition,
                  "--target " + options.target + ": GET /v1/models: " + models.describe());
  nlohmann::json models_doc;
  if (models.ok()) {
    auto doc = parse_json_text(models.body, "/v1/models", JsonLimits{size_t{4} << 20, 16});
    if (doc.is_ok()) models_doc = *doc;
  }
  s->served_model = options.served_model_name;
  if (s->served_model.empty()) {
    if (models_doc.is_object() && models_doc.contains("data") && models_doc["data"].is_array() &&
        !models_doc["data"].empty() && models_doc["data"][0].is_object() &&
        models_doc["data"][0].contains("id") && models_doc["data"][0]["id"].is_string()) {
      s->served_model = models_doc["data"][0]["id"].get<std::string>();
    } else {
      return invalid_argument("the target's GET /v1/models (" + models.describe() +
                              ") names no model: pass --served-model-name");
    }
  }
  // The context the target enforces: --context, /v1/models max_model_len (vLLM, SGLang, day0),
  // llama-server's /props n_ctx, else the model's own.
  if (options.context > 0) {
    s->context = options.context;
    s->context_source = "--context";
  } else if (models_doc.is_object() && models_doc.contains("data") && models_doc["data"].is_array() &&
             !models_doc["data"].empty() && json_int(models_doc["data"][0], {"max_model_len"}) > 0) {
    s->context = json_int(models_doc["data"][0], {"max_model_len"});
    s->context_source = "/v1/models max_model_len";
  } else {
    Exchange props = s->get("/props");
    int64_t n_ctx = 0;
    if (props.ok()) {
      auto doc = parse_json_text(props.body, "/props", JsonLimits{size_t{4} << 20, 16});
      if (doc.is_ok()) {
        n_ctx = json_int(*doc, {"default_generation_settings", "n_ctx"});
        if (n_ctx == 0) n_ctx = json_int(*doc, {"n_ctx"});
      }
    }
    if (n_ctx > 0) {
      s->context = n_ctx;
      s->context_source = "/props n_ctx";
    } else {
      s->context = s->model.spec.max_position_embeddings;
      s->context_source = "the model's max_position_embeddings (the target says none)";
    }
  }
  return s;
}

void run_audit_stages(AuditSession& session, std::vector<report::StageResult>& stages,
                      const std::function<void(const report::StageResult&)>& on_stage) {
  for (const auto& entry : audit_stage_table()) {
    report::StageResult stage;
    stage.id = entry.descriptor.id;
    stage.title = entry.descriptor.title;
    const auto start = std::chrono::steady_clock::now();
    try {
      entry.run(session, stage);
    } catch (const std::exception& e) {
      stage.verdict = report::Verdict::kFail;
      stage.reason = std::string("internal error: ") + e.what();
    }
    stage.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_stage) on_stage(stage);
    stages.push_back(std::move(stage));
  }
}

Result<report::Report> run_audit(const AuditOptions& options,
                                 const std::function<void(const report::StageResult&)>& on_stage) {
  D0_ASSIGN_OR_RETURN(std::shared_ptr<AuditSession> session, open_audit(options));
  report::Report rep;
  rep.model = options.model;
  rep.family = session->model.spec.family;
  rep.day0_version = DAY0_VERSION;
  const auto now = std::chrono::system_clock::now();
  rep.created_at =
      fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::chrono::system_clock::to_time_t(now)));
  rep.backend = "target " + options.target;
  rep.machine = report::to_json(report::read_machine_info());
  run_audit_stages(*session, rep.stages, on_stage);
  rep.strict = options.strict;
  if (rep.strict) report::apply_strict(rep.stages);
  rep.skipped_required = report::skipped_required_stages(rep.stages);
  rep.verdict = report::overall_verdict(rep.stages, rep.regressions);
  return rep;
}

Result<std::vector<int>> parse_concurrency(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(pos, end - pos);
    int v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size() || v < 1 || v > 4096)
      return invalid_argument("--concurrency " + text +
                              ": expected levels in [1, 4096] like 1,4,16,64, found \"" + part + "\"");
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

Result<double> parse_duration(const std::string& text) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const std::string unit(p, text.data() + text.size());
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  if (unit == "m" || unit == "min") scale = 60;
  if (unit == "h") scale = 3600;
  if (text.empty() || ec != std::errc() || scale == 0 || !std::isfinite(v) || v < 0 ||
      v * scale > 7 * 86400.0)
    return invalid_argument("--soak " + text + ": expected a duration like 90s, 15m or 2h (at most a week)");
  return v * scale;
}

}  // namespace day0::audit
