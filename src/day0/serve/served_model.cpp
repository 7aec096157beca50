#include "day0/serve/served_model.h"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "day0/dist/pipeline_stages.h"
#include "day0/model/kv_dtype.h"
#include "day0/model/model_memory.h"
#include "day0/runtime/distributed_model.h"

namespace day0::serve {

namespace {

// Under mpirun every rank cuts a cached prefix back to the length rank 0 shares, and a sliding-window
// or chunked layer refuses when it already gave back keys that length needs; rank 0 decides with its
// own layers. With TP and EP every rank holds every layer; pipeline stages must hold the same kinds of
// windowed layers (mask and window) to decide alike. Why they do not, or "".
std::string stages_cut_back_unlike(const ModelSpec& spec, int pp) {
  using Kind = std::pair<AttentionMask, int64_t>;
  auto kinds_of = [&](int64_t stage) {
    std::set<Kind> kinds;
    const dist::LayerBlock block = dist::stage_layers(spec.n_layers, pp, stage);
    for (int64_t l = block.begin; l < block.end && l < static_cast<int64_t>(spec.layers.size()); ++l) {
      const LayerSpec& layer = spec.layers[static_cast<size_t>(l)];
      if (layer.window > 0 && layer.mask != AttentionMask::kCausal) kinds.insert({layer.mask, layer.window});
    }
    return kinds;
  };
  for (int64_t stage = 1; stage < pp; ++stage) {
    if (kinds_of(stage) != kinds_of(0)) {
      return fmt::format(
          "pipeline stage {} holds other sliding-window or chunked layers than stage 0, so that a cached "
          "prefix could be cut back on one stage and not on the other",
          stage);
    }
  }
  return "";
}

}  // namespace

ServedModel::~ServedModel() {
  server.reset();
  engine.reset();
}

Status check_serve_spec(const ServeSetup& setup) {
  const SchedulerOptions& sched = setup.server.scheduler;
  if (!setup.spec_draft.empty() && sched.spec != DraftSource::kSelfInt4) {
    return invalid_argument(fmt::format("serve --spec-draft needs --spec self-int4, found --spec {}",
                                        draft_source_name(sched.spec)));
  }
  if (sched.spec == DraftSource::kNone) return Status::ok();
  if (sched.spec != DraftSource::kNgram && sched.spec != DraftSource::kSelfInt4 &&
      sched.spec != DraftSource::kMtp) {
    return unsupported(fmt::format("serve --spec {}: not served; use --spec ngram, self-int4 or mtp",
                                   draft_source_name(sched.spec)));
  }
  if (sched.spec_tokens < 1 || sched.spec_tokens > kMaxSpecTokens) {
    return invalid_argument(
        fmt::format("serve --spec-tokens: expected 1..{}, found {}", kMaxSpecTokens, sched.spec_tokens));
  }
  if (sched.spec_max_rows < 0) {
    return invalid_argument(
        fmt::format("serve --spec-max-rows: expected 0 (no cap) or more, found {}", sched.spec_max_rows));
  }
  const dist::ParallelLayout& layout = setup.engine.layout;
  if (layout.tp > 1 || layout.pp > 1 || layout.ep > 1 || setup.engine.dp_attention > 1)
    return unsupported("serve --spec with --tp/--pp/--ep/--dp-attention above 1: not yet");
  return Status::ok();
}

Result<std::unique_ptr<ServedModel>> open_served_model(const ServeSetup& setup) {
  D0_RETURN_IF_ERROR(check_serve_spec(setup));
  D0_ASSIGN_OR_RETURN(EngineOptions eo, engine_options_from(setup.engine));
  const dist::ParallelLayout& layout = setup.engine.layout;
  auto out = std::make_unique<ServedModel>();
  // The same weight binding as `run` in this precision (a BF16 run of a quantized checkpoint keeps
  // its INT8 / INT4 weights for the integer kernels; F32 dequantizes exactly); each rank's shard under
  // mpirun.
  eo.mtp_layers = setup.server.scheduler.spec == DraftSource::kMtp;  // their weights are bound only then
  LoadOptions load = load_options_for(eo.precision);
  load.page_cache = setup.page_cache;
  load.mtp_layers = eo.mtp_layers;
  D0_ASSIGN_OR_RETURN(DistributedModel dm,
                      load_distributed_model(setup.model, layout, load, setup.comm, setup.redundant_experts));
  out->groups = std::move(dm.groups);
  out->model = std::move(dm.model);
  const ModelSpec& spec = out->model.spec;
  // Every rank reads the tokenizer, so that a bad one fails every rank alike (only rank 0 uses it).
  if (!setup.tokenizer.empty()) {
    D0_ASSIGN_OR_RETURN(out->tokenizer, tokenizer::load_tokenizer(setup.tokenizer));
  } else if (auto tok = tokenizer::load_tokenizer(out->model.folder); tok.is_ok()) {
    out->tokenizer = *tok;
  }
  attach_process_groups(eo, out->groups);

  BackendOptions bo;
  bo.n_threads = setup.threads;
  D0_ASSIGN_OR_RETURN(out->backend, open_backend(setup.backend, bo));
  out->timing = std::make_unique<TimingBackend>(*out->backend);
  D0_ASSIGN_OR_RETURN(out->engine, Engine::create(spec, out->model.weights, *out->timing, eo));
  if (setup.server.scheduler.spec == DraftSource::kSelfInt4) {
    // On the timing backend: the draft's kernels count in the operator times of its steps.
    D0_ASSIGN_OR_RETURN(out->draft, open_self_draft(out->model, setup.spec_draft, *out->timing, eo));
  }

  ServerOptions so = setup.server;
  SchedulerOptions& sched = so.scheduler;
  if (out->draft) sched.draft = out->draft->engine.get();
  const int64_t model_context = spec.max_position_embeddings;
  if (sched.context <= 0 || sched.context > model_context) {
    if (sched.context > model_context) {
      return invalid_argument(
          fmt::format("serve: --context {} is more than the model's {} (max_position_embeddings)",
                      sched.context, model_context));
    }
    sched.context = model_context;
  }
  const uint64_t block_bytes = out->engine->kv_pool().block_bytes();
  const int64_t bt = eo.kv_block_tokens;
  // Only layers that cache K/V take blocks (a linear-attention layer keeps a fixed state instead).
  const int64_t kv_layers = count_kv_layers(spec);
  const int64_t one_context = kv_layers * ((sched.context + bt - 1) / bt + 1);
  if (setup.kv_blocks > 0) {
    sched.kv_blocks = setup.kv_blocks;
  } else {
    const uint64_t bytes = setup.kv_memory > 0 ? setup.kv_memory : kDefaultKvMemory;
    sched.kv_blocks = static_cast<int64_t>(bytes / std::max<uint64_t>(block_bytes, 1));
    if (setup.kv_memory == 0) sched.kv_blocks = std::max(sched.kv_blocks, one_context);
  }
  if (sched.kv_blocks < kv_layers) {
    return invalid_argument(fmt::format("serve: a KV pool of {} blocks cannot hold one token of {} layers",
                                        sched.kv_blocks, kv_layers));
  }
  out->prefix_caching_off = stages_cut_back_unlike(spec, layout.pp);
  if (!out->prefix_caching_off.empty()) sched.prefix_caching = false;
  out->state_bytes_per_sequence = out->engine->new_cache().state_bytes();
  out->kv_bytes = static_cast<uint64_t>(sched.kv_blocks) * block_bytes;
  out->kv_blocks = sched.kv_blocks;
  if (out->draft) {
    out->draft_kv_blocks = draft_pool_blocks(sched, spec);
    out->draft_kv_bytes =
        static_cast<uint64_t>(out->draft_kv_blocks) * out->draft->engine->kv_pool().block_bytes();
  }
  if (eo.data_parallel_attention) {
    out->lockstep = std::make_unique<DpLockstep>(*out->groups.ep, *out->engine);
    sched.lockstep = out->lockstep.get();
    if (so.port != 0) so.port += out->groups.world->rank();  // rank r on port + r (0: any free port)
  } else if (!out->leader()) {
    return out;
  } else if (out->distributed()) {
    out->mirror = std::make_unique<StepMirror>(*out->groups.world, dist::compute_groups(out->groups));
    sched.mirror = out->mirror.get();
  }
  if (so.served_model_name.empty()) {
    std::string name = out->model.folder;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    const size_t slash = name.find_last_of('/');
    so.served_model_name = slash == std::string::npos ? name : name.substr(slash + 1);
  }
  out->server = std::make_unique<OpenAiServer>(*out->engine, out->tokenizer.get(), so, out->timing.get());
  return out;
}

}  // namespace day0::serve
