#include "day0/runtime/engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include <fmt/format.h>

#include "day0/dist/communicator.h"
#include "day0/dist/pipeline_stages.h"
#include "day0/model/model_memory.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/blocks.h"

namespace day0 {
namespace {

// Pipeline messages, in the pipeline group: a stage's activations to the next stage, the last stage's
// logits to every other stage. MPI keeps the order of messages between two ranks with one tag.
constexpr int kActivationTag = 21;
constexpr int kLogitsTag = 22;

std::span<const float> norm_weight(const LayerWeights& lw, LayerNorm n) {
  switch (n) {
    case LayerNorm::kInput:
      return lw.input_norm;
    case LayerNorm::kPost:
      return lw.post_norm;
    case LayerNorm::kAttnOut:
      return lw.attn_out_norm;
    case LayerNorm::kFfnOut:
      return lw.ffn_out_norm;
  }
  return {};
}

const HyperConnectionWeights& hc_weights(const LayerWeights& lw, LayerHc hc) {
  return hc == LayerHc::kAttn ? lw.attn_hc : lw.ffn_hc;
}

// With hyper-connections the stream is n streams [T, n H]: only a collapse reads it and only an expansion
// writes it, each expansion after a collapse of the layer, whose weights are bound. Without, neither runs.
Status check_hyper_connection_step(const ModelSpec& spec, const LayerWeights& lw, const LayerStep& st,
                                   int64_t l, bool& collapsed) {
  const bool hc_step = st.op == LayerOp::kHcCollapse || st.op == LayerOp::kHcExpand;
  if (!spec.hyper_connections) {
    if (!hc_step) return Status::ok();
    return invalid_argument(fmt::format(
        "engine: layer {}'s recipe has a {} step, the model no hyper-connections", l, layer_op_name(st.op)));
  }
  const bool reads = st.in == LayerValue::kStream, writes = st.out == LayerValue::kStream;
  const bool fits = st.op == LayerOp::kHcCollapse ? reads && !writes
                    : st.op == LayerOp::kHcExpand ? writes && !reads && collapsed
                                                  : !reads && !writes;
  if (!fits) {
    return invalid_argument(fmt::format(
        "engine: layer {}'s {} step: with hyper-connections only a collapse reads the {} streams and only "
        "an expansion after it writes them",
        l, layer_op_name(st.op), spec.hyper_connections->streams));
  }
  if (st.op == LayerOp::kHcCollapse) {
    if (!hc_weights(lw, st.hc).present()) {
      return invalid_argument(
          fmt::format("engine: layer {} has no {} hyper-connection weights", l, layer_hc_name(st.hc)));
    }
    collapsed = true;
  }
  return Status::ok();
}

// The held layers' recipes against their weights: every norm a step reads is bound, and a value carried
// to the next layer is written by one layer and read by the next, both run here.
Status check_recipes(const ModelSpec& spec, const ModelWeights& w, const std::vector<LayerRecipe>& recipes,
                     ShardRange held) {
  bool carried = false;  // the previous layer wrote a value for this one
  for (int64_t l = held.begin; l < held.end; ++l) {
    const LayerRecipe& r = recipes[static_cast<size_t>(l)];
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    bool reads = false, writes = false, collapsed = false;
    for (const LayerStep& st : r.steps) {
      if ((st.op == LayerOp::kNorm || st.op == LayerOp::kOutputNorm) && norm_weight(lw, st.norm).empty()) {
        return invalid_argument(
            fmt::format("engine: layer {} has no {} norm weight, which its recipe's {} step reads", l,
                        layer_norm_name(st.norm), layer_op_name(st.op)));
      }
      D0_RETURN_IF_ERROR(check_hyper_connection_step(spec, lw, st, l, collapsed));
      reads = reads || st.in == LayerValue::kCarry;
      writes = writes || st.out == LayerValue::kCarry;
    }
    if (reads && !carried) {
      return invalid_argument(
          fmt::format("engine: layer {} reads a value carried from the layer before it, which {}", l,
                      l == held.begin && l > 0 ? "runs on another pipeline stage" : "does not write one"));
    }
    if (carried && !reads)
      return invalid_argument(
          fmt::format("engine: layer {} drops the value layer {} carried to it", l, l - 1));
    if (writes && l + 1 == held.end) {
      return invalid_argument(fmt::format(
          "engine: layer {} carries a value to a next layer that does not run {}", l,
          held.end < static_cast<int64_t>(recipes.size()) ? "on this stage" : "(the last layer)"));
    }
    carried = writes;
  }
  return Status::ok();
}

}  // namespace

const char* precision_name(ActivationPrecision p) {
  return p == ActivationPrecision::kBF16 ? "bf16" : "f32";
}

const char* moe_combine_name(MoeCombine c) {
  return c == MoeCombine::kAllToAll ? "all-to-all" : "all-reduce";
}

Engine::Engine(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend& backend,
               EngineOptions options)
    : spec_(spec),
      local_(tensor_parallel_spec(spec, weights->shard)),
      weights_(std::move(weights)),
      backend_(backend),
      options_(options),
      layout_(std::make_unique<blocks::StepLayout>()),
      arena_(std::make_unique<blocks::StepArena>()) {
  // Each rank caches only its own KV heads; MLA's latent and rope key are per token, whole on every rank.
  const KvRowWidths row = kv_row_widths(local_);
  pool_ = std::make_shared<KvBlockPool>(
      row.first, row.second,
      KvCacheOptions{
          .dtype = options_.kv_dtype,
          .block_tokens = options_.kv_block_tokens,
          .window_dtype = options_.precision == ActivationPrecision::kBF16 ? KvDtype::kBF16 : KvDtype::kF32});
  // One definition of the figure for the engine, `inspect` and the planner.
  D0_CHECK_MSG(pool_->bytes_per_token_row() == kv_bytes_per_token_per_layer(local_, options_.kv_dtype),
               "engine: KV pool row size disagrees with kv_bytes_per_token_per_layer");
}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights,
                                               Backend& backend, EngineOptions options) {
  if (!weights || static_cast<int64_t>(weights->layers.size()) != spec.n_layers) {
    return invalid_argument("engine: weights do not match the model spec");
  }
  if (spec.attention == AttentionKind::kMla && !spec.mla)
    return invalid_argument("engine: MLA spec without sizes");
  // Activations (the step arena), weights and the KV pool are host memory today; the blocks hand the
  // backend views tagged kHost, and a device backend gets its own arena and pool first.
  if (backend.memory_space() != MemorySpace::kHost) {
    return unsupported(
        fmt::format("engine: backend '{}' runs in device memory; the engine holds its "
                    "activations and KV cache in host memory",
                    backend.name()));
  }
  // The grouped output projection reads each group's rows of o_a by whole FP8 scale blocks: a
  // checkpoint whose blocks straddle two groups is refused here, not by a failed kernel check.
  if (spec.shared_kv_low_rank) {
    const int64_t rank = spec.shared_kv_low_rank->out_rank;
    for (const LayerWeights& l : weights->layers) {
      const WeightView& w = l.attn.o_a.w;
      if (w.format == WeightFormat::kFp8Block && w.block_rows > 0 && rank % w.block_rows != 0) {
        return unsupported(fmt::format(
            "engine: {}: FP8 blocks of {} rows straddle the output groups of o_lora_rank {} rows; the "
            "grouped projection needs whole blocks a group",
            w.name, w.block_rows, rank));
      }
    }
  }
  // The weights' layout (TP / EP / PP) was checked against the model where they were bound
  // (bind_model_weights: the only place a layout is set); here only the groups are matched to it.
  const TensorShard shard = weights->shard;
  if (!shard.whole()) {
    const dist::Communicator* tp = options.tensor_parallel;
    if (tp == nullptr || tp->size() != shard.size || tp->rank() != shard.rank) {
      return invalid_argument(fmt::format(
          "engine: the weights are tensor-parallel rank {} of {}, the engine's group is {}", shard.rank,
          shard.size, tp == nullptr ? std::string("missing") : tp->describe_rank(tp->rank())));
    }
  }
  const ExpertShard experts = weights->expert_shard;
  if (!experts.whole()) {
    const dist::Communicator* ep = options.expert_parallel;
    if (ep == nullptr || ep->size() != experts.size || ep->rank() != experts.rank) {
      return invalid_argument(fmt::format(
          "engine: the weights hold expert-parallel rank {} of {}'s experts, the engine's group is {}",
          experts.rank, experts.size,
          ep == nullptr ? std::string("missing") : ep->describe_rank(ep->rank())));
    }
  }
  // The group whose ranks' partial MoE outputs are summed: TP x EP, or the one degree above 1.
  dist::Communicator* moe_group = nullptr;
  if (!shard.whole() || !experts.whole()) {
    moe_group = options.moe_group != nullptr ? options.moe_group
                : experts.whole()            ? options.tensor_parallel
                : shard.whole()              ? options.expert_parallel
                                             : nullptr;
    const int want_rank = experts.rank * shard.size + shard.rank;
    if (moe_group == nullptr || moe_group->size() != shard.size * experts.size ||
        moe_group->rank() != want_rank) {
      return invalid_argument(fmt::format(
          "engine: the partial MoE outputs of TP {} x EP {} are summed over a group of those ranks "
          "(EngineOptions::moe_group, here rank {} of {}); found {}",
          shard.size, experts.size, want_rank, shard.size * experts.size,
          moe_group == nullptr ? std::string("none") : moe_group->describe_rank(moe_group->rank())));
    }
  }
  const PipelineStage stage = weights->stage;
  if (!stage.whole()) {
    const dist::Communicator* pp = options.pipeline;
    if (pp == nullptr || pp->size() != stage.size || pp->rank() != stage.stage) {
      return invalid_argument(fmt::format(
          "engine: the weights are pipeline stage {} of {}, the engine's pipeline group is {}", stage.stage,
          stage.size, pp == nullptr ? std::string("missing") : pp->describe_rank(pp->rank())));
    }
  }
  if (options.pipeline_micro_batches < 0 || options.pipeline_micro_batches > 4096) {
    return invalid_argument(fmt::format("engine: pipeline micro-batches must be in [0, 4096], found {}",
                                        options.pipeline_micro_batches));
  }
  if (options.data_parallel_attention &&
      (experts.whole() || !shard.whole() || !stage.whole() || options.moe_combine != MoeCombine::kAllToAll)) {
    return invalid_argument(
        fmt::format("engine: attention data parallelism runs each expert-parallel rank's own sequences and "
                    "needs EP above 1 with the all-to-all MoE combine, TP 1 and PP 1; found EP {}, TP {}, PP "
                    "{}, combine {}",
                    experts.size, shard.size, stage.size, moe_combine_name(options.moe_combine)));
  }
  if (options.moe_combine == MoeCombine::kAllToAll && experts.whole()) {
    return invalid_argument(
        "engine: the all-to-all MoE combine dispatches tokens to expert-parallel ranks; it needs expert "
        "parallelism (--ep above 1)");
  }
  if (options.kv_block_tokens <= 0 || options.kv_block_tokens > 4096) {
    return invalid_argument(
        fmt::format("engine: KV block size must be in [1, 4096] tokens, found {}", options.kv_block_tokens));
  }
  // A whole model (whatever built its weights) runs every layer; a stage the binder's block.
  const ShardRange held = stage.whole() ? ShardRange{0, spec.n_layers} : weights->held_layers;
  const dist::LayerBlock want = dist::stage_layers(spec.n_layers, stage.size, stage.stage);
  if (held.begin != want.begin || held.end != want.end) {
    return invalid_argument(
        fmt::format("engine: pipeline stage {} of {} holds layers [{}, {}), its block is [{}, {})",
                    stage.stage, stage.size, held.begin, held.end, want.begin, want.end));
  }
  std::vector<LayerRecipe> recipes = layer_recipes(spec);
  D0_RETURN_IF_ERROR(check_recipes(spec, *weights, recipes, held));
  if (spec.hyper_connections && stage.last() && !weights->hc_head.present())
    return invalid_argument("engine: hyper-connections without the head's collapse weights (hc_head)");
  for (auto n = static_cast<size_t>(held.begin); n < static_cast<size_t>(held.end); ++n) {
    const LayerSpec& l = spec.layers[n];
    if (l.linear_attention && (!spec.linear_attention || !weights->layers[n].linear.present())) {
      return invalid_argument(
          fmt::format("engine: linear-attention layer {} without its sizes or weights", n));
    }
    if (l.moe && !spec.moe) return invalid_argument("engine: MoE layer without MoE settings");
    if (l.mamba && (!spec.mamba || !weights->layers[n].mamba.present())) {
      return invalid_argument(fmt::format("engine: Mamba-2 layer {} without its sizes or weights", n));
    }
    if (l.no_mixer && l.no_ffn) return invalid_argument(fmt::format("engine: layer {} has no block", n));
    const LayerWeights& lw = weights->layers[n];
    if (l.moe && spec.dense_mlp_beside_moe &&
        (lw.moe_in_norm.empty() || lw.dense_out_norm.empty() || lw.moe_out_norm.empty() ||
         !lw.mlp.present() || (spec.moe->router_input_norm && lw.moe.router_input_scale.empty()) ||
         (spec.moe->per_expert_scale && lw.moe.expert_scale.empty()))) {
      return invalid_argument(
          fmt::format("engine: MoE layer {} without its dense MLP, norms or router scales", n));
    }
    if (l.block_sparse && (!spec.block_indexer || spec.attention != AttentionKind::kGqa ||
                           !lw.attn.index_q.present() || !lw.attn.index_k.present())) {
      return invalid_argument(fmt::format("engine: block-sparse layer {} without its indexer (GQA only)", n));
    }
    if (spec.shared_kv_low_rank && layer_has_kv(l) &&
        (!lw.attn.q_a.present() || !lw.attn.q_b.present() || !lw.attn.kv.present() ||
         !lw.attn.o_a.present() || !lw.attn.o_b.present() ||
         (l.kv_compress_ratio > 0 && !lw.attn.compressor.present()) ||
         (l.compressed_sparse && (!lw.attn.index_compressor.present() || !lw.attn.index_q.present() ||
                                  !lw.attn.index_weights.present())))) {
      return invalid_argument(
          fmt::format("engine: shared key = value attention layer {} without its projections, compressor "
                      "or indexer",
                      n));
    }
    if (layer_has_kv(l) && spec.output_gate != OutputGate::kNone && !lw.attn.gate.present()) {
      return invalid_argument(fmt::format("engine: layer {} without its output gate projection", n));
    }
    if (l.mask != AttentionMask::kCausal && l.window <= 0) {
      return invalid_argument("engine: sliding or chunked layer without a window");
    }
    if (l.kv_source >= 0) {  // KV shared across layers: an earlier caching layer of the same mask
      const auto src = static_cast<size_t>(l.kv_source);
      if (l.kv_source >= static_cast<int64_t>(n) || !layer_has_kv(spec.layers[src]) ||
          spec.layers[src].mask != l.mask || spec.layers[src].window != l.window ||
          layer_head_dim(spec, spec.layers[src]) != layer_head_dim(spec, l) ||
          layer_kv_heads(spec, spec.layers[src]) != layer_kv_heads(spec, l) ||
          spec.attention != AttentionKind::kGqa) {
        return invalid_argument(
            fmt::format("engine: layer {} reads layer {}'s KV, which is not an earlier GQA layer of its kind",
                        n, l.kv_source));
      }
    }
    if (l.values_from_keys && layer_value_head_dim(spec, l) != layer_head_dim(spec, l))
      return invalid_argument(fmt::format("engine: layer {}'s values are its keys but narrower", n));
    if (spec.per_layer_input && !lw.per_layer.present())
      return invalid_argument(fmt::format("engine: layer {} without its per-layer input weights", n));
    if (l.hash_routed && (lw.moe.hash_table.rows != spec.vocab_size ||
                          lw.moe.hash_table.cols != spec.moe->experts_per_token)) {
      return invalid_argument(
          fmt::format("engine: hash-routed layer {} without its [vocab, top_k] token -> experts table", n));
    }
    if (spec.layer_scalar && lw.layer_scalar.size() != 1)
      return invalid_argument(fmt::format("engine: layer {} without its layer scalar", n));
  }
  if (spec.per_layer_input &&
      (weights->per_layer_embedding.data == nullptr || !weights->per_layer_model_projection.present())) {
    return invalid_argument("engine: per-layer inputs without their table or projection");
  }
  // The head width of the layers that rotate with the model's frequencies, and of those with the sliding
  // layers' own: one width each (the frequency tables are built once).
  int64_t model_rope_dim = 0, sliding_rope_dim = 0;
  for (const LayerSpec& l : spec.layers) {
    // Layers without attention or without RoPE, and MLA (its own rope width), take no table.
    if ((!layer_has_kv(l) && l.kv_source < 0) || !l.use_rope || spec.attention == AttentionKind::kMla)
      continue;
    const bool own = l.mask == AttentionMask::kSliding && spec.sliding_rope;
    int64_t& dim = own ? sliding_rope_dim : model_rope_dim;
    if (dim != 0 && dim != layer_head_dim(spec, l)) {
      return unsupported("engine: layers of one RoPE with different head widths: not yet");
    }
    dim = layer_head_dim(spec, l);
  }
  if (model_rope_dim == 0) model_rope_dim = spec.head_dim;
  if (sliding_rope_dim == 0) sliding_rope_dim = spec.head_dim;
  const int64_t rotary =
      spec.attention == AttentionKind::kMla
          ? spec.mla->qk_rope_head_dim
          : static_cast<int64_t>(static_cast<double>(model_rope_dim) * spec.partial_rotary_factor) / 2 * 2;
  std::unique_ptr<Engine> e(new Engine(spec, std::move(weights), backend, options));
  e->moe_group_ = moe_group;
  e->held_ = held;
  e->reference_layers_ = std::count_if(recipes.begin(), recipes.end(),
                                       [](const LayerRecipe& r) { return r.ends_reference_layer; });
  e->carries_ = std::any_of(recipes.begin(), recipes.end(),
                            [](const LayerRecipe& r) { return r.uses(LayerValue::kCarry); });
  e->recipes_ = std::move(recipes);
  if (rotary > 0) {
    D0_ASSIGN_OR_RETURN(e->rope_,
                        rope_frequencies(spec.rope_theta, rotary, spec.rope, spec.max_position_embeddings,
                                         spec.max_position_embeddings));
  }
  if (spec.sliding_rope && spec.attention == AttentionKind::kGqa) {
    const LayerRope& r = *spec.sliding_rope;
    if (r.scaling.type == RopeType::kDynamic || spec.rope.type == RopeType::kDynamic) {
      return unsupported("engine: dynamic RoPE scaling with a sliding layers' RoPE of their own: not yet");
    }
    const int64_t sliding_rotary = rotary_dims(sliding_rope_dim, r.partial_rotary_factor);
    if (sliding_rotary > 0) {
      D0_ASSIGN_OR_RETURN(e->sliding_rope_,
                          rope_frequencies(r.theta, sliding_rotary, r.scaling, spec.max_position_embeddings,
                                           spec.max_position_embeddings));
    }
  }
  if (options.mtp_layers) {
    if (e->weights_->mtp.empty()) {
      return invalid_argument(
          "engine: multi-token-prediction layers asked for, but the weights were bound without them "
          "(LoadOptions::mtp_layers)");
    }
    // Each MTP layer runs as a one-layer model of its kind (mtp_layer_spec), on its own KV pool.
    ModelSpec one_layer = spec;
    one_layer.n_layers = 1;
    one_layer.layers = {mtp_layer_spec(spec)};
    one_layer.n_mtp_layers = 0;
    EngineOptions mtp_options = options;
    mtp_options.mtp_layers = false;
    mtp_options.count_expert_picks = false;
    for (const std::shared_ptr<ModelWeights>& w : e->weights_->mtp) {
      auto mtp = Engine::create(one_layer, w, backend, mtp_options);
      if (!mtp.is_ok()) return mtp.status().with_context("engine: a multi-token-prediction layer");
      e->mtp_.push_back(std::move(mtp).value());
    }
  }
  return e;
}

