#pragma once
// The forward pass of every supported family, on any backend: embedding -> decoder layers (pre-norm
// attention + FFN, built from the shared blocks in runtime/blocks.h) -> final norm -> LM head.
// One call runs one step of several sequences of different lengths at once (prefill or decode): the
// token-wise work (projections, norms, FFN, MoE) runs on all rows together, attention per sequence
// over its own contiguous KV cache.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "day0/align/float_matrix.h"
#include "day0/backends/backend.h"
#include "day0/core/status.h"
#include "day0/model/layer_recipe.h"
#include "day0/model/model_spec.h"
#include "day0/ops/rope_table.h"
#include "day0/runtime/finite_watch.h"
#include "day0/runtime/kv_cache.h"
#include "day0/runtime/model_weights.h"

namespace day0 {

namespace blocks {
struct StepLayout;
class StepArena;
struct Context;
}  // namespace blocks
namespace dist {
class Communicator;
}  // namespace dist

// Activation precision. kBF16 rounds activations to bfloat16 where Hugging Face's bf16 model holds
// them (projection outputs, norm outputs, residual stream, attention and FFN outputs); arithmetic
// inside a kernel stays float32, so it approximates (not reproduces) a bf16 run.
enum class ActivationPrecision { kF32, kBF16 };
const char* precision_name(ActivationPrecision p);  // "f32", "bf16"

// Which MLA form to use: auto = expanded (naive) for multi-token steps, absorbed for one-token steps.
enum class MlaMode { kAuto, kNaive, kAbsorbed };

// How the partial outputs of a MoE layer are combined under expert (and tensor) parallelism. Every rank
// holds every token (attention is replicated over the EP ranks), routes them all alike and computes its
// experts' share.
// - kAllReduce: every rank's partial [T, H] (its experts' weighted outputs, zeros for the others;
//   the shared expert added on EP rank 0) summed over the TP x EP group: one collective per layer.
// - kAllToAll: the dispatch / combine of an expert-parallel deployment: each EP rank owns a block of the
//   step's rows; the owner sends each (row, expert) pick to the expert's rank (counts exchanged first,
//   then variable-size all_to_all_v), the expert rank returns the unweighted expert output, the owner
//   sums its rows in expert order (as one process does), adds the shared expert for its rows, and an
//   all-gather gives every rank every row.
enum class MoeCombine { kAllReduce, kAllToAll };
const char* moe_combine_name(MoeCombine c);  // "all-reduce", "all-to-all"

struct EngineOptions {
  ActivationPrecision precision = ActivationPrecision::kF32;
  MlaMode mla = MlaMode::kAuto;
  // The KV cache's element type: BF16 by default (what `inspect` and the planner assume, whatever the
  // activation precision). Comparisons that must be float32-exact (goldens, `align --dtype f32`)
  // select kF32 explicitly.
  KvDtype kv_dtype = KvDtype::kBF16;
  int64_t kv_block_tokens = KvCacheOptions{}.block_tokens;  // tokens per block of the paged pool
  // The tensor-parallel group when the weights are one rank's shard (ModelWeights::shard): its rank and
  // size must match the shard. Not owned; outlives the engine. Every rank runs the same steps.
  dist::Communicator* tensor_parallel = nullptr;
  // The expert-parallel group when the weights hold one rank's experts (ModelWeights::expert_shard): its
  // rank and size must match. Not owned; outlives the engine.
  dist::Communicator* expert_parallel = nullptr;
  // The TP x EP group of this rank's stage (rank = ep * TP + tp) that sums partial MoE outputs: needed
  // when both degrees are above 1 (otherwise the group of the one that is serves).
  dist::Communicator* moe_group = nullptr;
  MoeCombine moe_combine = MoeCombine::kAllReduce;
  // Attention data parallelism (DP = EP, as large MoE deployments run it): each EP rank runs its own
  // sequences (its own batch and KV cache) through embedding, attention, dense layers and LM head;
  // MoE layers dispatch its rows' picks to the experts' ranks and combine them back (the all-to-all
  // combine, which it requires), and each rank keeps its own rows. Needs EP above 1, TP 1 and PP 1.
  // Every MoE layer is a collective over the EP group: every rank calls forward the same number of
  // times, each with at least one row.
  bool data_parallel_attention = false;
  // Under EP (all-reduce combine, TP 1) with a shared expert: every EP rank computes the whole shared
  // expert while the routed experts' sum is in flight (start_all_reduce_sum), instead of its block of
  // the step's rows before one blocking sum. Off by default: on one host the ranks share the memory
  // bandwidth, and reading the shared expert on every rank cost more than the hidden sum saved
  // (docs/distributed.md); it is for ranks on separate nodes with slower links.
  bool comm_overlap = false;
  // The pipeline group (one rank per stage, rank = stage, dist::ProcessGroups::pp) when the weights hold
  // one stage's layers (ModelWeights::stage): its rank and size must match. Not owned; outlives the
  // engine. Every rank of the group runs the same steps with the same token ids.
  dist::Communicator* pipeline = nullptr;
  // Micro-batches a step's rows are cut into under pipeline parallelism (0: two per stage), so that
  // stage s runs micro-batch k + 1 while stage s + 1 runs k. Never more than the step's rows.
  int pipeline_micro_batches = 0;
  // Count the MoE layers' picks (Engine::expert_picks()): what `run --record-expert-load` writes and
  // `run --json` reports per rank. Off by default: the counts read the router's picks on the host.
  bool count_expert_picks = false;
  // Run the checkpoint's multi-token-prediction layers too (Engine::forward_mtp), as a draft source: the
  // weights must hold them (LoadOptions::mtp_layers). Off: plain runs hold neither their weights nor caches.
  bool mtp_layers = false;
};

// The MoE layers' picks summed over forward calls, when EngineOptions::count_expert_picks is set.
struct ExpertPickCounts {
  // [n_layers][E]: the router's (token, expert) picks of each routed expert (every rank of a stage
  // counts the same: the router is replicated); empty for layers not MoE or not run here.
  std::vector<std::vector<int64_t>> routed;
  // [n_layers][slots held]: the picks this rank computed with each expert it holds (MoeWeights::
  // held_experts; all experts in one process). With redundant experts, a replicated expert's picks are
  // split between its copies.
  std::vector<std::vector<int64_t>> computed;
};

// What pipeline parallelism cost this stage, summed over forward calls: the bubble is the time a stage
// waits in the pipeline group (for the previous stage's activations, for the last stage's logits, or
// for the next stage to take its activations) over its time inside forward.
struct PipelineFigures {
  int64_t steps = 0;                   // forward calls
  int64_t micro_batches = 0;           // run by this stage over those calls
  double forward_seconds = 0;          // wall time inside forward
  double activation_wait_seconds = 0;  // blocked receiving or sending activations
  double logits_wait_seconds = 0;      // blocked receiving (or sending) the logits of the last stage
  double wait_seconds() const { return activation_wait_seconds + logits_wait_seconds; }
  double bubble_fraction() const { return forward_seconds > 0 ? wait_seconds() / forward_seconds : 0.0; }
};

// One sequence's part of a step: its cache and the new tokens (at positions cache->length() ...).
struct SequenceStep {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;
};

// What a forward call can hand back besides logits: the residual stream after each decoder layer and
// the final norm's output, rows of all sequences of the step concatenated in batch order.
struct ForwardCapture {
  bool want_hidden = false;
  bool want_last_hidden = false;  // last_hidden: the last decoder layer's output alone (an MTP layer's input)
  bool want_final_norm = false;
  // [rows, hidden] the last decoder layer's output, before the final norm
  FloatMatrix last_hidden;
  // [n_layers] x [rows, hidden] ([rows, n * hidden]: the n streams with spec.hyper_connections)
  std::vector<FloatMatrix> hidden;
  FloatMatrix final_norm;  // [rows, hidden]
  // Rows whose sparse-attention selection is a tie in some layer (an indexer's n-th and best left-out
  // scores equal, e.g. several rectified to 0): a reference that breaks ties another way attends to
  // other keys there, and every later row sees that row's state. [rows] 0/1; empty when no layer of the
  // step selected keys with an indexer.
  bool want_selection_ties = false;
  std::vector<uint8_t> selection_ties;
};

class Engine {
 public:
  // `backend` must outlive the engine. Checks that the spec is one the engine runs.
  static Result<std::unique_ptr<Engine>> create(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights,
                                                Backend& backend, EngineOptions options = {});

