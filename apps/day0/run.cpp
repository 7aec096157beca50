// day0 run: generate from token ids with timing, log-probabilities and an optional reference dump.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "day0/align/align_runner.h"
#include "day0/align/reference_dump.h"
#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/core/json_reader.h"
#include "day0/dist/expert_load.h"
#include "day0/dist/expert_placement.h"
#include "day0/runtime/distributed_model.h"
#include "day0/runtime/draft_model.h"
#include "day0/runtime/engine_settings.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/mtp_drafter.h"
#include "day0/runtime/speculative.h"
#include "day0/serve/bench_client.h"
#include "day0/tokenizer/prompt_ids.h"
#include "day0/tokenizer/text_prompt.h"
#include "day0/tokenizer/tokenizer.h"
#include "spec_flags.h"

namespace day0::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt_ids;
  std::string prompt;     // text, encoded with the model's tokenizer
  std::string chat;       // file with chat messages (JSON), rendered with the chat template
  std::string tokenizer;  // folder with the tokenizer files (default: the model folder)
  bool ignore_eos = false;
  bool interactive = false;  // chat turn by turn: user lines from stdin, replies streamed
  int64_t max_new = 16;
  std::string backend = "cpu";
  std::string dtype = "f32";
  std::string kv_dtype = "bf16";  // the engine default; printed with every result
  std::string page_cache = "keep";
  bool greedy = false;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int64_t logprobs = -1;  // -1: off; 0: the chosen token only; N: and the top N
  std::string dump;
  bool json = false;
  int threads = 0;
  // Distributed (under mpirun): world = tp x pp x ep ranks.
  int tp = 1;
  int pp = 1;
  int ep = 1;
  int micro_batches = 0;  // pipeline micro-batches a step is cut into (0: two per stage)
  std::string moe_combine = "all-reduce";
  double comm_timeout = 30.0;
  bool comm_overlap = false;
  int dp_attention =
      1;  // attention data parallelism (= ep): every EP rank runs the prompt as its own request
  // Redundant experts (EPLB) under --ep, placed by a recorded load (dist/expert_load.h).
  int64_t redundant_experts = 0;
  std::string expert_load;
  std::string record_expert_load;  // writes the run's per-layer expert picks here
  // Speculative decoding: the draft source, drafts per step, and for self-int4 a folder made by
  // `day0 quantize --to int4` (empty: the model quantized at load).
  SpecFlags spec;
};

// --spec and its companions, checked before anything loads.
Status check_spec_options(const RunOptions& o) {
  D0_RETURN_IF_ERROR(check_spec_flags(o.spec));
  if (o.spec.source != "none" && o.interactive) return unsupported("--spec with --interactive: not yet");
  if (o.spec.source != "none" && (o.tp > 1 || o.pp > 1 || o.ep > 1))
    return unsupported("--spec with --tp/--pp/--ep above 1: not yet");
  return Status::ok();
}

// Test hook for the fault tests (tests/cli_multi): DAY0_TEST_FAULT=kill:R:S (or stop:R:S) makes rank R
// send itself SIGKILL (SIGSTOP: a hung rank) when it has generated S tokens.
struct InjectedFault {
  int signal = 0;
  int rank = -1;
  int64_t step = -1;
};
InjectedFault injected_fault() {
  InjectedFault f;
  const char* env = std::getenv("DAY0_TEST_FAULT");
  if (env == nullptr) return f;
  char kind[8] = {};
  long long step = -1;
  if (std::sscanf(env, "%7[a-z]:%d:%lld", kind, &f.rank, &step) != 3) return {};
  f.step = step;
  f.signal = std::string(kind) == "kill" ? SIGKILL : std::string(kind) == "stop" ? SIGSTOP : 0;
  return f;
}