Result<ConstMatrix> Engine::forward_mtp(int64_t k, std::span<const SequenceStep> batch, ConstMatrix hidden,
                                        bool last_only, ForwardCapture* capture) {
  if (k < 0 || k >= mtp_layers()) {
    return invalid_argument(fmt::format("forward_mtp: MTP layer {} of {} (EngineOptions::mtp_layers: {})", k,
                                        mtp_layers(), options_.mtp_layers ? "on" : "off"));
  }
  int64_t rows = 0;
  for (const SequenceStep& s : batch) rows += static_cast<int64_t>(s.tokens.size());
  if (hidden.data == nullptr || hidden.rows != rows || hidden.cols != residual_width() ||
      !hidden.contiguous()) {
    return invalid_argument(fmt::format("forward_mtp: hidden states [{}, {}] for {} rows of width {}",
                                        hidden.rows, hidden.cols, rows, residual_width()));
  }
  ++mtp_calls_;
  return mtp_[static_cast<size_t>(k)]->forward_step(batch, last_only, capture, hidden);
}

void Engine::set_row_invariant(bool on) {
  row_invariant_ = on;
  for (const std::unique_ptr<Engine>& mtp : mtp_) mtp->set_row_invariant(on);
}

int64_t Engine::residual_width() const {
  return spec_.hidden_size * (spec_.hyper_connections ? spec_.hyper_connections->streams : 1);
}

