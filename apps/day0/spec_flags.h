#pragma once
// --spec, --spec-tokens and --spec-draft: speculative decoding's flags, declared and checked alike by
// `run`, `serve` and `bench` (runtime/speculative.h).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "day0/core/status.h"
#include "day0/runtime/speculative.h"

namespace day0::cli {

struct SpecFlags {
  std::string source = "none";  // none, ngram, self-int4, mtp
  int64_t tokens = 4;           // drafts verified per step
  std::string draft;            // self-int4's folder ("": quantized at load)
  CLI::Option* tokens_option = nullptr;
  bool tokens_given() const { return tokens_option != nullptr && tokens_option->count() > 0; }
  DraftSource draft_source() const;  // source as the enum
};

// Declares --spec, --spec-tokens and --spec-draft on `app`.
void add_spec_flags(CLI::App& app, SpecFlags& flags);

// What every command refuses, before anything loads: --spec-tokens without a draft source, --spec-draft
// without self-int4.
Status check_spec_flags(const SpecFlags& flags);

// "A of D drafts accepted (R%), M accepted per verification step (S steps), by position P1% P2% ...".
std::string spec_summary(const SpecStats& stats);

}  // namespace day0::cli