// Chat turn by turn: each line read from stdin is a user message; the whole conversation goes through
// the chat template every turn and the reply is streamed. Ends at EOF or an empty line.
int run_interactive(const RunOptions& o, const LoadedModel& model, Engine& engine) {
  const char* name = "run";
  auto loaded = tokenizer::load_tokenizer(o.tokenizer.empty() ? o.model : o.tokenizer);
  if (!loaded.is_ok()) return report_error(name, loaded.status());
  const tokenizer::Tokenizer& tok = **loaded;
  const bool tty = isatty(STDIN_FILENO) != 0;
  SamplingParams sp;
  sp.greedy = o.greedy || o.temperature <= 0.0f;
  sp.temperature = o.temperature;
  sp.top_p = o.top_p;
  sp.top_k = o.top_k;
  sp.seed = o.seed;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  const std::vector<int32_t> stops = tok.special_tokens().stop_ids;
  // The conversation's cache is kept between turns: each turn pre-fills only what the template adds
  // after the longest prefix already cached (tokens fed so far are in `cached`).
  KvCache cache = engine.new_cache();
  std::vector<int32_t> cached;
  fmt::print(stderr, "run: {} activations, {} KV cache (blocks of {} tokens)\n",
             precision_name(engine.options().precision), kv_dtype_name(engine.options().kv_dtype),
             engine.options().kv_block_tokens);
  std::string line;
  for (int turn = 0;; ++turn) {
    if (tty) fmt::print("user> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line.empty()) break;
    messages.push_back({{"role", "user"}, {"content", line}});
    auto ids = encode_chat_prompt(tok, messages, model.spec.vocab_size);
    if (!ids.is_ok()) return report_error(name, ids.status());
    StreamingDecoder decoder(tok);
    fmt::print("assistant> ");
    auto on_token = [&](const GenerationStep& step) {
      if (!o.ignore_eos && std::find(stops.begin(), stops.end(), step.chosen.token) != stops.end())
        return false;
      fmt::print("{}", decoder.push(step.chosen.token));
      std::fflush(stdout);
      return true;
    };
    sp.seed = o.seed + static_cast<uint64_t>(turn);
    size_t common = 0;
    while (common < cached.size() && common < ids->size() && cached[common] == (*ids)[common]) ++common;
    if (common == ids->size() && common > 0) --common;  // at least one new token feeds the first pick
    // A recurrent state (hybrid models) goes back only to a snapshot: the last whole block before.
    if (!cache.can_truncate(static_cast<int64_t>(common)) && cache.snapshot_tokens() >= 0 &&
        cache.snapshot_tokens() < static_cast<int64_t>(common))
      common = static_cast<size_t>(cache.snapshot_tokens());
    if (!cache.truncate(static_cast<int64_t>(common)).is_ok()) {  // a window dropped what we need
      cache = engine.new_cache();
      common = 0;
    }
    cached.resize(common);
    GenerationRequest request;
    request.prompt = std::span<const int32_t>(*ids).subspan(common);
    request.max_new = o.max_new;
    request.sampling = sp;
    request.cache = &cache;
    request.on_token = on_token;
    const auto reply = generate_batch(engine, std::span(&request, 1));
    if (!reply.is_ok()) return report_error(name, reply.status());
    // Fed: the new prompt tokens and every generated token but the last.
    cached.insert(cached.end(), ids->begin() + static_cast<std::ptrdiff_t>(common), ids->end());
    const auto& steps = reply->front().steps;
    for (size_t i = 0; i + 1 < steps.size(); ++i) cached.push_back(steps[i].chosen.token);
    fmt::print("{}\n", decoder.finish());
    messages.push_back({{"role", "assistant"}, {"content", tok.decode(decoder.ids(), true)}});
  }
  return kExitOk;
}

// The integer projections' path, with the dot-product instruction of the cpu backend's SIMD level.
std::string int_weight_line(const LoadedModel& model, const std::string& backend) {
  if (model.weights->int_projections.n == 0 || backend == "reference") return model.int_weight_path;
  const auto level = default_simd_level();
  if (!level.is_ok()) return model.int_weight_path;
  return fmt::format("{}, {}", model.int_weight_path, cpu::kernels_for(*level).int_dot_name);
}

// Per-rank figures of a distributed run, gathered on every rank: weight bytes (split, replicated, the
// routed experts' part of split), the experts held [begin, end), communication wait seconds, calls and
// bytes sent over all of the rank's groups.
struct RankFigures {
  double split_bytes = 0, replicated_bytes = 0, expert_bytes = 0;
  double experts_begin = 0, experts_end = 0;
  // The (token, expert) picks this rank computed over all MoE layers, and those on its replicas.
  double picks_computed = 0, replica_picks_computed = 0;
  double copies_held = 0;  // redundant experts: the copies of other ranks' experts, over all MoE layers
  double wait_seconds = 0, calls = 0, bytes_sent = 0;
  double overlapped_calls = 0, overlapped_compute_seconds = 0;
  // Pipeline parallelism: the layers [begin, end) this rank runs, its time inside forward and its
  // waits in the pipeline group (activations, logits): the bubble.
  double layers_begin = 0, layers_end = 0;
  double forward_seconds = 0, activation_wait_seconds = 0, logits_wait_seconds = 0, micro_batches = 0;
  // The idle ratio's terms, both of this rank: its communication wait while generating (load-time
  // waits excluded) over its own prefill + decode time.
  double generation_wait_seconds = 0, busy_seconds = 0;
};

nlohmann::json spec_json(const RunOptions& o, const SpecStats& st) {
  nlohmann::json j = serve::spec_stats_json(st);
  j["source"] = o.spec.source;
  j["draft"] = o.spec.draft.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.spec.draft);
  j["tokens"] = o.spec.tokens;
  j["draft_seconds"] = st.draft_seconds;
  return j;
}