void Engine::mtp_input(const blocks::Context& c, ConstMatrix embedded, ConstMatrix mtp_hidden, Matrix x) {
  const MtpInputWeights& in = weights_->mtp_input;
  const int64_t t = x.rows, hidden = spec_.hidden_size;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  const blocks::StepArena::Mark start = arena_->mark();  // the temporaries end with the input
  if (in.projection.present()) {                         // eh_proj over the two normed inputs side by side
    blocks::Buffer joined(*arena_, t, 2 * hidden);       // [T, 2H]: [enorm(embedding) | hnorm(h)]
    blocks::decoder_norm(c, embedded, in.embedding_norm, eps, Matrix(joined.data(), t, hidden, 2 * hidden));
    blocks::decoder_norm(c, mtp_hidden, in.hidden_norm, eps,
                         Matrix(joined.data() + hidden, t, hidden, 2 * hidden));
    blocks::linear(c, joined.m, in.projection, x);
    arena_->release(start);
    return;
  }
  // Hyper-connections: stream j of the input is e_proj(enorm(embedding)) + h_proj(hnorm(stream j of h)).
  D0_CHECK_MSG(x.contiguous() && mtp_hidden.contiguous(), "MTP input: streams side by side in whole rows");
  const int64_t n = x.cols / hidden;
  blocks::Buffer normed(*arena_, t, hidden), e(*arena_, t, hidden);  // [T, H] enorm(embedding), e_proj of it
  blocks::decoder_norm(c, embedded, in.embedding_norm, eps, normed.m);
  blocks::linear(c, normed.m, in.embedding_projection, e.m);
  blocks::Buffer streams(*arena_, t * n, hidden);  // [T n, H] hnorm of each stream, one stream a row
  blocks::decoder_norm(c, ConstMatrix(mtp_hidden.data, t * n, hidden), in.hidden_norm, eps, streams.m);
  blocks::linear(c, streams.m, in.hidden_projection, Matrix(x.data, t * n, hidden));
  for (int64_t j = 0; j < n; ++j) {
    const Matrix stream = x.col_slice(j * hidden, hidden);  // [T, H]
    backend_.add({stream, e.m, stream});
  }
  blocks::round_activations(c, x);
  arena_->release(start);
}

