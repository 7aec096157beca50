#include "day0/graph/resolver.h"

#include <fmt/format.h>

#include "day0/core/error.h"
#include "day0/graph/decompositions.h"
#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"

namespace day0 {

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kNative:
      return "native";
    case Placement::kDecomposed:
      return "decomposed";
    case Placement::kHostFallback:
      return "host fallback";
    case Placement::kMissing:
      return "missing";
  }
  return "?";
}

namespace {

// Appends the native pieces `key` runs as on `primary`, or returns false if some piece is not native
// after decomposition. depth guards against a cyclic schema.
bool decompose_natively(const Backend& primary, const OpKey& key, std::vector<std::string>& pieces,
                        int depth) {
  if (depth > 8) return false;
  if (primary.supports(key)) {
    std::string name(key.op);
    if (std::find(pieces.begin(), pieces.end(), name) == pieces.end()) pieces.push_back(name);
    return true;
  }
  const auto parts = decomposition_keys(key.op, key.weights);
  if (parts.empty()) return false;
  for (const OpKey& part : parts) {
    // A piece only needed by another attribute value (e.g. swiglu_clamped for a plain MoE) still has
    // to run: require all of them.
    if (!decompose_natively(primary, part, pieces, depth + 1)) return false;
  }
  return true;
}

}  // namespace

Resolution resolve_op(const Backend& primary, const Backend* host, const OpKey& key) {
  Resolution r;
  if (find_op_schema(key.op) == nullptr) return r;  // unknown op: missing
  if (primary.supports(key)) {
    r.placement = Placement::kNative;
    return r;
  }
  std::vector<std::string> pieces;
  if (!decomposition_keys(key.op, key.weights).empty() && decompose_natively(primary, key, pieces, 0)) {
    r.placement = Placement::kDecomposed;
    r.pieces = std::move(pieces);
    return r;
  }
  if (host != nullptr && host->supports(key)) r.placement = Placement::kHostFallback;
  return r;
}

ResolvingBackend::ResolvingBackend(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> host,
                                   bool strict_ops, bool quiet)
    : primary_(std::move(primary)), host_(std::move(host)), strict_ops_(strict_ops), quiet_(quiet) {
  D0_CHECK(primary_ != nullptr);
}

Resolution ResolvingBackend::resolution(const OpKey& key) const {
  return resolve_op(*primary_, host_.get(), key);
}

bool ResolvingBackend::supports(const OpKey& key) const {
  const Placement p = resolution(key).placement;
  return p == Placement::kNative || p == Placement::kDecomposed ||
         (p == Placement::kHostFallback && !strict_ops_);
}

ComputeUnit ResolvingBackend::matmul_unit(WeightFormat weights, bool exact, int64_t rows) const {
  switch (resolution(OpKey{op::kMatmul, weights}).placement) {
    case Placement::kNative:
      return primary_->matmul_unit(weights, exact, rows);
    case Placement::kHostFallback:
      return host_->matmul_unit(weights, exact, rows);
    default:
      return ComputeUnit::kUnknown;
  }
}

void ResolvingBackend::synchronize() {
  primary_->synchronize();
  if (host_) host_->synchronize();
}

Status ResolvingBackend::check_strict(const std::vector<OpKey>& keys) const {
  for (const OpKey& key : keys) {
    const Placement p = resolution(key).placement;
    if (p == Placement::kMissing) {
      return unsupported(
          fmt::format("op '{}' ({}) has no kernel on backend '{}' nor a decomposition or host kernel", key.op,
                      weight_format_name(key.weights), primary_->name()));
    }
    if (p == Placement::kHostFallback && strict_ops_) {
      return unsupported(
          fmt::format("--strict-ops: op '{}' ({}) would fall back from backend '{}' to the host", key.op,
                      weight_format_name(key.weights), primary_->name()));
    }
  }
  return Status::ok();
}

Placement ResolvingBackend::route(const OpKey& key) {
  std::lock_guard lock(mutex_);
  const auto cache_key = std::make_pair(std::string_view(key.op), static_cast<int>(key.weights));
  auto it = cache_.find(cache_key);
  if (it != cache_.end()) return it->second;
  const Placement p = resolution(key).placement;
  D0_CHECK_MSG(p != Placement::kMissing,
               fmt::format("op '{}' ({}) has no kernel on backend '{}' and no fallback", key.op,
                           weight_format_name(key.weights), primary_->name()));
  if (p == Placement::kHostFallback) {
    D0_CHECK_MSG(!strict_ops_, fmt::format("--strict-ops: op '{}' ({}) has no kernel on backend '{}'", key.op,
                                           weight_format_name(key.weights), primary_->name()));
    if (!quiet_) {
      fmt::print(stderr,
                 "warning: op '{}' ({}) has no kernel on backend '{}': running it on host backend '{}'\n",
                 key.op, weight_format_name(key.weights), primary_->name(), host_->name());
    }
  }
  cache_.emplace(cache_key, p);
  return p;
}

// Ops without a decomposition: native or host.
#define D0_ROUTE_SIMPLE(method, Args, key_expr)  \
  void ResolvingBackend::method(const Args& a) { \
    if (route(key_expr) == Placement::kNative) { \
      primary_->method(a);                       \
    } else {                                     \
      host_->method(a);                          \
    }                                            \
  }
// Ops with a decomposition that runs through this resolver.
#define D0_ROUTE_DECOMPOSED(method, Args, key_expr) \
  void ResolvingBackend::method(const Args& a) {    \
    switch (route(key_expr)) {                      \
      case Placement::kNative:                      \
        primary_->method(a);                        \
        break;                                      \
      case Placement::kDecomposed:                  \
        decompose_##method(*this, a);               \
        break;                                      \
      default:                                      \
        host_->method(a);                           \
    }                                               \
  }

