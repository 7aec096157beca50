#include "day0/plan/estimate.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "day0/core/error.h"
#include "day0/dist/expert_placement.h"

namespace day0::plan {

namespace {

constexpr double kActivationBytes = 2;  // BF16 activations
constexpr double kLogitBytes = 4;       // FP32 logits

int gi(WeightGroup g) {
  return static_cast<int>(g);
}

LayerSums stage_sums(const std::vector<LayerSums>& prefix, int64_t first, int64_t last) {
  LayerSums out;
  const LayerSums& a = prefix[static_cast<size_t>(first)];
  const LayerSums& b = prefix[static_cast<size_t>(last)];
  for (int g = 0; g < kWeightGroups; ++g) {
    out.bytes[g] = b.bytes[g] - a.bytes[g];
    out.params[g] = b.params[g] - a.params[g];
  }
  out.kv_seq_bytes = b.kv_seq_bytes - a.kv_seq_bytes;
  out.kv_read_bytes = b.kv_read_bytes - a.kv_read_bytes;
  out.attn_decode_flops = b.attn_decode_flops - a.attn_decode_flops;
  out.attn_prefill_flops = b.attn_prefill_flops - a.attn_prefill_flops;
  out.n_layers = b.n_layers - a.n_layers;
  out.n_moe_layers = b.n_moe_layers - a.n_moe_layers;
  out.n_heads_norm_layers = b.n_heads_norm_layers - a.n_heads_norm_layers;
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Share of a GQA layer's kv heads (and k/v weights) one TP rank holds; MLA's latent is whole on each rank.
double kv_shard(const ModelCost& m, int64_t tp) {
  if (m.mla || m.n_kv_heads <= 0) return 1.0;
  return 1.0 / static_cast<double>(std::min(tp, m.n_kv_heads));
}

// Ring all-reduce of `bytes` over `ranks` devices on `link`.
double all_reduce_time(double bytes, int64_t ranks, const LinkSpec& link) {
  if (ranks <= 1) return 0;
  const double r = static_cast<double>(ranks);
  return 2 * (r - 1) / r * bytes / link.bandwidth + 2 * (r - 1) * link.latency;
}

const LinkSpec& link_for_group(const ClusterSpec& c, int64_t group_size) {
  return group_size <= c.devices_per_node ? c.intra_node : c.inter_node;
}

// Dispatch + combine of `bytes_per_device` each over an all-to-all among `ep` ranks spread over a stage
// of `stage_devices` devices: the share of peers in other nodes goes over the network.
double all_to_all_time(double bytes_per_device, int64_t ep, int64_t stage_devices, const ClusterSpec& c) {
  if (ep <= 1) return 0;
  const double leaving = bytes_per_device * static_cast<double>(ep - 1) / static_cast<double>(ep);
  double off_node = 0;
  if (stage_devices > c.devices_per_node) {
    off_node = 1.0 - static_cast<double>(c.devices_per_node) / static_cast<double>(stage_devices);
  }
  const double t = leaving * ((1 - off_node) / c.intra_node.bandwidth + off_node / c.inter_node.bandwidth);
  const double latency = off_node > 0 ? c.inter_node.latency : c.intra_node.latency;
  return 2 * (t + latency);
}

// Probability that a given routed expert receives at least one of `tokens` tokens (k of E each).
double expert_touch_fraction(const ModelCost& m, double tokens) {
  if (m.n_experts <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(m.experts_per_token) / static_cast<double>(m.n_experts);
  return 1.0 - std::pow(std::max(miss, 0.0), tokens);
}

// Up to this mean count a rank's count distribution is summed exactly; above it the normal approximation
// stands in (the sum would take thousands of terms at a prefill's counts, where the normal is close).
constexpr double kExactCountLimit = 32;
// The runtime cuts a pipelined step's rows into two micro-batches a stage (EngineOptions::
// pipeline_micro_batches = 0); a one-sequence decode step has one row, so one micro-batch.
constexpr int64_t kMicroBatchesPerStage = 2;

// E[max] (`max`) or E[min] of `ranks` independent Binomial(n, p) counts: the sum over m >= 1 of
// P(max >= m) = 1 - F(m - 1)^ranks, or of P(min >= m) = (1 - F(m - 1))^ranks. Stops once past the
// mean and the terms are negligible; with n p <= kExactCountLimit that is a few dozen terms.
double binomial_extreme(int64_t n, double p, int64_t ranks, bool max) {
  const double q = 1 - p;
  const auto r = static_cast<double>(ranks);
  const double mean = static_cast<double>(n) * p;
  double pmf = std::pow(q, static_cast<double>(n));  // P(X = 0)
  double cdf = 0, sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    cdf = std::min(1.0, cdf + pmf);  // P(X <= j)
    const double term = max ? 1 - std::pow(cdf, r) : std::pow(1 - cdf, r);
    sum += term;
    if (static_cast<double>(j) >= mean && term < 1e-12) break;
    pmf *= static_cast<double>(n - j) / static_cast<double>(j + 1) * p / q;
  }
  return sum;
}

// E[max] of `ranks` independent Binomial(n, p) counts.
double expected_max_binomial(int64_t n, double p, int64_t ranks) {
  const auto trials = static_cast<double>(n);
  const double mean = trials * p;
  if (ranks <= 1 || n <= 0 || p <= 0) return mean;
  if (p >= 1) return trials;
  if (std::min(mean, trials - mean) > kExactCountLimit) {
    const double spread = expected_max_standard_normal(ranks) * std::sqrt(mean * (1 - p));
    return std::min(trials, mean + spread);
  }
  // Count the rarer outcome, so that the sum stays short: max of successes = n - min of failures.
  if (p <= 0.5) return binomial_extreme(n, p, ranks, true);
  return trials - binomial_extreme(n, 1 - p, ranks, false);
}

double blom_expected_max(int64_t n) {
  const auto nd = static_cast<double>(n);
  const double target = (nd - 0.375) / (nd + 0.25);
  // Newton on Phi(x) = target from x = 0: Phi is concave for x >= 0, so the iterates rise to the root
  // without passing it.
  double x = 0;
  for (int i = 0; i < 60; ++i) {
    const double f = 0.5 * std::erfc(-x / std::sqrt(2.0)) - target;
    const double step = f / (std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi));
    x -= step;
    if (std::abs(step) < 1e-12) break;
  }
  return x;
}

}  // namespace

double expected_max_standard_normal(int64_t n) {
  // The planner asks for group sizes of every layout it costs: a table of the usual sizes keeps the
  // Newton iterations off that path.
  constexpr int64_t kTabled = 4096;
  static const std::vector<double> kTable = [] {
    std::vector<double> t(kTabled + 1, 0.0);
    for (int64_t i = 2; i <= kTabled; ++i) t[static_cast<size_t>(i)] = blom_expected_max(i);
    return t;
  }();
  if (n <= 1) return 0;
  return n <= kTabled ? kTable[static_cast<size_t>(n)] : blom_expected_max(n);
}

double sync_wait_fraction(double sync_skew, int64_t ranks) {
  if (ranks <= 1) return 0;
  return sync_skew * expected_max_standard_normal(ranks) / expected_max_standard_normal(2);
}

ExpertLoadImbalance expert_load_imbalance(int64_t n_experts, double experts_per_token, int64_t ep,
                                          double tokens) {
  ExpertLoadImbalance out;
  if (ep <= 1 || n_experts <= 0 || experts_per_token <= 0 || tokens <= 0) return out;
  const auto experts = static_cast<double>(n_experts);
  const auto ranks = static_cast<double>(ep);
  const double k = std::min(experts_per_token, experts);
  // Picks: tokens x k of them, each on a given rank with probability 1 / ep. A rank holds experts / ep
  // experts and a token picks distinct experts, so at most tokens x min(k, experts / ep) land on one.
  const auto picks = static_cast<int64_t>(std::llround(tokens * k));
  const double picks_mean = static_cast<double>(picks) / ranks;
  if (picks_mean > 0) {
    const double most =
        std::min(expected_max_binomial(picks, 1 / ranks, ep), tokens * std::min(k, experts / ranks));
    out.picks = std::max(1.0, most / picks_mean);
  }
  // Experts touched: each of a rank's experts / ep gets at least one of the tokens with probability
  // 1 - (1 - k / experts)^tokens.
  const auto local = static_cast<int64_t>(std::llround(experts / ranks));
  const double touch = 1 - std::pow(std::max(0.0, 1 - k / experts), tokens);
  const double touched_mean = static_cast<double>(local) * touch;
  if (local > 0 && touched_mean > 0)
    out.experts = std::max(1.0, expected_max_binomial(local, touch, ep) / touched_mean);
  return out;
}

const char* memory_item_name(MemoryItem item) {
  switch (item) {
    case MemoryItem::kAttention:
      return "attention";
    case MemoryItem::kDenseMlp:
      return "dense MLP";
    case MemoryItem::kSharedExperts:
      return "shared experts";
    case MemoryItem::kRoutedExperts:
      return "routed experts";
    case MemoryItem::kEmbedding:
      return "embedding";
    case MemoryItem::kLmHead:
      return "lm_head";
    case MemoryItem::kOtherWeights:
      return "routers+norms";
    case MemoryItem::kKvCache:
      return "KV cache";
    case MemoryItem::kActivations:
      return "activations";
    case MemoryItem::kReserve:
      return "reserve";
  }
  return "?";
}

double MemoryEstimate::weights() const {
  double w = 0;
  for (int i = 0; i <= static_cast<int>(MemoryItem::kOtherWeights); ++i) w += items[i];
  return w;
}

namespace {

std::vector<LayerSums> build_prefix(const PreparedModel& p, int64_t context) {
  const ModelCost& m = *p.model;
  std::vector<LayerSums> prefix(m.layers.size() + 1);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerCost& layer = m.layers[i];
    LayerSums next = prefix[i];
    for (int g = 0; g < kWeightGroups; ++g) {
      next.bytes[g] += p.layer_bytes[i][g];
      next.params[g] += layer.params[g];
    }
    next.kv_seq_bytes += p.kv_seq_bytes[i];
    next.kv_read_bytes += p.kv_read_bytes[i];
    // The keys a row reads (window, compressed entries, sparse selection) and those its indexer scores:
    // decode, the context's last token; prefill, every row of a context-long causal prompt.
    const RowKeys last = row_keys(layer.reach, context), prompt_rows = prompt_keys(layer.reach, context);
    next.attn_decode_flops +=
        layer.attn_flops_per_pair_decode * last.attended + layer.index_flops_per_pair * last.indexed;
    next.attn_prefill_flops += layer.attn_flops_per_pair_prefill * prompt_rows.attended +
                               layer.index_flops_per_pair * prompt_rows.indexed;
    next.n_layers += 1;
    next.n_moe_layers += layer.moe ? 1 : 0;
    next.n_heads_norm_layers += layer.heads_norm_all_reduce ? 1 : 0;
    prefix[i + 1] = next;
  }
  return prefix;
}

}  // namespace