int run_command(const RunOptions& o) {
  const char* name = "run";
  auto options = engine_options_from({.dtype = o.dtype,
                                      .kv_dtype = o.kv_dtype,
                                      .layout = {o.tp, o.pp, o.ep},
                                      .dp_attention = o.dp_attention,
                                      .moe_combine = o.moe_combine,
                                      .comm_overlap = o.comm_overlap,
                                      .micro_batches = o.micro_batches});
  if (!options.is_ok()) return report_error(name, options.status());
  EngineOptions eo = *options;
  if (const Status st = check_spec_options(o); !st.is_ok()) return report_error(name, st);
  if (o.interactive && (o.tp > 1 || o.pp > 1 || o.ep > 1))
    return report_error(name, unsupported("--interactive with --tp/--pp/--ep above 1: not yet"));
  if (o.pp > 1 && !o.dump.empty()) {
    return report_error(name,
                        unsupported("--dump with --pp above 1: each stage holds only its layers' hidden "
                                    "states; not yet (run the dump as one process)"));
  }
  if (!o.record_expert_load.empty() && o.pp > 1) {
    return report_error(name,
                        unsupported("--record-expert-load with --pp above 1: each stage routes only its "
                                    "layers; not yet (record as one process or under --tp / --ep)"));
  }
  eo.count_expert_picks = o.ep > 1 || !o.record_expert_load.empty();
  eo.mtp_layers = o.spec.draft_source() == DraftSource::kMtp;  // their weights are bound only then
  LoadOptions load_options = load_options_for(eo.precision);
  load_options.page_cache = page_cache_from(o.page_cache);
  load_options.mtp_layers = eo.mtp_layers;
  auto distributed =
      load_distributed_model(o.model, dist::ParallelLayout{o.tp, o.pp, o.ep}, load_options,
                             dist::CommOptions{.timeout_seconds = o.comm_timeout},
                             RedundantExperts{.count = o.redundant_experts, .load_file = o.expert_load});
  if (!distributed.is_ok()) {
    return report_error(
        name, eo.mtp_layers ? distributed.status().with_context("--spec mtp") : distributed.status());
  }
  DistributedModel& dm = *distributed;
  LoadedModel* model = &dm.model;
  if (!o.record_expert_load.empty() && !model->spec.moe) {
    return report_error(
        name, invalid_argument(fmt::format("--record-expert-load {}: the model has no routed experts",
                                           o.record_expert_load)));
  }
  const bool lead = dm.rank() == 0;  // prints the results; every rank computes them
  // After loading, a failure on one rank (a dead peer) must end every rank: none may wait forever.
  auto fail = [&](const Status& st) {
    if (!dm.distributed()) return report_error(name, st);
    const int code = report_error(fmt::format("run (rank {})", dm.rank()), st);
    dist::abort_world(code);
  };
  attach_process_groups(eo, dm.groups);
  for (dist::Communicator* g : dist::compute_groups(dm.groups)) g->reset_stats();
  if (o.interactive) {
    auto engine = open_engine(*model, o.backend, eo, o.threads);
    if (!engine.is_ok()) return fail(engine.status());
    return run_interactive(o, *model, *engine->engine);
  }
  const bool text_mode = !o.prompt.empty() || !o.chat.empty();
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::vector<std::vector<int64_t>> prompt_list;
  if (text_mode) {
    auto loaded = tokenizer::load_tokenizer(o.tokenizer.empty() ? o.model : o.tokenizer);
    if (!loaded.is_ok()) return fail(loaded.status());
    tok = *loaded;
    Result<std::vector<int32_t>> ids = std::vector<int32_t>{};
    if (!o.prompt.empty()) {
      ids = encode_text_prompt(*tok, o.prompt, model->spec.vocab_size);
    } else {
      auto text = read_bounded_file(o.chat, kChatJsonLimits.max_bytes);
      if (!text.is_ok()) return fail(text.status());
      auto chat = parse_ordered_json_text(*text, o.chat, kChatJsonLimits);
      if (!chat.is_ok()) return fail(chat.status());
      ids = encode_chat_prompt(*tok, *chat, model->spec.vocab_size);
      if (!ids.is_ok()) return fail(ids.status().with_context(o.chat));
    }
    if (!ids.is_ok()) return fail(ids.status());
    prompt_list.emplace_back(ids->begin(), ids->end());
  } else {
    auto parsed = parse_prompt_ids(o.prompt_ids, model->spec.vocab_size);
    if (!parsed.is_ok()) return fail(parsed.status());
    prompt_list = std::move(parsed).value();
  }
  const auto* prompts = &prompt_list;
  if (prompts->size() != 1) return fail(invalid_argument("run takes one prompt (no ';')"));
  auto engine = open_engine(*model, o.backend, eo, o.threads);
  if (!engine.is_ok()) return fail(engine.status());
  std::unique_ptr<SelfDraft> self_draft;
  std::unique_ptr<Drafter> drafter;
  if (o.spec.source == "ngram") drafter = std::make_unique<NgramDrafter>();
  if (eo.mtp_layers) drafter = std::make_unique<MtpDrafter>(*engine->engine);
  if (o.spec.source == "self-int4") {
    auto opened = open_self_draft(*model, o.spec.draft, *engine->backend, eo);
    if (!opened.is_ok()) return fail(opened.status());
    self_draft = std::move(opened).value();
    drafter = std::make_unique<ModelDrafter>(*self_draft->engine);
  }

  SamplingParams sp;
  sp.greedy = o.greedy || o.temperature <= 0.0f;
  sp.temperature = o.temperature;
  sp.top_p = o.top_p;
  sp.top_k = o.top_k;
  sp.seed = o.seed;
  const std::vector<int32_t> prompt(prompts->front().begin(), prompts->front().end());
  // Text mode: stop at the model's stop tokens, and on a terminal print the text as it comes.
  const bool stream = lead && text_mode && !o.json && isatty(STDOUT_FILENO) != 0;
  std::unique_ptr<StreamingDecoder> decoder;
  if (tok) decoder = std::make_unique<StreamingDecoder>(*tok);
  TokenCallback on_token;
  if (tok) {
    const std::vector<int32_t> stops = tok->special_tokens().stop_ids;
    on_token = [&, stops](const GenerationStep& step) {
      const bool stop =
          !o.ignore_eos && std::find(stops.begin(), stops.end(), step.chosen.token) != stops.end();
      if (!stop) {
        const std::string piece = decoder->push(step.chosen.token);
        if (stream) {
          fmt::print("{}", piece);
          std::fflush(stdout);
        }
      }
      return !stop;
    };
  }
  if (stream) fmt::print("{}", o.prompt.empty() ? "" : o.prompt);
  const InjectedFault fault = injected_fault();
  int64_t generated_so_far = 0;
  auto step_hook = [&](const GenerationStep& step) {
    if (fault.signal != 0 && fault.rank == dm.rank() && ++generated_so_far == fault.step)
      std::raise(fault.signal);
    return on_token ? on_token(step) : true;
  };
  double wait_before_generation = 0;
  for (const dist::Communicator* group : dist::compute_groups(dm.groups))
    wait_before_generation += group->stats().wait_seconds;
  std::optional<SpecStats> spec_stats;
  Result<GenerationResult> generated = GenerationResult{};
  if (drafter) {
    GenerationRequest request;
    request.prompt = prompt;
    request.max_new = o.max_new;
    request.sampling = sp;
    request.top_logprobs = std::max<int64_t>(o.logprobs, 0);
    request.on_token = step_hook;
    auto spec =
        generate_speculative(*engine->engine, request, *drafter, SpecOptions{.tokens = o.spec.tokens});
    if (!spec.is_ok()) return fail(spec.status());
    spec_stats = spec->stats;
    generated = std::move(spec->result);
  } else {
    generated = generate(*engine->engine, prompt, o.max_new, sp, std::max<int64_t>(o.logprobs, 0), step_hook);
  }
  if (!generated.is_ok()) return fail(generated.status());
  const GenerationResult& g = *generated;
  if (!o.record_expert_load.empty() && lead) {
    dist::ExpertLoad load{.n_experts = model->spec.moe->n_experts};
    const ExpertPickCounts& picks = engine->engine->expert_picks();
    for (int64_t l = 0; l < model->spec.n_layers; ++l) {
      if (!model->spec.layers[static_cast<size_t>(l)].moe) continue;
      std::vector<int64_t> counts(static_cast<size_t>(load.n_experts), 0);
      if (static_cast<size_t>(l) < picks.routed.size() && !picks.routed[static_cast<size_t>(l)].empty())
        counts = picks.routed[static_cast<size_t>(l)];
      load.layers[l] = std::move(counts);
    }
    if (const Status st = dist::write_expert_load(o.record_expert_load, load, o.model); !st.is_ok())
      return fail(st);
    int64_t total = 0;
    for (const auto& [l, counts] : load.layers)
      total += std::accumulate(counts.begin(), counts.end(), int64_t{0});
    fmt::print(stderr, "expert load: {} picks over {} MoE layers written to {}\n", total, load.layers.size(),
               o.record_expert_load);
  }
  std::string completion;
  if (decoder) {
    const std::string rest = decoder->finish();
    if (stream) fmt::print("{}\n\n", rest);
    completion = tok->decode(decoder->ids(), /*skip_special_tokens=*/true);
  }

  if (!o.dump.empty()) {
    ReferenceDump d;
    d.metadata["producer"] = "day0 run (" + o.backend + ")";
    d.metadata["version"] = DAY0_VERSION;
    // Every setting that shaped the numbers, so that `align` can repeat them (reference_dump.h).
    d.metadata["dtype"] = o.dtype;
    d.metadata["kv_dtype"] = kv_dtype_name(eo.kv_dtype);
    d.metadata["backend"] = o.backend;
    if (model->spec.mla) {
      d.metadata["mla"] = eo.mla == MlaMode::kNaive      ? "naive"
                          : eo.mla == MlaMode::kAbsorbed ? "absorbed"
                                                         : "auto";
    }
    d.metadata["tp"] = std::to_string(o.tp);
    d.metadata["ep"] = std::to_string(o.ep);
    if (o.ep > 1) {
      d.metadata["moe_combine"] = moe_combine_name(eo.moe_combine);
      d.metadata["dp_attention"] = eo.data_parallel_attention ? "true" : "false";
      d.metadata["comm_overlap"] = eo.comm_overlap ? "true" : "false";
    }
    auto dumped = run_prompt(*engine->engine, prompts->front(), sp.greedy ? o.max_new : 0);
    if (!dumped.is_ok()) return fail(dumped.status());
    d.prompts.push_back(std::move(dumped).value());
    if (lead) {
      const Status st = write_reference_dump(d, o.dump);
      if (!st.is_ok()) return fail(st);
    }
  }

  // Every rank's weight bytes and communication time, gathered (a collective: every rank is here).
  const BoundWeightBytes bound = model->weights->bound;
  RankFigures mine{.split_bytes = static_cast<double>(bound.split),
                   .replicated_bytes = static_cast<double>(bound.replicated),
                   .expert_bytes = static_cast<double>(bound.experts)};
  if (model->spec.moe) {
    const ExpertShard es = model->weights->expert_shard;
    const dist::ExpertBlock held = dist::expert_block(model->spec.moe->n_experts, es.size, es.rank);
    mine.experts_begin = static_cast<double>(held.begin);
    mine.experts_end = static_cast<double>(held.end);
    for (const LayerWeights& lw : model->weights->layers) {
      if (!lw.moe.held_experts.empty())
        mine.copies_held +=
            static_cast<double>(lw.moe.held_experts.size()) - static_cast<double>(held.size());
    }
    const ExpertPickCounts& picks = engine->engine->expert_picks();
    for (size_t l = 0; l < picks.computed.size(); ++l) {
      for (size_t slot = 0; slot < picks.computed[l].size(); ++slot) {
        const auto n = static_cast<double>(picks.computed[l][slot]);
        mine.picks_computed += n;
        if (static_cast<int64_t>(slot) >= held.size()) mine.replica_picks_computed += n;  // after the block
      }
    }
  }
  for (const dist::Communicator* group : dist::compute_groups(dm.groups)) {
    mine.wait_seconds += group->stats().wait_seconds;
    mine.calls += static_cast<double>(group->stats().calls);
    mine.bytes_sent += static_cast<double>(group->stats().bytes_sent);
    mine.overlapped_calls += static_cast<double>(group->stats().overlapped_calls);
    mine.overlapped_compute_seconds += group->stats().overlapped_compute_seconds;
  }
  mine.generation_wait_seconds = mine.wait_seconds - wait_before_generation;
  const ShardRange layers = engine->engine->held_layers();
  const PipelineFigures& pf = engine->engine->pipeline_figures();
  mine.layers_begin = static_cast<double>(layers.begin);
  mine.layers_end = static_cast<double>(layers.end);
  mine.forward_seconds = pf.forward_seconds;
  mine.activation_wait_seconds = pf.activation_wait_seconds;
  mine.logits_wait_seconds = pf.logits_wait_seconds;
  mine.micro_batches = static_cast<double>(pf.micro_batches);
  mine.busy_seconds = g.prefill_seconds + g.decode_seconds;
  std::vector<RankFigures> ranks(static_cast<size_t>(dm.groups.world->size()));
  if (const Status st = dm.groups.world->all_gather_of<RankFigures>(std::span(&mine, 1), ranks); !st.is_ok())
    return fail(st);
  if (!lead) return kExitOk;
  auto idle_ratio = [](const RankFigures& r) {
    return r.busy_seconds > 0 ? r.generation_wait_seconds / r.busy_seconds : 0.0;
  };
  // A stage's bubble: its waits in the pipeline group over its time inside forward.
  auto bubble = [](const RankFigures& r) {
    return r.forward_seconds > 0 ? (r.activation_wait_seconds + r.logits_wait_seconds) / r.forward_seconds
                                 : 0.0;
  };
  double mean_bubble = 0;
  for (const RankFigures& r : ranks) mean_bubble += bubble(r) / static_cast<double>(ranks.size());

  const double ttft_ms = 1000 * g.prefill_seconds;
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["backend"] = o.backend;
    j["dtype"] = o.dtype;
    j["kv_dtype"] = kv_dtype_name(eo.kv_dtype);
    if (!model->int_weight_path.empty()) j["int_weights"] = int_weight_line(*model, o.backend);
    j["prompt_tokens"] = g.prompt_tokens;
    j["finish_reason"] = g.finish_reason;
    j["tokens"] = g.tokens();
    if (decoder) j["text"] = completion;
    if (o.logprobs >= 0) {
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& s : g.steps) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& t : s.top) top.push_back({{"token", t.token}, {"logprob", t.logprob}});
        steps.push_back({{"token", s.chosen.token}, {"logprob", s.chosen.logprob}, {"top", top}});
      }
      j["logprobs"] = steps;
    }
    j["timing"] = {{"ttft_ms", ttft_ms},
                   {"prefill_tokens_per_second", g.prefill_tokens_per_second()},
                   {"decode_tokens_per_second", g.decode_tokens_per_second()},
                   {"decode_seconds", g.decode_seconds}};
    if (spec_stats) j["speculative"] = spec_json(o, *spec_stats);
    if (!o.dump.empty()) j["dump"] = o.dump;
    nlohmann::json per_rank = nlohmann::json::array();
    for (size_t r = 0; r < ranks.size(); ++r) {
      const dist::RankCoordinates at = dist::coordinates_of({o.tp, o.pp, o.ep}, static_cast<int>(r));
      nlohmann::json one = {{"rank", r},
                            {"tp_rank", at.tp},
                            {"pp_rank", at.pp},
                            {"ep_rank", at.ep},
                            {"layers", {{"begin", ranks[r].layers_begin}, {"end", ranks[r].layers_end}}},
                            {"weight_bytes", ranks[r].split_bytes + ranks[r].replicated_bytes},
                            {"weight_bytes_split", ranks[r].split_bytes},
                            {"weight_bytes_replicated", ranks[r].replicated_bytes},
                            {"comm_wait_seconds", ranks[r].wait_seconds},
                            {"comm_calls", ranks[r].calls},
                            {"comm_bytes_sent", ranks[r].bytes_sent},
                            {"comm_idle_ratio", idle_ratio(ranks[r])},
                            {"comm_overlapped_calls", ranks[r].overlapped_calls},
                            {"comm_overlapped_compute_seconds", ranks[r].overlapped_compute_seconds}};
      if (model->spec.moe) {
        one["weight_bytes_experts"] = ranks[r].expert_bytes;
        one["experts"] = {{"begin", ranks[r].experts_begin}, {"end", ranks[r].experts_end}};
        if (o.ep > 1) {
          one["expert_picks_computed"] = ranks[r].picks_computed;
          one["replica_picks_computed"] = ranks[r].replica_picks_computed;
        }
        // Its replicas per MoE layer: the placement is the same on every rank, so rank 0 knows them all.
        if (const auto& placement = model->weights->expert_shard.placement; placement != nullptr) {
          nlohmann::json replicas = nlohmann::json::array();
          for (size_t l = 0; l < placement->layers.size(); ++l) {
            const dist::LayerExpertPlacement& lp = placement->layers[l];
            if (lp.held.empty()) continue;
            const std::vector<int32_t>& held = lp.held[static_cast<size_t>(at.ep)];
            const auto block = static_cast<size_t>(dist::expert_block(lp.n_experts(), o.ep, at.ep).size());
            replicas.push_back(
                {{"layer", l},
                 {"experts",
                  std::vector<int32_t>(held.begin() + static_cast<std::ptrdiff_t>(block), held.end())}});
          }
          one["replicas"] = replicas;
        }
      }
      if (o.pp > 1) {
        one["pipeline_forward_seconds"] = ranks[r].forward_seconds;
        one["pipeline_activation_wait_seconds"] = ranks[r].activation_wait_seconds;
        one["pipeline_logits_wait_seconds"] = ranks[r].logits_wait_seconds;
        one["pipeline_micro_batches"] = ranks[r].micro_batches;
        one["bubble_fraction"] = bubble(ranks[r]);
      }
      per_rank.push_back(std::move(one));
    }
    j["parallel"] = {{"tp", o.tp},
                     {"pp", o.pp},
                     {"ep", o.ep},
                     {"dp_attention", o.dp_attention},
                     {"world", ranks.size()},
                     {"ranks", per_rank}};
    if (model->spec.moe) j["parallel"]["moe_combine"] = moe_combine_name(eo.moe_combine);
    if (o.redundant_experts > 0) j["parallel"]["redundant_experts"] = o.redundant_experts;
    if (o.pp > 1) {
      j["parallel"]["micro_batches"] = o.micro_batches > 0 ? o.micro_batches : 2 * o.pp;
      j["parallel"]["bubble_fraction"] = mean_bubble;
    }
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("model      {} ({}, {} layers)\n", o.model, model->spec.family, model->spec.n_layers);
  fmt::print("backend    {} ({} activations, {} KV cache), {}\n", o.backend, o.dtype,
             kv_dtype_name(eo.kv_dtype),
             sp.greedy ? std::string("greedy")
                       : fmt::format("temperature {} top-p {} top-k {} seed {}", sp.temperature, sp.top_p,
                                     sp.top_k, sp.seed));
  if (!model->int_weight_path.empty()) fmt::print("int weights {}\n", int_weight_line(*model, o.backend));
  fmt::print("prompt     {} tokens: {}\n", g.prompt_tokens, fmt::join(prompt, ","));
  fmt::print("generated  {} tokens: {}\n", g.steps.size(), fmt::join(g.tokens(), ","));
  if (decoder && !stream) fmt::print("text       {}\n", nlohmann::json(completion).dump());
  if (o.logprobs >= 0) {
    fmt::print("\n  {:>4} {:>8} {:>10}  {}\n", "step", "token", "logprob",
               o.logprobs > 0 ? "top (token:logprob)" : "");
    for (size_t i = 0; i < g.steps.size(); ++i) {
      const auto& s = g.steps[i];
      std::string top;
      for (const auto& t : s.top) top += fmt::format("{}:{:.4f} ", t.token, t.logprob);
      fmt::print("  {:>4} {:>8} {:>10.4f}  {}\n", i, s.chosen.token, s.chosen.logprob, top);
    }
    fmt::print("\n");
  }
  fmt::print("timing     TTFT {:.2f} ms, prefill {:.1f} tok/s, decode {:.1f} tok/s ({} tokens in {:.3f} s)\n",
             ttft_ms, g.prefill_tokens_per_second(), g.decode_tokens_per_second(),
             g.steps.empty() ? 0 : g.steps.size() - 1, g.decode_seconds);
  if (spec_stats) {
    fmt::print("speculative {}, up to {} drafts a step: {}; drafting {:.3f} s\n", o.spec.source,
               o.spec.tokens, spec_summary(*spec_stats), spec_stats->draft_seconds);
  }
  if (!o.dump.empty()) fmt::print("dump       {}\n", o.dump);
  if (ranks.size() > 1) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      std::string experts =
          o.ep > 1 ? fmt::format(", experts {}-{}{}, {} picks computed{}", ranks[r].experts_begin,
                                 ranks[r].experts_end - 1,
                                 o.redundant_experts > 0
                                     ? fmt::format(" + {} copies over the layers", ranks[r].copies_held)
                                     : "",
                                 ranks[r].picks_computed,
                                 o.redundant_experts > 0
                                     ? fmt::format(" ({} on replicas)", ranks[r].replica_picks_computed)
                                     : "")
                   : "";
      if (o.pp > 1) {
        experts += fmt::format(", layers {}-{}, bubble {:.1f}%", ranks[r].layers_begin,
                               ranks[r].layers_end - 1, 100 * bubble(ranks[r]));
      }
      fmt::print(
          "rank {}     weights {:.2f} MB ({:.2f} split, {:.2f} replicated){}, communication {:.3f} s in {} "
          "calls{}, idle ratio {:.1f}%\n",
          r, (ranks[r].split_bytes + ranks[r].replicated_bytes) / 1e6, ranks[r].split_bytes / 1e6,
          ranks[r].replicated_bytes / 1e6, experts, ranks[r].wait_seconds, ranks[r].calls,
          ranks[r].overlapped_calls > 0
              ? fmt::format(" ({} overlapped with {:.3f} s of compute)", ranks[r].overlapped_calls,
                            ranks[r].overlapped_compute_seconds)
              : "",
          100 * idle_ratio(ranks[r]));
    }
    if (model->spec.moe && o.tp * o.ep > 1)
      fmt::print("moe        combine: {}\n", moe_combine_name(eo.moe_combine));
    if (o.pp > 1) {
      fmt::print("pipeline   {} stages, {} micro-batches a step, bubble {:.1f}% (mean over ranks)\n", o.pp,
                 o.micro_batches > 0 ? o.micro_batches : 2 * o.pp, 100 * mean_bubble);
    }
  }
  return kExitOk;
}