  // The model's spec; local_spec() is what this rank computes (its heads and FFN columns under
  // tensor parallelism, the same spec otherwise).
  const ModelSpec& spec() const { return spec_; }
  const ModelSpec& local_spec() const { return local_; }
  const EngineOptions& options() const { return options_; }
  Backend& backend() { return backend_; }
  // A new, empty sequence on the engine's KV block pool.
  KvCache new_cache() const { return KvCache(pool_, local_, held_.begin, held_.end); }
  const KvBlockPool& kv_pool() const { return *pool_; }
  KvBlockPool& kv_pool() { return *pool_; }  // the server reserves its capacity up front
  // The decoder layers this rank runs ([0, n_layers) unless pipeline-parallel) and what the pipeline
  // cost so far.
  ShardRange held_layers() const { return held_; }
  const PipelineFigures& pipeline_figures() const { return pipeline_; }
  const ExpertPickCounts& expert_picks() const { return picks_; }

  // Runs one step. Returns logits [rows, vocab] for every new token (rows in batch order), or with
  // last_only one row per sequence (its last token): a view into the engine's own buffer, valid until
  // the next forward call. Appends every sequence's keys to its cache.
  // Under pipeline parallelism every stage calls forward with the same batch: the step's rows run in
  // micro-batches through the stages (each stage's cache gets only its layers' rows) and every stage
  // returns the same logits (sent by the last stage); a capture is refused (Unsupported).
  // Errors (never a crash): a throw inside a kernel or the thread pool (a failed check, bad_alloc)
  // becomes kInternal / kResourceExhausted; non-finite logits are kDataLoss naming the first layer
  // whose output held a NaN or Inf.
  Result<ConstMatrix> forward(std::span<const SequenceStep> batch, bool last_only = false,
                              ForwardCapture* capture = nullptr);
  // Whether the following forward calls compute each row as a one-token step of a lone sequence would
  // (blocks::Context::row_invariant: matmuls and MoE experts on the one-token row dots, attention a row
  // at a time): bit for bit the logits of feeding a sequence's tokens one at a time, with the weights
  // read once per call. For speculative verification; slower than the default at prefill sizes. MLA
  // and block-sparse attention still take all rows in one call. The MTP layers' calls (forward_mtp)
  // follow the same setting.
  void set_row_invariant(bool on);
  bool row_invariant() const { return row_invariant_; }