std::pair<int64_t, int64_t> stage_layers(int64_t n_layers, int64_t pp, int64_t stage) {
  const int64_t base = n_layers / pp;
  const int64_t extra = n_layers % pp;  // the last `extra` stages hold one more layer
  const int64_t bigger_before = std::max<int64_t>(0, stage - (pp - extra));
  const int64_t first = stage * base + bigger_before;
  const int64_t size = base + (stage >= pp - extra ? 1 : 0);
  return {first, first + size};
}

PreparedModel prepare_model(const ModelCost& model, const Workload& w, const DeviceSpec& device) {
  PreparedModel p;
  p.model = &model;
  const WeightPrecision precision = w.weights;
  const auto ctx = static_cast<double>(ceil_div(w.context, w.kv_block_tokens) * w.kv_block_tokens);
  p.layer_bytes.reserve(model.layers.size());
  for (const auto& layer : model.layers) {
    std::array<double, kWeightGroups> bytes{};
    for (int g = 0; g < kWeightGroups; ++g)
      bytes[g] = group_bytes(layer, static_cast<WeightGroup>(g), precision);
    p.layer_bytes.push_back(bytes);
    const double cached = layer.kv_window > 0 ? std::min(ctx, static_cast<double>(layer.kv_window)) : ctx;
    // A sequence's cache: its KV rows, plus the fixed state of a recurrent layer twice (the live state
    // and its snapshot at the sequence's last whole block, KvCache's state blocks).
    // Compressed entries stay for the whole context, past any window.
    p.kv_seq_bytes.push_back(cached * layer.kv_bytes(w.kv) + ctx * layer.compressed_kv_bytes(w.kv) +
                             2 * layer.state_bytes_per_sequence);
    // A decode step reads the keys its row attends to, whole, and of the keys its indexer scored but did
    // not select only the index keys (index_key_share of a raw row, or of an entry where the layer
    // compresses): row_keys, as its FLOPs.
    const RowKeys keys = row_keys(layer.reach, w.context);
    const bool compresses = layer.reach.entry_ratio > 0;
    const double entry_bytes = layer.compressed_kv_bytes(w.kv) * static_cast<double>(layer.reach.entry_ratio);
    const double unselected = std::max(0.0, keys.indexed - (compresses ? keys.entries : keys.attended));
    p.kv_read_bytes.push_back(
        layer.kv_bytes(w.kv) * (keys.attended - keys.entries) + entry_bytes * keys.entries +
        (compresses ? entry_bytes : layer.kv_bytes(w.kv)) * layer.index_key_share * unselected +
        layer.state_bytes_per_sequence);
  }
  const bool checkpoint = precision == WeightPrecision::kCheckpoint;
  p.embedding_bytes = checkpoint ? model.embedding_checkpoint_bytes : model.embedding_params * 2;
  if (model.tied_embeddings) {
    p.lm_head_bytes = p.embedding_bytes;
  } else {
    p.lm_head_bytes = checkpoint ? model.lm_head_checkpoint_bytes : model.lm_head_params * 2;
  }
  p.final_norm_bytes = model.final_norm_params * 2;
  const WeightPrecision math = checkpoint ? model.checkpoint_precision : precision;
  p.linear_peak = device.peak_flops_bf16;
  if (math == WeightPrecision::kFP8 && device.peak_flops_fp8 > 0) p.linear_peak = device.peak_flops_fp8;
  if (math == WeightPrecision::kINT8 && device.peak_flops_int8 > 0) p.linear_peak = device.peak_flops_int8;
  p.attention_peak = device.peak_flops_bf16;
  p.prefix = build_prefix(p, w.context);
  return p;
}