FloatMatrix copy_matrix(ConstMatrix m) {
  FloatMatrix out(m.rows, m.cols);
  for (int64_t r = 0; r < m.rows; ++r)
    std::memcpy(out.row(r).data(), m.row(r), static_cast<size_t>(m.cols) * sizeof(float));
  return out;
}

Result<ConstMatrix> Engine::forward(std::span<const SequenceStep> batch, bool last_only,
                                    ForwardCapture* capture) {
  if (weights_->mtp_input.present())
    return invalid_argument(
        "forward: an MTP layer's engine runs through forward_mtp (it reads hidden states)");
  return forward_step(batch, last_only, capture, ConstMatrix());
}

Result<ConstMatrix> Engine::forward_step(std::span<const SequenceStep> batch, bool last_only,
                                         ForwardCapture* capture, ConstMatrix mtp_hidden) {
  ConstMatrix logits;
  // A step that fails part-way has appended to some layers only (and, pipelined, committed its first
  // micro-batches): each cache goes back to its length before the step, so the caller can retry or go
  // on with the same caches.
  step_start_.clear();
  for (const SequenceStep& s : batch) step_start_.push_back(s.cache != nullptr ? s.cache->length() : 0);
  auto roll_back = [&] {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].cache != nullptr) (void)batch[i].cache->truncate(step_start_[i]);
    }
  };
  if (pipelined() && capture != nullptr &&
      (capture->want_hidden || capture->want_last_hidden || capture->want_final_norm ||
       capture->want_selection_ties)) {
    return unsupported(
        "forward: hidden states and selection ties are not captured under pipeline parallelism (each "
        "stage holds its layers only): not yet");
  }
  try {
    logits = pipelined() ? forward_pipelined(batch, last_only)
                         : forward_unchecked(batch, last_only, capture, mtp_hidden);
  } catch (const dist::CommError& e) {  // a peer rank died or hangs
    roll_back();
    return e.status().with_context("forward");
  } catch (const std::bad_alloc&) {
    roll_back();
    return resource_exhausted("forward: out of memory during the step");
  } catch (const std::exception& e) {
    roll_back();
    return internal_error(fmt::format("forward: {}", e.what()));
  }
  const int64_t bad = pipelined() ? nonfinite_layer_ : first_nonfinite();
  if (bad >= 0 && bad < spec_.n_layers) {
    return data_loss(
        fmt::format("forward: non-finite values (NaN or Inf) first appeared in the output of "
                    "decoder layer {} of {}",
                    bad, spec_.n_layers));
  }
  if (bad >= 0) {
    return data_loss(
        fmt::format("forward: non-finite values (NaN or Inf) first appeared in the logits (LM head){}",
                    pipelined() && !weights_->stage.last()
                        ? ", computed on the last pipeline stage; an earlier stage's layers were finite"
                        : ""));
  }
  return logits;
}

