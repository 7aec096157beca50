#include "day0/runtime/op_recording.h"

#include <algorithm>
#include <vector>

#include "day0/backends/recording_backend.h"
#include "day0/model/packed_int_config.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/packed_int_source.h"

namespace day0 {
namespace {

// One prefill step and one decode step of `spec` on `recorder`.
Status run_steps(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, RecordingBackend& recorder,
                 EngineOptions options) {
  if (spec.vocab_size < 2) return invalid_argument("operator list: the vocabulary needs two tokens");
  D0_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::create(spec, std::move(weights), recorder, options));
  // A multi-token prefill step (MLA takes its naive form there), then one decode step; greedy, as
  // `run` defaults to.
  std::vector<int32_t> prompt(static_cast<size_t>(recorded_prompt_tokens(spec)));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 2);
  recorder.set_phase(StepPhase::kPrefill);
  auto generated = generate(*engine, prompt, 2, SamplingParams{}, 0, [&](const GenerationStep&) {
    recorder.set_phase(StepPhase::kDecode);
    return true;
  });
  if (!generated.is_ok()) return generated.status().with_context("recording the operator list");
  return Status::ok();
}

Result<OpList> record(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend* compute,
                      int64_t context_tokens, EngineOptions options = {}) {
  if (context_tokens < 0) return invalid_argument("operator list: context_tokens must be >= 0");
  RecordingBackend recorder(compute, context_tokens);
  D0_RETURN_IF_ERROR(run_steps(spec, std::move(weights), recorder, options));
  OpList list = recorder.op_list();
  list.bf16_activations = options.precision == ActivationPrecision::kBF16;
  return list;
}

// The packed projections of a shape-only binding turned into what the loader keeps for the integer
// kernels (PackedIntSource with keep_int): INT8 / INT4 views of the same shape whose group layout
// the repacker accepts (whole rows, or groups of a multiple of 32 columns). Their pointers stay in the
// shape-only region: the recorder reads formats and sizes, never bytes. A GPTQ act-order g_idx, which
// the loader would refuse to keep, cannot be seen without the tensors: such projections are listed
// as kept. INT4 scales are held as the checkpoint stores them (the tensor manifest's dtype: the
// activation dtype), which the repacker keeps when it is BF16 or F16; INT8 scales as float32.
void present_int_projections(ModelWeights& weights, const PackedIntSpec& packed, DType scale_dtype) {
  const ScaleType scale_type = scale_dtype == DType::kBF16  ? ScaleType::kBF16
                               : scale_dtype == DType::kF16 ? ScaleType::kF16
                                                            : ScaleType::kF32;
  auto present = [&](WeightView& w) {
    constexpr std::string_view kSuffix = ".weight";
    if (w.data == nullptr || !w.name.ends_with(kSuffix)) return;
    const std::string module(w.name.substr(0, w.name.size() - kSuffix.size()));
    if (!packs_module(packed, module, true)) return;
    const int64_t group = packed.group_size > 0 && packed.group_size < w.cols ? packed.group_size : w.cols;
    if (group != w.cols && (w.cols % group != 0 || group % kIntBlock != 0)) return;
    w.format = packed_bits_of(packed, module) == 8 ? WeightFormat::kInt8 : WeightFormat::kInt4;
    w.group = group;
    w.scales = w.data;
    w.int_scale_type = w.format == WeightFormat::kInt4 ? scale_type : ScaleType::kF32;
    w.zeros = packed.symmetric ? nullptr : static_cast<const float*>(w.data);
    weights.int_projections.count(w);
  };
  // A tied LM head is the embedding table, which the loader never keeps as integers. Told by name: the
  // shape-only views of different tensors may share one address.
  if (weights.lm_head.w.name != weights.embedding.name) present(weights.lm_head.w);
  for (LayerWeights& l : weights.layers) {
    for (Linear* x :
         {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.attn.q_a, &l.attn.q_b, &l.attn.kv_a, &l.attn.kv_b,
          &l.mlp.gate, &l.mlp.up, &l.mlp.down, &l.moe.shared.gate, &l.moe.shared.up, &l.moe.shared.down}) {
      present(x->w);
    }
    for (ExpertWeights& e : l.moe.experts) {
      present(e.gate);
      present(e.up);
      present(e.down);
    }
  }
}

// The dry run's binding: shape-only weights, packed projections presented as the loader keeps them.
struct DryRun {
  ModelSpec spec;
  std::shared_ptr<ModelWeights> weights;
  EngineOptions options;
};

Result<DryRun> prepare_dry_run(const ModelSpec& spec) {
  D0_RETURN_IF_ERROR(check_engine_runs(spec));
  DryRun dry{.spec = unpacked_spec(spec), .weights = nullptr, .options = {}};
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(dry.spec));
  D0_ASSIGN_OR_RETURN(std::shared_ptr<const TensorSource> shapes, make_shape_only_source(manifest));
  D0_ASSIGN_OR_RETURN(dry.weights, bind_model_weights(dry.spec, std::move(shapes)));
  if (spec.weights.packed.bits != 0) {
    present_int_projections(*dry.weights, spec.weights.packed, spec.activation_dtype);
    dry.options.precision = ActivationPrecision::kBF16;
  }
  return dry;
}

}  // namespace

int64_t recorded_prompt_tokens(const ModelSpec& spec) {
  int64_t tokens = 2;
  for (const LayerSpec& l : spec.layers) tokens = std::max(tokens, l.kv_compress_ratio);
  return tokens;
}

Result<OpList> record_op_list(const ModelSpec& spec, int64_t context_tokens) {
  D0_ASSIGN_OR_RETURN(DryRun dry, prepare_dry_run(spec));
  return record(dry.spec, std::move(dry.weights), nullptr, context_tokens, dry.options);
}

Result<std::vector<RecordedCall>> record_calls(const ModelSpec& spec, int64_t context_tokens) {
  if (context_tokens < 0) return invalid_argument("operator list: context_tokens must be >= 0");
  D0_ASSIGN_OR_RETURN(DryRun dry, prepare_dry_run(spec));
  RecordingBackend recorder(nullptr, context_tokens);
  D0_RETURN_IF_ERROR(run_steps(dry.spec, std::move(dry.weights), recorder, dry.options));
  return recorder.calls();
}

Result<OpList> record_op_list(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend& backend,
                              int64_t context_tokens, EngineOptions options) {
  D0_RETURN_IF_ERROR(check_engine_runs(spec));
  return record(spec, std::move(weights), &backend, context_tokens, options);
}

}  // namespace day0