namespace {

// Weight bytes one device of `stage` holds, by memory item.
struct StageWeights {
  double attention = 0, dense = 0, shared = 0, routed = 0, embedding = 0, lm_head = 0, other = 0;
  double total() const { return attention + dense + shared + routed + embedding + lm_head + other; }
};

StageWeights stage_weights(const PreparedModel& p, const LayerSums& s, const Workload& w,
                           const Parallelism& par, int64_t stage) {
  const ModelCost& m = *p.model;
  const auto tp = static_cast<double>(par.tp);
  StageWeights out;
  out.attention = s.bytes[gi(WeightGroup::kAttentionSharded)] / tp +
                  s.bytes[gi(WeightGroup::kAttentionReplicated)] +
                  s.bytes[gi(WeightGroup::kAttentionKv)] * kv_shard(m, par.tp);
  out.dense = s.bytes[gi(WeightGroup::kDenseMlp)] / tp;
  out.shared = s.bytes[gi(WeightGroup::kSharedExperts)] / tp;
  if (m.n_experts > 0) {
    // The most loaded EP rank holds its block plus its replicas (the runtime's placement rule,
    // dist/expert_placement.h: ceil((E + R) / EP)), each split over expert-TP ranks.
    const auto held = static_cast<double>(dist::max_slots_per_rank(m.n_experts, par.ep, w.redundant_experts));
    out.routed = s.bytes[gi(WeightGroup::kRoutedExperts)] / static_cast<double>(m.n_experts) * held /
                 static_cast<double>(par.expert_tp());
  }
  out.other = s.bytes[gi(WeightGroup::kRouter)] + s.bytes[gi(WeightGroup::kNorm)];
  if (stage == 0) out.embedding = p.embedding_bytes / tp;
  if (stage == par.pp - 1) {
    out.other += p.final_norm_bytes;
    // Tied embeddings share one matrix only when the first and last stage are the same device.
    if (!m.tied_embeddings || par.pp > 1) out.lm_head = p.lm_head_bytes / tp;
  }
  return out;
}

double activation_bytes(const ModelCost& m, const Workload& w, const Parallelism& par, bool last_stage) {
  const auto tp = static_cast<double>(par.tp);
  const auto chunk = static_cast<double>(std::min(w.prefill_chunk, w.context));
  const double attn_width = static_cast<double>(m.n_heads * (m.qk_head_dim + m.v_head_dim)) / tp;
  const double mlp_width =
      2.0 * static_cast<double>(std::max(m.dense_intermediate, m.shared_intermediate)) / tp;
  double bytes = chunk * kActivationBytes * (4.0 * static_cast<double>(m.hidden) + attn_width + mlp_width);
  if (m.n_experts > 0) {
    // Tokens of every replica's chunk routed to this rank: receive/send buffers and the expert MLP.
    const double arriving =
        chunk * static_cast<double>(par.dp) * m.experts_per_token / static_cast<double>(par.ep);
    const double width =
        2.0 * static_cast<double>(m.expert_intermediate) / static_cast<double>(par.expert_tp());
    bytes += arriving * kActivationBytes * (2.0 * static_cast<double>(m.hidden) + width);
  }
  if (last_stage) {
    const auto seqs = static_cast<double>(ceil_div(w.concurrency, par.dp));
    bytes += seqs * static_cast<double>(m.vocab) / tp * kLogitBytes;
  }
  return bytes;
}

}  // namespace