// Layer l's steps as its recipe lists them, each block reading and writing the values it names. The mixer
// is the layer's kind of token mixing: Mamba-2, Gated DeltaNet, or softmax attention (MLA or GQA).
void Engine::run_layer(const blocks::Context& c, int64_t l, std::span<const Matrix, kLayerValues> values,
                       ConstMatrix per_layer) {
  const LayerSpec& ls = spec_.layers[static_cast<size_t>(l)];
  const LayerWeights& lw = weights_->layers[static_cast<size_t>(l)];
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  const Matrix stream = values[static_cast<size_t>(LayerValue::kStream)];  // [T, H] ([T, n H]: n streams)
  const LayerRecipe& recipe = recipes_[static_cast<size_t>(l)];
  // The mixes of the last hyper-connection collapse, which the expansion after the block reads.
  blocks::Buffer hc_post, hc_comb;  // [T, n], [T, n n]
  if (spec_.hyper_connections) {
    const int64_t n = spec_.hyper_connections->streams;
    hc_post = blocks::Buffer(c.arena, stream.rows, n);
    hc_comb = blocks::Buffer(c.arena, stream.rows, n * n);
  }
  for (const LayerStep& st : recipe.steps) {
    const Matrix in = values[static_cast<size_t>(st.in)],
                 out = values[static_cast<size_t>(st.out)];  // [T, H] (the stream: as above)
    switch (st.op) {
      case LayerOp::kNorm:
        blocks::decoder_norm(c, in, norm_weight(lw, st.norm), eps, out);
        break;
      case LayerOp::kOutputNorm:
        blocks::rms_norm(c, in, norm_weight(lw, st.norm), eps, out);
        break;
      case LayerOp::kMixer:
        if (ls.mamba) {
          blocks::mamba2(c, l, lw.mamba, in, out);
        } else if (ls.linear_attention) {
          blocks::gated_deltanet(c, l, lw.linear, in, out);
        } else if (spec_.shared_kv_low_rank) {
          blocks::shared_kv_attention(c, l, lw.attn, in, out);
        } else if (spec_.attention == AttentionKind::kMla) {
          blocks::mla_attention(c, l, lw.attn, in, out);
        } else {
          blocks::gqa_attention(c, l, lw.attn, in, out);
        }
        break;
      case LayerOp::kDenseMlp:
        blocks::dense_mlp(c, lw.mlp, in, out);
        break;
      case LayerOp::kMoe:
        blocks::moe(c, l, lw.moe, in, out);
        break;
      case LayerOp::kDenseMlpBesideMoe:
        blocks::dense_mlp_beside_moe(c, l, lw, stream, in, out);
        break;
      case LayerOp::kResidualAdd:
        backend_.add({out, in, out});
        blocks::round_activations(c, out);
        break;
      case LayerOp::kPerLayerInput:
        blocks::per_layer_input(c, l, lw.per_layer, per_layer, out);
        break;
      case LayerOp::kLayerScalar:  // the layer's output times its stored scalar
        backend_.mul({out, ConstMatrix(lw.layer_scalar.data(), 1, 1), out});
        blocks::round_activations(c, out);
        break;
      case LayerOp::kHcCollapse:
        blocks::hc_collapse(c, hc_weights(lw, st.hc), in, hc_post.m, hc_comb.m, out);
        break;
      case LayerOp::kHcExpand:
        blocks::hc_expand(c, in, hc_post.m, hc_comb.m, out);
        break;
    }
  }
}

