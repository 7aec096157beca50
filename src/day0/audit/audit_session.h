#pragma once
// What the audit's stages share: the reference (MODEL's weights on the cpu backend in float32, its
// tokenizer and chat template) and the connection to the target, with the requests each stage sends.
// Internal to src/day0/audit.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/align/float_matrix.h"
#include "day0/audit/audit.h"
#include "day0/audit/logprob_bounds.h"
#include "day0/audit/target_reply.h"
#include "day0/runtime/model_loader.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::audit {

// One HTTP exchange with the target.
struct Exchange {
  int status = 0;  // 0: no response
  std::string body;
  std::string error;  // why there was no response
  int retries = 0;    // 5xx answers or lost connections retried before this one
  bool ok() const { return status >= 200 && status < 300; }
  std::string describe() const;  // "HTTP 400: message" / "no response (why)"
};

// The logprob stage's plan: the target's weight format and how Day0's own run in it is made (the
// bounds are measured in the stage, logprob_bounds.h).
struct LogprobPlan {
  TargetFormat format;
  OwnRunPlan own;
  int64_t top_k = 5;  // the target's greedy choice must be within the reference's top-k
};

struct AuditSession {
  AuditOptions options;
  std::string base_url;          // scheme://host:port, no trailing slash
  std::string path_prefix = "";  // "/v1" routes are appended to this (a URL path the user gave)
  std::string served_model;
  int64_t context = 0;
  std::string context_source;
  LoadedModel model;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  EngineHandle reference;
  LogprobPlan logprob_plan;
  // Single-token texts -> ids, for servers that name tokens by text only.
  std::unordered_map<std::string, std::vector<int32_t>> ids_by_text;
  int64_t total_retries = 0;

  // POST a JSON body to `path` ("/v1/chat/completions", "/tokenize"): 5xx answers and lost
  // connections are retried up to twice (counted), so that a flaky target fails the speed stage's
  // error count rather than a correctness stage. raw_body: sent as is (bad-request checks).
  Exchange post(const std::string& path, const nlohmann::json& body, bool retry = true) const;
  Exchange post_raw(const std::string& path, const std::string& body, bool retry = true) const;
  Exchange get(const std::string& path) const;

  // A chat request body with the served model, greedy, no streaming.
  nlohmann::json chat_body(const nlohmann::ordered_json& messages, int max_tokens) const;

  // Day0's rendering of `messages` (+ tools) with the generation prompt: the text and its ids.
  struct Rendered {
    std::string text;
    std::vector<int32_t> ids;
  };
  Result<Rendered> render(const nlohmann::ordered_json& messages,
                          const nlohmann::ordered_json& tools = nullptr) const;

  // Teacher forcing: log-softmax rows [tokens.size(), vocab], row i the reference's distribution of
  // token i after prompt + tokens[0..i). `engine`: another engine of the same vocabulary (Day0's own
  // run in the target's format); null: the reference.
  Result<FloatMatrix> teacher_force(const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens,
                                    Engine* engine = nullptr);

  // The id of a token the target named: its id when given (checked against the vocabulary), else the
  // single-token text's ids, the one the reference row (log-softmax, may be empty) rates highest.
  std::optional<int32_t> resolve(const ReplyToken& t, std::span<const float> ref_row) const;

  int64_t vocab() const;
  std::string token_text(int32_t id) const;  // for messages: the decoded text, quoted
};

}  // namespace day0::audit