MemoryEstimate estimate_memory(const PreparedModel& p, const ClusterSpec& cluster, const Workload& w,
                               const Parallelism& par) {
  D0_CHECK(p.model != nullptr && par.tp >= 1 && par.pp >= 1 && par.dp >= 1 && par.ep >= 1);
  D0_CHECK(par.pp <= p.model->n_layers());
  const ModelCost& m = *p.model;
  D0_CHECK(p.prefix.size() == m.layers.size() + 1);
  const auto& prefix = p.prefix;
  MemoryEstimate out;
  out.capacity = cluster.device.memory_bytes;
  const double reserve = w.reserve_fraction * out.capacity;
  const auto seqs_per_replica = static_cast<double>(ceil_div(w.concurrency, par.dp));
  const double kv_factor = kv_shard(m, par.tp);
  double min_tokens = -1;
  int64_t min_seqs = -1;
  for (int64_t stage = 0; stage < par.pp; ++stage) {
    const auto [first, last] = stage_layers(m.n_layers(), par.pp, stage);
    const LayerSums s = stage_sums(prefix, first, last);
    const StageWeights sw = stage_weights(p, s, w, par, stage);
    const double kv_seq = s.kv_seq_bytes * kv_factor;
    const double act = activation_bytes(m, w, par, stage == par.pp - 1);
    const double kv = seqs_per_replica * kv_seq;
    const double total = sw.total() + kv + act + reserve;
    const double free = out.capacity - reserve - sw.total() - act;
    if (kv_seq > 0) {
      const double tokens = std::max(0.0, free) / kv_seq * static_cast<double>(w.context);
      const auto seqs = static_cast<int64_t>(std::floor(std::max(0.0, free) / kv_seq));
      if (min_tokens < 0 || tokens < min_tokens) min_tokens = tokens;
      if (min_seqs < 0 || seqs < min_seqs) min_seqs = seqs;
    }
    if (stage == 0 || total > out.total) {
      out.total = total;
      out.stage = stage;
      out.kv_free_bytes = free;
      out.items = {sw.attention, sw.dense, sw.shared, sw.routed, sw.embedding,
                   sw.lm_head,   sw.other, kv,        act,       reserve};
    }
  }
  const auto dp = static_cast<double>(par.dp);
  out.kv_capacity_tokens = std::max(0.0, min_tokens) * dp;
  out.max_sequences_at_context = std::max<int64_t>(0, min_seqs) * par.dp;
  return out;
}