D0_ROUTE_SIMPLE(embedding, EmbeddingArgs, (OpKey{op::kEmbedding, a.table.format}))
D0_ROUTE_SIMPLE(matmul, MatmulArgs, (OpKey{op::kMatmul, a.w.format}))
D0_ROUTE_DECOMPOSED(grouped_matmul, GroupedMatmulArgs, (OpKey{op::kGroupedMatmul, a.w.format}))
D0_ROUTE_DECOMPOSED(rms_norm, RmsNormArgs, OpKey{op::kRmsNorm})
D0_ROUTE_DECOMPOSED(layer_norm, LayerNormArgs, OpKey{op::kLayerNorm})
D0_ROUTE_SIMPLE(rope, RopeArgs, OpKey{op::kRope})
D0_ROUTE_SIMPLE(attention, AttentionArgs, OpKey{op::kAttention})
D0_ROUTE_DECOMPOSED(mla_attention, MlaArgs, (OpKey{op::kMlaAttention, a.w_kv_b.format}))
D0_ROUTE_DECOMPOSED(paged_attention, PagedAttentionArgs, OpKey{op::kPagedAttention})
D0_ROUTE_DECOMPOSED(paged_mla_attention, PagedMlaArgs, (OpKey{op::kPagedMlaAttention, a.w_kv_b.format}))
D0_ROUTE_SIMPLE(indexer_topk, IndexerTopkArgs, OpKey{op::kIndexerTopk})
D0_ROUTE_SIMPLE(block_indexer_topk, BlockIndexerTopkArgs, OpKey{op::kBlockIndexerTopk})
D0_ROUTE_SIMPLE(causal_conv1d, CausalConv1dArgs, OpKey{op::kCausalConv1d})
D0_ROUTE_SIMPLE(gated_delta_rule, GatedDeltaRuleArgs, OpKey{op::kGatedDeltaRule})
D0_ROUTE_SIMPLE(ssm_scan, SsmScanArgs, OpKey{op::kSsmScan})
D0_ROUTE_DECOMPOSED(gated_rms_norm, GatedRmsNormArgs, OpKey{op::kGatedRmsNorm})
D0_ROUTE_SIMPLE(softmax, SoftmaxArgs, OpKey{op::kSoftmax})
D0_ROUTE_SIMPLE(silu, UnaryArgs, OpKey{op::kSilu})
D0_ROUTE_SIMPLE(gelu, UnaryArgs, OpKey{op::kGelu})
D0_ROUTE_SIMPLE(sigmoid, UnaryArgs, OpKey{op::kSigmoid})
D0_ROUTE_SIMPLE(softplus, UnaryArgs, OpKey{op::kSoftplus})
D0_ROUTE_SIMPLE(tanh, UnaryArgs, OpKey{op::kTanh})
D0_ROUTE_DECOMPOSED(swiglu, SwigluArgs, OpKey{op::kSwiglu})
D0_ROUTE_DECOMPOSED(swiglu_clamped, SwigluArgs, OpKey{op::kSwigluClamped})
D0_ROUTE_SIMPLE(moe_router, MoeRouterArgs, OpKey{op::kMoeRouter})
D0_ROUTE_DECOMPOSED(moe_experts, MoeExpertsArgs,
                    (OpKey{op::kMoeExperts,
                           a.experts.empty() ? WeightFormat::kF32 : a.experts[0].down.format}))
D0_ROUTE_SIMPLE(kv_compress, KvCompressArgs, OpKey{op::kKvCompress})
D0_ROUTE_SIMPLE(hc_weights, HcWeightsArgs, OpKey{op::kHcWeights})
D0_ROUTE_DECOMPOSED(hc_collapse, HcCollapseArgs, OpKey{op::kHcCollapse})
D0_ROUTE_DECOMPOSED(hc_expand, HcExpandArgs, OpKey{op::kHcExpand})
D0_ROUTE_SIMPLE(add, BinaryArgs, OpKey{op::kAdd})
D0_ROUTE_SIMPLE(mul, BinaryArgs, OpKey{op::kMul})
D0_ROUTE_SIMPLE(argmax, ArgmaxArgs, OpKey{op::kArgmax})
D0_ROUTE_SIMPLE(sample, SampleArgs, OpKey{op::kSample})
D0_ROUTE_SIMPLE(kv_write, KvWriteArgs, OpKey{op::kKvWrite})
D0_ROUTE_SIMPLE(kv_copy_blocks, KvCopyBlocksArgs, OpKey{op::kKvCopyBlocks})
D0_ROUTE_SIMPLE(clamp, PointwiseArgs, OpKey{op::kClamp})
D0_ROUTE_SIMPLE(scale, PointwiseArgs, OpKey{op::kScale})
D0_ROUTE_SIMPLE(round_bf16, PointwiseArgs, OpKey{op::kRoundBf16})
D0_ROUTE_SIMPLE(copy_columns, CopyColumnsArgs, OpKey{op::kCopyColumns})
D0_ROUTE_SIMPLE(rsqrt, PointwiseArgs, OpKey{op::kRsqrt})
D0_ROUTE_SIMPLE(row_mean, PointwiseArgs, OpKey{op::kRowMean})
D0_ROUTE_SIMPLE(gather_rows, GatherRowsArgs, OpKey{op::kGatherRows})
D0_ROUTE_SIMPLE(scatter_add, ScatterAddArgs, OpKey{op::kScatterAdd})

#undef D0_ROUTE_SIMPLE
#undef D0_ROUTE_DECOMPOSED

}  // namespace day0