const Registrar kRunCommand(
    "run", "Generate from token ids: ids, log-probabilities, prefill/decode speed, optional reference dump",
    50, [](CLI::App& app) -> CommandRunner {
      auto o = std::make_shared<RunOptions>();
      app.add_option("model", o->model, "checkpoint folder (config.json + safetensors)")->required();
      auto* ids_opt = app.add_option("--prompt-ids", o->prompt_ids, "prompt token ids, e.g. 1,2,3");
      auto* text_opt =
          app.add_option("--prompt", o->prompt, "prompt text, encoded with the model's tokenizer");
      auto* chat_opt = app.add_option("--chat", o->chat,
                                      "JSON file of chat messages ([{role, content}, ...]) rendered with the "
                                      "model's chat template");
      ids_opt->excludes(text_opt)->excludes(chat_opt);
      text_opt->excludes(chat_opt);
      app.add_option("--tokenizer", o->tokenizer,
                     "folder with the tokenizer files (default: the model folder)");
      app.add_flag("--ignore-eos", o->ignore_eos, "text mode: keep generating past the model's stop tokens");
      auto* interactive_opt = app.add_flag("--interactive", o->interactive,
                                           "chat turn by turn: each stdin line is a user message, replies "
                                           "are streamed (ends at EOF or an empty line)");
      interactive_opt->excludes(ids_opt)->excludes(text_opt)->excludes(chat_opt);
      app.callback([ids_opt, text_opt, chat_opt, interactive_opt] {
        if (ids_opt->count() + text_opt->count() + chat_opt->count() + interactive_opt->count() == 0) {
          throw CLI::RequiredError("one of --prompt-ids, --prompt, --chat or --interactive");
        }
      });
      app.add_option("--max-new", o->max_new, "tokens to generate (default 16)")
          ->check(CLI::Range(0, 1 << 20));
      app.add_option("--backend", o->backend, "backend: cpu (default), reference, partial");
      app.add_option("--dtype", o->dtype, "activation precision: f32 (default) or bf16")
          ->check(CLI::IsMember({"f32", "bf16"}));
      app.add_option("--kv-dtype", o->kv_dtype,
                     "KV cache element type: bf16 (default), f32 (exact), fp8 (E4M3)")
          ->check(CLI::IsMember({"bf16", "f32", "fp8"}));
      add_page_cache_option(app, o->page_cache);
      app.add_flag("--greedy", o->greedy, "greedy decoding (the default unless --temperature > 0)");
      app.add_option("--temperature", o->temperature, "sampling temperature (0 = greedy)")
          ->check(finite_number(0.0, 100.0, "--temperature (0 = greedy)"));
      app.add_option("--top-p", o->top_p, "nucleus sampling mass (default 1)")
          ->check(finite_number(0.0, 1.0, "--top-p (the probability mass kept; 0 would keep nothing)", true));
      app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = all)")
          ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
      app.add_option("--seed", o->seed, "sampling seed (default 0)");
      app.add_option("--logprobs", o->logprobs, "print each token's logprob and the top N alternatives")
          ->expected(0, 1)
          ->default_str("0")
          ->check(CLI::Range(int64_t{0}, int64_t{1000}));
      app.add_option("--dump", o->dump,
                     "write the prompt's logits and hidden states as a day0-reference/1 dump");
      app.add_option("--threads", o->threads, "threads of the cpu backend (default: DAY0_THREADS or all)")
          ->check(CLI::Range(0, 4096));
      app.add_flag("--json", o->json, "JSON output");
      app.add_option("--tp", o->tp, "tensor-parallel ranks (under mpirun -np TP x PP x EP; default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option(
             "--pp", o->pp,
             "pipeline-parallel stages: each runs a contiguous block of the decoder layers (the first "
             "also the embedding, the last the head); activations go stage to stage (default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option("--micro-batches", o->micro_batches,
                     "under --pp: micro-batches a step's tokens are cut into so that stages overlap "
                     "(default: two per stage)")
          ->check(CLI::Range(0, 4096));
      app.add_option(
             "--dp-attention", o->dp_attention,
             "attention data-parallel degree, equal to --ep (TP 1, PP 1): every EP rank runs the prompt "
             "as its own sequence through attention, MoE layers exchange picks all-to-all (default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option("--ep", o->ep,
                     "expert-parallel ranks: each holds a contiguous block of every MoE layer's experts "
                     "(default 1)")
          ->check(CLI::Range(1, 4096));
      app.add_option("--moe-combine", o->moe_combine,
                     "how MoE outputs are combined under --ep: all-reduce (default: one sum per layer) or "
                     "all-to-all (dispatch / combine of each token's picks, then an all-gather)")
          ->check(CLI::IsMember({"all-reduce", "all-to-all"}));
      app.add_option(
          "--redundant-experts", o->redundant_experts,
          "under --ep: extra physical copies of the most loaded experts in every MoE layer, spread "
          "evenly over the EP ranks (default 0)");
      app.add_option("--expert-load", o->expert_load,
                     "with --redundant-experts: per-layer expert load (JSON, as --record-expert-load writes) "
                     "choosing which experts get copies (default: every expert weighs the same)");
      app.add_option(
          "--record-expert-load", o->record_expert_load,
          "write the run's per-layer expert picks (the router's, summed over the run) to this JSON "
          "file, for --expert-load");
      app.add_flag("--comm-overlap", o->comm_overlap,
                   "under --ep with a shared expert: every rank computes the whole shared expert while the "
                   "routed experts' sum is in flight (default: each rank its block of the rows, then one "
                   "blocking sum)");
      app.add_option(
             "--comm-timeout", o->comm_timeout,
             "seconds a rank waits in one collective before naming the dead or hung peer (default 30)")
          ->check(finite_number(0.0, 3600.0, "--comm-timeout (seconds)", true));
      add_spec_flags(app, o->spec);
      return [o] { return run_command(*o); };
    });

}  // namespace
}  // namespace day0::cli