  // The checkpoint's multi-token-prediction layers (EngineOptions::mtp_layers; 0 without). MTP layer k
  // runs at row t on the main model's last hidden state h_t (ForwardCapture::last_hidden, before the final
  // norm; with hyper-connections the streams before hc_head) and the token x_{t+1}: eh_proj([enorm(
  // embed(x_{t+1})) | hnorm(h_t)]) (with hyper-connections e_proj(enorm(embed)) + h_proj(hnorm(stream j))
  // per stream), its decoder layer over its own cache (new_mtp_cache: rows at positions cache->length()
  // ... like forward's), its norm (after its own hc_head), then the head: logits of x_{t+2}.
  int64_t mtp_layers() const { return static_cast<int64_t>(mtp_.size()); }
  KvCache new_mtp_cache(int64_t k) const { return mtp_.at(static_cast<size_t>(k))->new_cache(); }
  // The width of a row of ForwardCapture::last_hidden, which forward_mtp reads: hidden_size, times the
  // streams with hyper-connections.
  int64_t residual_width() const;
  // One step of MTP layer k: `batch` holds each sequence's MTP cache and tokens x_{t+1}, `hidden` [rows,
  // residual_width()] the h_t of every row in batch order. Returns logits as forward does;
  // capture->last_hidden is the MTP layer's output before its norm (and hc_head): what a chained draft
  // feeds back as h. InvalidArgument without MTP layers, for k out of range or a hidden matrix of other
  // rows or width.
  Result<ConstMatrix> forward_mtp(int64_t k, std::span<const SequenceStep> batch, ConstMatrix hidden,
                                  bool last_only = false, ForwardCapture* capture = nullptr);
  // forward_mtp calls run so far (refused ones not counted): what a test reads to see how many calls a
  // batch of drafting sequences took.
  int64_t mtp_calls() const { return mtp_calls_; }

 private:
  Engine(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend& backend,
         EngineOptions options);

 public:
  ~Engine();

