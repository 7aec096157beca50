// Reference kernels for routing and experts, argmax and sampling.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/error.h"
#include "day0/ops/kernel_checks.h"

namespace day0::ref {

namespace {

// Scratch of the router, one per calling thread, grown and never shrunk: once the largest (experts,
// top_k) shape was seen a call allocates nothing (a decode step stays allocation-free).
struct RouterScratch {
  std::vector<double> logits, scores, sel, group_score, w;
  std::vector<int64_t> idx, kept_groups;
  std::vector<char> taken;
};

// The k largest values of v, descending, ties broken by the lower index (the order a stable sort
// gives), into idx[0..k). Afterwards taken[i] != 0 exactly for the chosen i.
void top_k_indices(const std::vector<double>& v, int64_t k, std::vector<int64_t>& idx,
                   std::vector<char>& taken) {
  taken.assign(v.size(), 0);
  idx.resize(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    size_t best = v.size();
    for (size_t i = 0; i < v.size(); ++i) {
      if (taken[i] == 0 && (best == v.size() || v[i] > v[best])) best = i;
    }
    D0_CHECK_MSG(best < v.size(), "moe_router: top_k larger than the candidates");
    taken[best] = 1;
    idx[static_cast<size_t>(j)] = static_cast<int64_t>(best);
  }
}

// Sets to -inf every expert outside the topk_group best groups. A group scores its best member, or
// the sum of its two best (top2_sum).
void mask_groups(std::vector<double>& sel, int64_t n_group, int64_t topk_group, bool top2_sum,
                 RouterScratch& s) {
  const auto e = static_cast<int64_t>(sel.size());
  const int64_t per_group = e / n_group;
  s.group_score.resize(static_cast<size_t>(n_group));
  for (int64_t g = 0; g < n_group; ++g) {
    double first = -INFINITY, second = -INFINITY;
    for (int64_t i = g * per_group; i < (g + 1) * per_group; ++i) {
      const double x = sel[static_cast<size_t>(i)];
      if (x > first) {
        second = first;
        first = x;
      } else if (x > second) {
        second = x;
      }
    }
    s.group_score[static_cast<size_t>(g)] = top2_sum ? first + (per_group > 1 ? second : 0.0) : first;
  }
  top_k_indices(s.group_score, topk_group, s.kept_groups, s.taken);
  for (int64_t g = 0; g < n_group; ++g) {
    if (s.taken[static_cast<size_t>(g)] != 0) continue;
    for (int64_t i = g * per_group; i < (g + 1) * per_group; ++i) sel[static_cast<size_t>(i)] = -INFINITY;
  }
}

}  // namespace

void moe_router(const MoeRouterArgs& a) {
  check_args(a);
  thread_local RouterScratch s;
  const int64_t e = a.logits.cols;
  const auto k = static_cast<size_t>(a.top_k);
  for (int64_t t = 0; t < a.logits.rows; ++t) {
    std::vector<double>& logits = s.logits;
    logits.resize(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) logits[static_cast<size_t>(i)] = a.logits.row(t)[i];
    std::vector<double>& w = s.w;
    w.resize(k);
    if (a.method == TopkMethod::kLogitsThenSoftmax || a.method == TopkMethod::kLogitsThenSigmoid) {
      top_k_indices(logits, a.top_k, s.idx, s.taken);
      for (size_t j = 0; j < k; ++j) w[j] = logits[static_cast<size_t>(s.idx[j])];
      if (a.method == TopkMethod::kLogitsThenSoftmax) {
        const double m = w[0];
        double sum = 0.0;
        for (double& x : w) sum += (x = std::exp(x - m));
        for (double& x : w) x /= sum;
      } else {
        for (double& x : w) x = sigmoid_of(x);
      }
    } else {
      std::vector<double>& scores = s.scores;
      scores.resize(logits.size());
      switch (a.scoring) {
        case RouterScoring::kSoftmax: {
          const double m = *std::max_element(logits.begin(), logits.end());
          double sum = 0.0;
          for (size_t i = 0; i < logits.size(); ++i) sum += (scores[i] = std::exp(logits[i] - m));
          for (double& x : scores) x /= sum;
          break;
        }
        case RouterScoring::kSigmoid:
          for (size_t i = 0; i < logits.size(); ++i) scores[i] = sigmoid_of(logits[i]);
          break;
        case RouterScoring::kSqrtSoftplus:
          for (size_t i = 0; i < logits.size(); ++i) scores[i] = std::sqrt(softplus_of(logits[i]));
          break;
      }
      if (a.hashed()) {  // the token's experts come from the table: no selection
        s.idx.resize(k);
        for (size_t j = 0; j < k; ++j) s.idx[j] = a.hash_table.row(a.token_ids[static_cast<size_t>(t)])[j];
      } else {
        std::vector<double>& sel = s.sel;
        sel.assign(scores.begin(), scores.end());
        if (a.method == TopkMethod::kNoauxTc) {
          for (size_t i = 0; i < sel.size(); ++i) sel[i] += a.correction_bias[i];
        }
        if (a.method != TopkMethod::kGreedy) {
          mask_groups(sel, a.n_group, a.topk_group, a.method == TopkMethod::kNoauxTc, s);
        }
        top_k_indices(sel, a.top_k, s.idx, s.taken);
      }
      for (size_t j = 0; j < k; ++j) w[j] = scores[static_cast<size_t>(s.idx[j])];
    }
    if (a.norm_topk_prob) {
      const double sum = std::accumulate(w.begin(), w.end(), 0.0);
      for (double& x : w) x /= (sum + a.renorm_eps);
    }
    for (size_t j = 0; j < k; ++j) {
      a.expert_ids.row(t)[j] = static_cast<int32_t>(s.idx[j]);
      const double scale = a.expert_scale.empty() ? 1.0 : a.expert_scale[static_cast<size_t>(s.idx[j])];
      a.expert_weights.row(t)[j] = static_cast<float>(w[j] * a.routed_scaling_factor * scale);
    }
  }
}

void moe_experts(const MoeExpertsArgs& a) {
  check_args(a);
  const int64_t h = a.x.cols;
  for (int64_t t = 0; t < a.x.rows; ++t) {
    std::vector<double> acc(static_cast<size_t>(h), 0.0);
    for (int64_t j = 0; j < a.expert_ids.cols; ++j) {
      const double w = a.expert_weights.row(t)[j];
      const int64_t id = a.expert_ids.row(t)[j];
      if (id >= a.routed_experts()) {  // a zero-computation expert returns its input
        for (int64_t c = 0; c < h; ++c) acc[static_cast<size_t>(c)] += w * a.x.row(t)[c];
        continue;
      }
      const int64_t local = a.slot_of(id);
      if (local < 0) continue;  // computed by another rank
      const auto& ew = a.experts[static_cast<size_t>(local)];
      const int64_t inter = ew.down.cols;
      std::vector<double> x(static_cast<size_t>(h));
      for (int64_t c = 0; c < h; ++c)
        x[static_cast<size_t>(c)] = a.input_scaling ? w * a.x.row(t)[c] : a.x.row(t)[c];
      auto project = [&](const WeightView& wv, int64_t row, const float* bias) {
        double s = bias ? bias[row] : 0.0;
        for (int64_t c = 0; c < h; ++c) s += wv.at(row, c) * x[static_cast<size_t>(c)];
        return s;
      };
      std::vector<double> act(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        if (a.relu2) {
          const double u = std::max(project(ew.up, i, ew.up_bias), 0.0);
          act[static_cast<size_t>(i)] = u * u;
          continue;
        }
        double g;
        double u;
        switch (a.layout) {
          case GateUpLayout::kSeparate:
            g = project(ew.gate, i, ew.gate_bias);
            u = project(ew.up, i, ew.up_bias);
            break;
          case GateUpLayout::kInterleaved:
            g = project(ew.gate, 2 * i, ew.gate_bias);
            u = project(ew.gate, 2 * i + 1, ew.gate_bias);
            break;
          case GateUpLayout::kConcatenated:
          default:
            g = project(ew.gate, i, ew.gate_bias);
            u = project(ew.gate, inter + i, ew.gate_bias);
            break;
        }
        act[static_cast<size_t>(i)] = a.clamped     ? clamped_swiglu_of(g, u, a.limit, a.alpha, a.up_shift)
                                      : a.gelu_tanh ? geglu_of(g, u)
                                                    : silu_of(g) * u;
      }
      const double out_weight = a.input_scaling ? 1.0 : w;
      for (int64_t c = 0; c < h; ++c) {
        double s = ew.down_bias ? ew.down_bias[c] : 0.0;
        for (int64_t i = 0; i < inter; ++i) s += ew.down.at(c, i) * act[static_cast<size_t>(i)];
        acc[static_cast<size_t>(c)] += out_weight * s;
      }
    }
    float* out = a.out.row(t);
    for (int64_t c = 0; c < h; ++c) {
      out[c] = static_cast<float>(a.accumulate ? out[c] + acc[static_cast<size_t>(c)]
                                               : acc[static_cast<size_t>(c)]);
    }
  }
}

void argmax(const ArgmaxArgs& a) {
  check_args(a);
  for (int64_t r = 0; r < a.x.rows; ++r) {
    const float* x = a.x.row(r);
    int64_t best = 0;
    for (int64_t c = 1; c < a.x.cols; ++c) {
      if (x[c] > x[best]) best = c;
    }
    a.out[static_cast<size_t>(r)] = static_cast<int32_t>(best);
  }
}

void sample(const SampleArgs& a) {
  check_args(a);
  if (a.temperature <= 0.0f) {
    argmax({a.logits, a.out});
    return;
  }
  const int64_t v = a.logits.cols;
  for (int64_t r = 0; r < a.logits.rows; ++r) {
    const float* x = a.logits.row(r);
    double m = -INFINITY;
    for (int64_t c = 0; c < v; ++c) m = std::max(m, static_cast<double>(x[c]) / a.temperature);
    std::vector<double> p(static_cast<size_t>(v));
    double sum = 0.0;
    for (int64_t c = 0; c < v; ++c)
      sum += (p[static_cast<size_t>(c)] = std::exp(static_cast<double>(x[c]) / a.temperature - m));
    for (double& q : p) q /= sum;
    std::vector<int64_t> order(static_cast<size_t>(v));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
      return p[static_cast<size_t>(i)] > p[static_cast<size_t>(j)];
    });
    if (a.top_k > 0 && a.top_k < v) order.resize(static_cast<size_t>(a.top_k));
    double kept_mass = 0.0;
    for (int64_t i : order) kept_mass += p[static_cast<size_t>(i)];
    // Smallest prefix whose renormalised mass reaches top_p.
    size_t n_keep = 0;
    double prefix = 0.0;
    while (n_keep < order.size()) {
      prefix += p[static_cast<size_t>(order[n_keep])];
      ++n_keep;
      if (prefix >= a.top_p * kept_mass) break;
    }
    const double target = sample_uniform(a.seed, r) * prefix;
    double cumulative = 0.0;
    int64_t chosen = order[n_keep - 1];
    for (size_t i = 0; i < n_keep; ++i) {
      cumulative += p[static_cast<size_t>(order[i])];
      if (target < cumulative) {
        chosen = order[i];
        break;
      }
    }
    a.out[static_cast<size_t>(r)] = static_cast<int32_t>(chosen);
  }
}

}  // namespace day0::ref

namespace day0 {

double sample_uniform(uint64_t seed, int64_t row) {
  auto splitmix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t bits = splitmix(seed ^ splitmix(static_cast<uint64_t>(row)));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace day0