int64_t Engine::first_nonfinite() const {
  // One row mean per row and layer tells whether any element was NaN or Inf (a mean of finite floats
  // accumulated in double stays finite), without reading every element on the host.
  const int64_t rows = static_cast<int64_t>(finite_.size()) / (spec_.n_layers + 1);
  auto bad = [&](int64_t stage) {
    for (int64_t r = 0; r < rows; ++r)
      if (!std::isfinite(finite_[static_cast<size_t>(stage * rows + r)])) return true;
    return false;
  };
  // Every layer's rows are read, not only when the logits are bad: with last_only the logits cover the
  // last row alone, and a NaN in an earlier row (a poisoned embedding row, a key no later query weighs)
  // must fail the step too. Layers a stage does not hold keep their zeros.
  const int64_t first = pipelined() ? held_.begin : 0, last = pipelined() ? held_.end : spec_.n_layers;
  for (int64_t l = first; l < last; ++l)
    if (bad(l)) return l;
  return bad(spec_.n_layers) ? spec_.n_layers : -1;
}

ConstMatrix Engine::forward_pipelined(std::span<const SequenceStep> batch, bool last_only) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  dist::Communicator& pp = *options_.pipeline;
  const PipelineStage stage = weights_->stage;
  // Micro-batch k takes rows [k * T / m, (k + 1) * T / m) of the step in batch order: a sequence's rows
  // are cut into consecutive chunks (causal order: every stage appends chunk k before chunk k + 1 to its
  // cache), and the logits of the micro-batches, one after the other, are the step's rows.
  int64_t total = 0;
  for (const SequenceStep& s : batch) total += static_cast<int64_t>(s.tokens.size());
  const int64_t wanted =
      options_.pipeline_micro_batches > 0 ? options_.pipeline_micro_batches : 2 * stage.size;
  const int64_t m = std::max<int64_t>(1, std::min(wanted, total));
  micro_.resize(static_cast<size_t>(m));
  // For last_only: (micro-batch, piece) -> the sequence whose last row the piece ends with.
  std::vector<std::vector<int64_t>>& ends = micro_ends_;
  ends.resize(static_cast<size_t>(m));
  int64_t row0 = 0;
  for (auto& mb : micro_) mb.clear();
  for (auto& e : ends) e.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t n = static_cast<int64_t>(batch[s].tokens.size());
    D0_CHECK_MSG(!last_only || n > 0, "forward: last_only needs at least one token per sequence");
    for (int64_t k = 0; k < m; ++k) {
      const int64_t lo = std::max(row0, k * total / m), hi = std::min(row0 + n, (k + 1) * total / m);
      if (lo >= hi) continue;
      micro_[static_cast<size_t>(k)].push_back(
          {batch[s].cache,
           batch[s].tokens.subspan(static_cast<size_t>(lo - row0), static_cast<size_t>(hi - lo))});
      ends[static_cast<size_t>(k)].push_back(hi == row0 + n ? static_cast<int64_t>(s) : -1);
    }
    row0 += n;
  }
  const int64_t out_rows = last_only ? static_cast<int64_t>(batch.size()) : total;
  if (pipeline_logits_.rows != out_rows || pipeline_logits_.cols != spec_.vocab_size)
    pipeline_logits_ = FloatMatrix(out_rows, spec_.vocab_size);
  nonfinite_layer_ = -1;
  int64_t out_row = 0;
  for (int64_t k = 0; k < m; ++k) {
    const std::vector<SequenceStep>& mb = micro_[static_cast<size_t>(k)];
    const double waited = pp.stats().wait_seconds;
    const ConstMatrix lg = forward_unchecked(mb, last_only, nullptr);  // [pieces or rows, vocab] on the last
    pipeline_.activation_wait_seconds += pp.stats().wait_seconds - waited;
    if (nonfinite_layer_ < 0) nonfinite_layer_ = first_nonfinite();
    if (!stage.last()) continue;
    for (int64_t r = 0; r < lg.rows; ++r) {
      const int64_t to = last_only ? ends[static_cast<size_t>(k)][static_cast<size_t>(r)] : out_row++;
      if (to < 0) continue;  // a piece that does not end its sequence
      std::copy_n(lg.row(r), spec_.vocab_size, pipeline_logits_.row(to).data());
    }
  }
  // Every stage samples from the same logits: the last stage sends them to each other stage.
  const double waited = pp.stats().wait_seconds;
  auto all = std::span<float>(pipeline_logits_.data);
  if (stage.last()) {
    for (int s = 0; s + 1 < stage.size; ++s) dist::check_comm(pp.send(std::as_bytes(all), s, kLogitsTag));
  } else {
    dist::check_comm(pp.recv(std::as_writable_bytes(all), stage.size - 1, kLogitsTag));
    if (nonfinite_layer_ < 0 &&
        !std::all_of(all.begin(), all.end(), [](float v) { return std::isfinite(v); }))
      nonfinite_layer_ = spec_.n_layers;
  }
  pipeline_.logits_wait_seconds += pp.stats().wait_seconds - waited;
  pipeline_.steps += 1;
  pipeline_.micro_batches += m;
  pipeline_.forward_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  return ConstMatrix(pipeline_logits_.data.data(), out_rows, spec_.vocab_size);
}

