#pragma once
// Everything `day0 serve` stands up, in the order it needs it: the checkpoint, its tokenizer, a
// backend wrapped for operator timing, the engine (with the KV pool sized from blocks or bytes), and
// the OpenAI server over them. The CLI, the tests and the adapt stability stage share it.
#include <cstdint>
#include <memory>
#include <string>

#include "day0/core/status.h"
#include "day0/dist/process_groups.h"
#include "day0/runtime/distributed_model.h"
#include "day0/runtime/draft_model.h"
#include "day0/runtime/engine_settings.h"
#include "day0/runtime/model_loader.h"
#include "day0/serve/dp_lockstep.h"
#include "day0/serve/openai_server.h"
#include "day0/serve/step_mirror.h"
#include "day0/serve/timing_backend.h"

namespace day0::serve {

struct ServeSetup {
  std::string model;      // checkpoint folder
  std::string tokenizer;  // folder with the tokenizer files; "" = the model folder (optional there)
  std::string backend = "cpu";
  // Activation and KV dtypes, the TP x PP x EP layout (under mpirun: rank 0 serves HTTP, the others follow
  // its steps; under attention data parallelism every rank serves on port + its rank, serve/dp_lockstep.h)
  // and the MoE combine, as `run` takes them.
  EngineSettings engine;
  PageCache page_cache = PageCache::kKeep;  // the checkpoint's cached pages (runtime/tensor_source.h)
  int threads = 0;
  int64_t kv_blocks = 0;   // pool capacity in blocks, or
  uint64_t kv_memory = 0;  // in bytes; neither: kDefaultKvMemory, raised to hold one full context
  ServerOptions server;
  dist::CommOptions comm;
  RedundantExperts redundant_experts;  // under EP: extra expert copies (distributed_model.h)
  // --spec self-int4's draft folder (made by `day0 quantize --to int4`); "": quantized at load.
  std::string spec_draft;
};

inline constexpr uint64_t kDefaultKvMemory = uint64_t{1} << 30;

struct ServedModel {
  dist::ProcessGroups groups;                             // world and groups of size 1 in a single process
  LoadedModel model;                                      // this rank's shard
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // null: token-id prompts only
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TimingBackend> timing;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<SelfDraft> draft;      // --spec self-int4: the INT4 copy drafting for every sequence
  std::unique_ptr<StepMirror> mirror;    // rank 0 of a distributed job
  std::unique_ptr<DpLockstep> lockstep;  // every rank under attention data parallelism
  std::unique_ptr<OpenAiServer> server;  // rank 0 only (every rank under attention data parallelism)
  int64_t kv_blocks = 0;                 // the pool's capacity in blocks (every rank reserves it)
  uint64_t kv_bytes = 0;                 // the pool's capacity
  // --spec self-int4: the draft model's pool (draft_pool_blocks), reserved by the scheduler; 0 without.
  int64_t draft_kv_blocks = 0;
  uint64_t draft_kv_bytes = 0;
  // Why prefix caching was turned off for this model ("" when it was not): under mpirun, pipeline
  // stages holding unlike windowed layers.
  std::string prefix_caching_off;
  // Recurrent layers' state (Gated DeltaNet, Mamba-2) of one sequence on this rank: one state block.
  uint64_t state_bytes_per_sequence = 0;
  ~ServedModel();  // the server first (it holds sequences on the engine's pool)
  bool distributed() const { return groups.world && groups.world->size() > 1; }
  bool leader() const { return !groups.world || groups.world->rank() == 0; }
  // Whether this rank runs a server: rank 0, or every rank under attention data parallelism.
  bool serves() const { return leader() || lockstep != nullptr; }
};

// InvalidArgument / Unsupported when the scheduler's speculative decoding cannot run with this setup:
// n-gram, self-int4 or MTP drafts, k in 1..kMaxSpecTokens, a draft-row cap >= 0, --spec-draft only with
// self-int4, in one process (no TP / PP / EP / attention data parallelism). open_served_model checks it
// too.
Status check_serve_spec(const ServeSetup& setup);

// Loads and builds everything (not yet bound). Bad input (folder, options) is an error Status. Under
// mpirun each rank loads its shard; only rank 0 gets a server (and a tokenizer); a follower runs
// follow_steps() on `engine` with `kv_blocks`. A failure on any rank fails every rank.
Result<std::unique_ptr<ServedModel>> open_served_model(const ServeSetup& setup);

}  // namespace day0::serve