 private:
  ModelSpec spec_;
  ModelSpec local_;  // this rank's heads and FFN columns (spec_ unless tensor-parallel)
  std::shared_ptr<ModelWeights> weights_;
  Backend& backend_;
  EngineOptions options_;
  RopeFrequencies rope_;                         // fixed frequencies (all rope types but dynamic)
  std::optional<RopeFrequencies> sliding_rope_;  // sliding layers' own (spec.sliding_rope)
  std::shared_ptr<KvBlockPool> pool_;
  std::unique_ptr<blocks::StepLayout> layout_;  // reused between steps
  std::unique_ptr<blocks::StepArena> arena_;    // activations of a step
  std::vector<int32_t> pick_;                   // last_only rows
  dist::Communicator* moe_group_ = nullptr;     // resolved from the options (create())
  ShardRange held_;                             // decoder layers run here (create())
  ExpertPickCounts picks_;                      // options_.count_expert_picks
  bool row_invariant_ = false;                  // set_row_invariant
  std::vector<LayerRecipe> recipes_;            // [n_layers] each layer's steps (layer_recipe.h)
  int64_t reference_layers_ = 0;  // layers the reference counts (LayerRecipe::ends_reference_layer)
  bool carries_ = false;          // a recipe carries a value to the next layer (kCarry)

  std::vector<std::unique_ptr<Engine>> mtp_;  // one-layer engines over ModelWeights::mtp (mtp_layers)
  int64_t mtp_calls_ = 0;                     // mtp_calls()

  bool pipelined() const { return !weights_->stage.whole(); }
  // forward, with an MTP layer's input hidden states [rows, hidden] when this engine runs one.
  Result<ConstMatrix> forward_step(std::span<const SequenceStep> batch, bool last_only,
                                   ForwardCapture* capture, ConstMatrix mtp_hidden);
  // One step (or, pipelined, one micro-batch) through this rank's layers: embedding (first stage) or the
  // previous stage's activations, the held layers, then the head (last stage; other stages send their
  // activations on and return an empty matrix).
  ConstMatrix forward_unchecked(std::span<const SequenceStep> batch, bool last_only, ForwardCapture* capture,
                                ConstMatrix mtp_hidden = {});
  // An MTP layer's input into x [T, residual_width()] from the embeddings [T, H] and the main model's
  // hidden states mtp_hidden [T, residual_width()] (MtpInputWeights).
  void mtp_input(const blocks::Context& c, ConstMatrix embedded, ConstMatrix mtp_hidden, Matrix x);
  // A pipelined step: micro-batches through the stages, then the last stage's logits to every stage.
  ConstMatrix forward_pipelined(std::span<const SequenceStep> batch, bool last_only);
  // The first held layer (or n_layers for the logits) whose output in the last forward_unchecked call
  // held a NaN or Inf; -1 when none did.
  int64_t first_nonfinite() const;
  // Layer l replayed from its recipe over the step's values ([T, H] each, the stream [T, n H] with n
  // hyper-connected streams; indexed by LayerValue);
  // per_layer: the step's per-layer inputs [T, n_layers * P] (spec.per_layer_input), else empty.
  void run_layer(const blocks::Context& c, int64_t l, std::span<const Matrix, kLayerValues> values,
                 ConstMatrix per_layer);
  // Vocabulary-parallel embedding and LM head (tensor parallelism): each rank's rows, then summed or
  // gathered over the group.
  void embed(std::span<const int32_t> ids, Matrix x);
  void lm_head(ConstMatrix rows, Matrix logits);
  // Reused between steps (no allocation once the largest step shape was seen).
  FloatMatrix logits_;         // [rows, vocab]
  std::vector<float> finite_;  // [n_layers + 1, rows]: row means of each layer's output, then logits
  // [n_layers + 1, rows]: per layer, the summed row means of its projections and norms
  // (blocks::watch_finite), added into finite_ at the layer's end; the last row is the watch's scratch.
  std::vector<float> inner_finite_;
  blocks::FiniteWatch watch_;
  std::vector<int32_t> ids_;  // [rows] token ids of the step
  // Pipeline parallelism.
  PipelineFigures pipeline_;
  FloatMatrix pipeline_logits_;                   // [rows, vocab] assembled over micro-batches
  std::vector<std::vector<SequenceStep>> micro_;  // the step's micro-batches
  std::vector<std::vector<int64_t>> micro_ends_;  // [micro-batch][piece] the sequence it ends, or -1
  std::vector<int64_t> step_start_;               // [sequences] cache lengths before the step
  int64_t nonfinite_layer_ = -1;                  // first non-finite output of a pipelined step
};

// A copy of a view (logits kept past the next forward call).
FloatMatrix copy_matrix(ConstMatrix m);

}  // namespace day0