ConstMatrix Engine::forward_unchecked(std::span<const SequenceStep> batch, bool last_only,
                                      ForwardCapture* capture, ConstMatrix mtp_hidden) {
  using blocks::Buffer;
  blocks::StepLayout& layout = *layout_;
  layout.clear();
  std::vector<int32_t>& ids = ids_;
  ids.clear();
  for (const SequenceStep& s : batch) {
    D0_CHECK_MSG(s.cache != nullptr, "forward: a sequence without a cache");
    D0_CHECK_MSG(&s.cache->pool() == pool_.get(), "forward: a cache of another engine's pool");
    layout.caches.push_back(s.cache);
    layout.row0.push_back(layout.total_rows);
    layout.rows.push_back(static_cast<int64_t>(s.tokens.size()));
    layout.pos0.push_back(s.cache->length());
    for (size_t i = 0; i < s.tokens.size(); ++i)
      layout.positions.push_back(s.cache->length() + static_cast<int64_t>(i));
    layout.total_rows += static_cast<int64_t>(s.tokens.size());
    ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  }
  for (int32_t id : ids)
    D0_CHECK_MSG(id >= 0 && id < spec_.vocab_size, fmt::format("token id {} outside the vocabulary", id));
  // Recurrent models: each sequence saves its state at the last whole-block boundary the step passes
  // (KvCache::plan_snapshot; the recurrent kernels run in two parts around it).
  for (const SequenceStep& s : batch)
    layout.snapshot_at.push_back(s.cache->plan_snapshot(static_cast<int64_t>(s.tokens.size())));
  const blocks::Context c{backend_,
                          local_,
                          options_,
                          layout,
                          rope_,
                          *arena_,
                          options_.tensor_parallel,
                          options_.expert_parallel,
                          moe_group_,
                          options_.count_expert_picks ? &picks_ : nullptr,
                          sliding_rope_ ? &*sliding_rope_ : nullptr,
                          &watch_,
                          row_invariant_,
                          ids};
  const int64_t t = layout.total_rows, hidden = spec_.hidden_size;
  // The residual: n hyper-connected streams side by side [T, n H], or the one stream [T, H].
  const int64_t n_streams = spec_.hyper_connections ? spec_.hyper_connections->streams : 1;
  const int64_t width = n_streams * hidden;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  const ModelWeights& w = *weights_;

  arena_->begin_step();
  Buffer x(*arena_, t, width), h(*arena_, t, hidden),
      y(*arena_, t, hidden);  // residual stream(s), normed input, block output
  Buffer carry;               // [T, H] a block output one layer holds for the next (LayerValue::kCarry)
  if (carries_) carry = Buffer(*arena_, t, hidden);
  finite_.assign(static_cast<size_t>((spec_.n_layers + 1) * t), 0.0f);
  inner_finite_.assign(static_cast<size_t>((spec_.n_layers + 1) * t), 0.0f);  // the last row: scratch
  watch_.scratch = Matrix(inner_finite_.data() + spec_.n_layers * t, t, 1);
  const PipelineStage stage = w.stage;
  // Activations cross stages as float32 [T, n H] in row order (both sides' buffers have this layout).
  auto activations = [&] { return std::span<float>(x.data(), static_cast<size_t>(t * width)); };
  if (stage.first()) {
    const Matrix embedded = n_streams > 1 ? h.m : x.m;  // [T, H]
    embed(ids, embedded);
    blocks::round_activations(c, embedded);
    if (spec_.embedding_sqrt_scale) {  // muP input scaling, rounded like the product it is
      const float scale = blocks::activation_scalar(c, std::sqrt(static_cast<double>(spec_.hidden_size)),
                                                    spec_.embedding_scale_rounded);
      backend_.scale({.x = embedded, .y = embedded, .scale = scale});
      blocks::round_activations(c, embedded);
    }
    for (int64_t j = 0; n_streams > 1 && j < n_streams; ++j)  // every stream starts as the embedding
      backend_.copy_columns({.x = h.m, .y = x.m, .width = hidden, .y_col0 = j * hidden});
  } else {
    dist::check_comm(
        options_.pipeline->recv(std::as_writable_bytes(activations()), stage.stage - 1, kActivationTag));
  }
  if (mtp_hidden.data != nullptr) mtp_input(c, n_streams > 1 ? h.m : x.m, mtp_hidden, x.m);
  // Per-layer inputs [T, n_layers * P] of the step, from the token ids and the scaled embeddings.
  Buffer per_layer;
  if (spec_.per_layer_input) {
    per_layer = Buffer(*arena_, t, spec_.n_layers * spec_.per_layer_input->width);
    blocks::per_layer_inputs(c, w, ids, x.m, per_layer.m);
  }
  if (capture && capture->want_hidden)
    capture->hidden.assign(static_cast<size_t>(reference_layers_), FloatMatrix());
  layout.want_selection_ties = capture && capture->want_selection_ties;
  // The reference layer the next layer that ends one ends (hidden states are captured per reference layer).
  auto reference_layer = std::count_if(recipes_.begin(), recipes_.begin() + held_.begin,
                                       [](const LayerRecipe& r) { return r.ends_reference_layer; });
  for (int64_t l = held_.begin; l < held_.end; ++l) {
    const blocks::StepArena::Mark layer_start = arena_->mark();  // the layer's temporaries end with it
    watch_.sum = Matrix(inner_finite_.data() + l * t, t, 1);
    const LayerRecipe& recipe = recipes_[static_cast<size_t>(l)];
    Buffer side;  // [T, H] a second block output of the layer, when its recipe has one
    if (recipe.uses(LayerValue::kSide)) side = Buffer(*arena_, t, hidden);
    const std::array<Matrix, kLayerValues> values{x.m, h.m, y.m, side.m, carry.m};  // by LayerValue
    run_layer(c, l, values, per_layer.m);
    backend_.row_mean({.x = x.m, .y = Matrix(finite_.data() + l * t, t, 1)});
    backend_.add({Matrix(finite_.data() + l * t, t, 1), watch_.sum, Matrix(finite_.data() + l * t, t, 1)});
    watch_.sum = Matrix();
    if (capture && capture->want_hidden && recipe.ends_reference_layer) {
      backend_.synchronize();
      FloatMatrix& out = capture->hidden[static_cast<size_t>(reference_layer)];
      out = FloatMatrix(t, width);
      std::memcpy(out.data.data(), x.data(), static_cast<size_t>(t * width) * sizeof(float));
    }
    if (recipe.ends_reference_layer) ++reference_layer;
    arena_->release(layer_start);
  }
  for (const SequenceStep& s : batch) s.cache->commit(static_cast<int64_t>(s.tokens.size()));
  if (capture && capture->want_selection_ties) capture->selection_ties = layout.selection_ties;
  if (capture && capture->want_last_hidden) {
    backend_.synchronize();
    capture->last_hidden = FloatMatrix(t, x.m.cols);
    for (int64_t r = 0; r < t; ++r)
      std::memcpy(capture->last_hidden.row(r).data(), x.m.row(r),
                  static_cast<size_t>(x.m.cols) * sizeof(float));
  }
  if (!stage.last()) {
    backend_.synchronize();
    dist::check_comm(options_.pipeline->send(std::as_bytes(activations()), stage.stage + 1, kActivationTag));
    return {};
  }

  ConstMatrix last_hidden = x.m;  // [T, H]
  if (n_streams > 1) {            // the streams collapse into one before the final norm
    blocks::hc_head(c, w.hc_head, x.m, y.m);
    last_hidden = y.m;
  }
  blocks::decoder_norm(c, last_hidden, w.final_norm, eps, h.m);
  if (capture && capture->want_final_norm) {
    backend_.synchronize();
    capture->final_norm = FloatMatrix(t, hidden);
    std::memcpy(capture->final_norm.data.data(), h.data(), static_cast<size_t>(t * hidden) * sizeof(float));
  }
  ConstMatrix rows = h.m;
  Buffer last;
  if (last_only) {
    std::vector<int32_t>& pick = pick_;
    pick.clear();
    for (size_t s = 0; s < batch.size(); ++s) {
      D0_CHECK_MSG(layout.rows[s] > 0, "forward: last_only needs at least one token per sequence");
      pick.push_back(static_cast<int32_t>(layout.row0[s] + layout.rows[s] - 1));
    }
    last = Buffer(*arena_, static_cast<int64_t>(pick.size()), hidden);
    backend_.gather_rows({h.m, pick, last.m});
    rows = last.m;
  }
  if (logits_.rows != rows.rows || logits_.cols != spec_.vocab_size)
    logits_ = FloatMatrix(rows.rows, spec_.vocab_size);
  const Matrix logits(logits_.data.data(), rows.rows, spec_.vocab_size);  // [rows, vocab]
  lm_head(rows, logits);
  // Logit means of the rows (the last `rows.rows` entries of the finiteness record).
  backend_.row_mean({.x = logits, .y = Matrix(finite_.data() + spec_.n_layers * t, rows.rows, 1)});
  for (int64_t r = rows.rows; r < t; ++r) finite_[static_cast<size_t>(spec_.n_layers * t + r)] = 0.0f;
  backend_.synchronize();
  return logits;
}

}  // namespace day0