double TimeEstimate::run_idle_ratio(double decode_steps) const {
  const double time = ttft + decode_steps * tpot;
  return time > 0 ? (prefill.total() + decode_steps * decode.total()) / time : 0;
}

TimeEstimate estimate_time(const PreparedModel& p, const ClusterSpec& c, const Workload& w,
                           const Parallelism& par) {
  const ModelCost& m = *p.model;
  D0_CHECK(p.prefix.size() == m.layers.size() + 1);
  const auto tp = static_cast<double>(par.tp);
  const auto etp = static_cast<double>(par.expert_tp());
  const auto ep = static_cast<double>(par.ep);
  const auto hidden = static_cast<double>(m.hidden);
  const auto k = static_cast<double>(m.experts_per_token);
  const auto experts = static_cast<double>(std::max<int64_t>(1, m.n_experts));
  const double physical = static_cast<double>(m.n_experts + w.redundant_experts);
  const double kv_factor = kv_shard(m, par.tp);
  const double bw = c.device.memory_bandwidth;
  const LinkSpec& tp_link = link_for_group(c, par.tp);
  const LinkSpec& etp_link = link_for_group(c, par.expert_tp());
  // Stages are laid out one after another: a boundary crosses nodes unless the pipeline fits in one.
  const LinkSpec& pp_link = par.devices() <= c.devices_per_node ? c.intra_node : c.inter_node;

  // Which ranks meet at a stage's collectives: its TP group, or every rank of the stage when MoE layers
  // combine over EP x expert-TP (= TP x DP).
  const double dense_sync = sync_wait_fraction(c.sync_skew, par.tp);
  const double moe_sync = sync_wait_fraction(c.sync_skew, par.stage_devices());

  // One step of `tokens` new tokens per replica through one stage, for the mean rank.
  struct StepCost {
    double compute = 0, memory = 0;  // the rank's own work: max(compute, memory) of it
    double transfer = 0;             // its collectives' latency + bytes / bandwidth
    double imbalance = 0;            // how much later than the mean rank the most loaded EP rank finishes
    double skew = 0;                 // waits at collectives for ranks that arrive late
    double busy() const { return std::max(compute, memory); }
    double time() const { return busy() + imbalance + skew + transfer; }
  };
  // `group_tokens`: tokens of all the stage's replicas together (what the experts see); `load`: their
  // expert imbalance across EP ranks.
  auto stage_step = [&](const LayerSums& s, int64_t stage, double tokens, double group_tokens,
                        double kv_read_bytes, double attn_flops, const ExpertLoadImbalance& load) {
    StepCost out;
    const double dense_params =
        s.params[gi(WeightGroup::kAttentionSharded)] / tp + s.params[gi(WeightGroup::kAttentionReplicated)] +
        s.params[gi(WeightGroup::kAttentionKv)] * kv_shard(m, par.tp) +
        (s.params[gi(WeightGroup::kDenseMlp)] + s.params[gi(WeightGroup::kSharedExperts)]) / tp +
        s.params[gi(WeightGroup::kRouter)];
    const double dense_bytes =
        s.bytes[gi(WeightGroup::kAttentionSharded)] / tp + s.bytes[gi(WeightGroup::kAttentionReplicated)] +
        s.bytes[gi(WeightGroup::kAttentionKv)] * kv_shard(m, par.tp) +
        (s.bytes[gi(WeightGroup::kDenseMlp)] + s.bytes[gi(WeightGroup::kSharedExperts)]) / tp +
        s.bytes[gi(WeightGroup::kRouter)] + s.bytes[gi(WeightGroup::kNorm)];
    double flops = 2 * tokens * dense_params;
    double bytes = dense_bytes + kv_read_bytes;
    double expert_flops = 0, expert_bytes = 0;
    if (m.n_experts > 0) {
      const double per_expert_params = s.params[gi(WeightGroup::kRoutedExperts)] / experts;
      const double per_expert_bytes = s.bytes[gi(WeightGroup::kRoutedExperts)] / experts;
      const double arriving = group_tokens * k / ep;  // token-expert pairs served by this EP rank
      expert_flops = 2 * arriving * per_expert_params / etp;
      const double local_experts = physical / ep;
      expert_bytes = local_experts * expert_touch_fraction(m, group_tokens) * per_expert_bytes / etp;
      flops += expert_flops;
      bytes += expert_bytes;
      const double msg =
          group_tokens / static_cast<double>(par.stage_devices()) * k * hidden * kActivationBytes;
      out.transfer += s.n_moe_layers * all_to_all_time(msg, par.ep, par.stage_devices(), c);
      out.transfer +=
          s.n_moe_layers * all_reduce_time(arriving * hidden * kActivationBytes, par.expert_tp(), etp_link);
    }
    if (stage == par.pp - 1) {
      flops += 2 * tokens * static_cast<double>(m.vocab) * hidden / tp;
      bytes += p.lm_head_bytes / tp;
    }
    out.compute = flops / p.linear_peak + attn_flops / tp / p.attention_peak;
    out.memory = bytes / bw;
    out.transfer += s.n_layers * 2 * all_reduce_time(tokens * hidden * kActivationBytes, par.tp, tp_link);
    // Sums of squares of a norm over all heads: q and k fused into one all-reduce of two floats a token.
    out.transfer += s.n_heads_norm_layers * all_reduce_time(tokens * 2 * 4, par.tp, tp_link);
    // Each MoE layer's combine waits for the EP rank with the most routed work: its expert FLOPs and
    // expert bytes are the mean rank's times the expected max / mean of the loads.
    if (expert_flops > 0 || expert_bytes > 0) {
      const double heaviest = std::max(
          (flops + (load.picks - 1) * expert_flops) / p.linear_peak + attn_flops / tp / p.attention_peak,
          (bytes + (load.experts - 1) * expert_bytes) / bw);
      out.imbalance = std::max(0.0, heaviest - out.busy());
    }
    out.skew = (s.n_moe_layers > 0 ? moe_sync : dense_sync) * out.busy();
    return out;
  };

  TimeEstimate out;
  const auto batch = static_cast<double>(ceil_div(w.concurrency, par.dp));
  const double group_tokens =
      static_cast<double>(std::min(w.concurrency, par.dp * ceil_div(w.concurrency, par.dp)));
  const auto chunk = static_cast<double>(std::min(w.prefill_chunk, w.context));
  const double n_chunks = std::ceil(static_cast<double>(w.context) / chunk);
  // Prefill under PP: each chunk is cut into micro-batches as the runtime cuts it, so that the stages
  // overlap; the bubble is then (P - 1) / (M + P - 1) of a balanced pipeline.
  const double micro = par.pp > 1 ? std::min(chunk, static_cast<double>(kMicroBatchesPerStage * par.pp)) : 1;
  const double micro_tokens = chunk / micro;
  const double units = n_chunks * micro;  // micro-batches a prompt takes through each stage
  const ExpertLoadImbalance decode_load = expert_load_imbalance(m.n_experts, k, par.ep, group_tokens);
  const ExpertLoadImbalance prefill_load = expert_load_imbalance(m.n_experts, k, par.ep, micro_tokens);
  const auto stages = static_cast<double>(par.pp);
  double decode_sum = 0, decode_compute = 0, decode_memory = 0;
  double prefill_sum = 0, prefill_max = 0;
  for (int64_t stage = 0; stage < par.pp; ++stage) {
    const auto [first, last] = stage_layers(m.n_layers(), par.pp, stage);
    const LayerSums s = stage_sums(p.prefix, first, last);
    const StepCost d = stage_step(s, stage, batch, group_tokens, batch * s.kv_read_bytes * kv_factor,
                                  batch * s.attn_decode_flops, decode_load);
    decode_sum += d.time();
    decode_compute += d.compute;
    decode_memory += d.memory;
    // Means over the stages: every stage has ranks, and the figures are the mean rank's.
    out.decode.transfer += d.transfer / stages;
    out.decode.skew += d.skew / stages;
    out.decode.imbalance += d.imbalance / stages;
    // Prefill: one prompt on one replica, micro-batch by micro-batch; on average a micro-batch reads
    // half the prompt's KV.
    const StepCost f = stage_step(s, stage, micro_tokens, micro_tokens, 0.5 * s.kv_seq_bytes * kv_factor,
                                  s.attn_prefill_flops / units, prefill_load);
    prefill_sum += f.time();
    prefill_max = std::max(prefill_max, f.time());
    out.prefill.transfer += units * f.transfer / stages;
    out.prefill.skew += units * f.skew / stages;
    out.prefill.imbalance += units * f.imbalance / stages;
  }
  const double pp_hops = static_cast<double>(par.pp - 1);
  const double decode_hop = batch * hidden * kActivationBytes / pp_link.bandwidth + pp_link.latency;
  const double prefill_hop = micro_tokens * hidden * kActivationBytes / pp_link.bandwidth + pp_link.latency;
  // Decode takes the batch through the stages one after the other (one micro-batch: the caveats say
  // so); a stage waits while the others work, its bubble.
  out.tpot = decode_sum + pp_hops * decode_hop;
  out.decode.transfer += pp_hops * decode_hop;
  out.decode.bubble = std::max(0.0, decode_sum - decode_sum / stages);
  // Prefill: the first micro-batch crosses every stage, then the slowest stage sets the pace.
  out.ttft = prefill_sum + (units - 1) * prefill_max + pp_hops * prefill_hop;
  out.prefill.transfer += pp_hops * prefill_hop;
  out.prefill.bubble = std::max(0.0, prefill_sum + (units - 1) * prefill_max - units * prefill_sum / stages);
  out.tokens_per_s = static_cast<double>(w.concurrency) / out.tpot;
  out.tokens_per_s_per_device = out.tokens_per_s / static_cast<double>(par.devices());
  out.comm_share = out.tpot > 0 ? out.decode.transfer / out.tpot : 0;
  out.idle_ratio = out.tpot > 0 ? out.decode.total() / out.tpot : 0;
  out.decode_memory_bound = decode_memory >= decode_compute;
  return out;
}

}  // namespace day0::plan