namespace day0 {

void Engine::embed(std::span<const int32_t> ids, Matrix x) {
  const ModelWeights& w = *weights_;
  if (w.shard.whole()) {
    backend_.embedding({w.embedding, ids, x});
    return;
  }
  // Rows of tokens outside this rank's vocabulary range stay zero; the sum over ranks fills them.
  const ShardRange v = w.vocab;
  std::vector<int32_t> local(ids.size());  // [T] ids into this rank's rows, clamped
  for (size_t i = 0; i < ids.size(); ++i)
    local[i] = static_cast<int32_t>(std::clamp<int64_t>(ids[i] - v.begin, 0, v.size() - 1));
  backend_.embedding({w.embedding, local, x});
  backend_.synchronize();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < v.begin || ids[i] >= v.end) std::fill_n(x.row(static_cast<int64_t>(i)), x.cols, 0.0f);
  }
  dist::check_comm(options_.tensor_parallel->all_reduce_sum(
      std::span<float>(x.data, static_cast<size_t>(x.rows * x.stride))));
}

void Engine::lm_head(ConstMatrix rows, Matrix logits) {
  const blocks::Context c{backend_,
                          local_,
                          options_,
                          *layout_,
                          rope_,
                          *arena_,
                          options_.tensor_parallel,
                          options_.expert_parallel,
                          moe_group_,
                          nullptr,
                          nullptr,
                          nullptr,
                          row_invariant_};
  const ModelWeights& w = *weights_;
  // logit_scale multiplies the head's rounded logits, the product rounded again; soft-capping takes
  // c tanh(logits / c), each of its three steps rounded.
  const auto scaled = [&] {
    if (spec_.final_logit_softcap > 0.0) {
      const double cap = spec_.final_logit_softcap;
      backend_.scale({.x = logits, .y = logits, .scale = static_cast<float>(1.0 / cap)});
      blocks::round_activations(c, logits);
      backend_.tanh({logits, logits});
      blocks::round_activations(c, logits);
      backend_.scale({.x = logits, .y = logits, .scale = static_cast<float>(cap)});
      blocks::round_activations(c, logits);
    }
    if (spec_.logit_scale == 1.0) return;
    backend_.scale({.x = logits, .y = logits, .scale = static_cast<float>(spec_.logit_scale)});
    blocks::round_activations(c, logits);
  };
  if (w.shard.whole()) {
    blocks::linear(c, rows, w.lm_head, logits);
    scaled();
    return;
  }
  // Each rank's logits over its vocabulary rows [rows, its share], padded to the largest share
  // (n * per floats), gathered in rank order.
  const int64_t n = rows.rows, per = vocab_shard_rows(spec_.vocab_size, w.shard);
  const int64_t ranks = w.shard.size;
  blocks::Buffer mine(*arena_, n, per);         // [rows * per] holding [rows, share] then zeros
  blocks::Buffer all(*arena_, ranks * n, per);  // [ranks, rows * per]
  blocks::linear(c, rows, w.lm_head, Matrix(mine.data(), n, w.vocab.size()));
  backend_.synchronize();
  dist::check_comm(options_.tensor_parallel->all_gather_of<float>(
      std::span<const float>(mine.data(), static_cast<size_t>(n * per)),
      std::span<float>(all.data(), static_cast<size_t>(ranks * n * per))));
  for (int64_t r = 0; r < ranks; ++r) {
    const ShardRange v = vocab_shard(spec_.vocab_size, {static_cast<int>(r), w.shard.size});
    const float* part = all.data() + r * n * per;  // [rows, v.size()]
    for (int64_t i = 0; i < n; ++i) std::copy_n(part + i * v.size(), v.size(), logits.row(i) + v.begin);
  }
  scaled();
}

}  // namespace day0
