#include "plan_shapes.h"

namespace day0::plan::testing {

// DeepSeek-V3 config.json (hidden 7168, 61 layers of which 3 dense, 128 heads, MLA q_lora 1536 /
// kv_lora 512 / nope 128 / rope 64 / v 128, 256 experts top-8 of width 2048, 1 shared, vocab 129280).
ModelShape deepseek_v3_shape() {
  ModelShape s;
  s.name = "deepseek-v3-shape";
  s.hidden = 7168;
  s.n_layers = 61;
  s.n_heads = 128;
  s.mla = true;
  s.q_lora_rank = 1536;
  s.kv_lora_rank = 512;
  s.qk_nope_head_dim = 128;
  s.qk_rope_head_dim = 64;
  s.v_head_dim = 128;
  s.vocab = 129280;
  s.dense_intermediate = 18432;
  s.n_dense_layers = 3;
  s.n_experts = 256;
  s.experts_per_token = 8;
  s.expert_intermediate = 2048;
  s.n_shared_experts = 1;
  return s;
}

// Llama-3.1-8B config.json: hidden 4096, 32 layers, 32 heads / 8 kv heads x 128, MLP 14336, vocab 128256.
ModelShape llama31_8b_shape() {
  ModelShape s;
  s.name = "llama-3.1-8b-shape";
  s.hidden = 4096;
  s.n_layers = 32;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.vocab = 128256;
  s.dense_intermediate = 14336;
  return s;
}

// A hypothetical ~3-trillion-parameter MLA MoE: DeepSeek-V3's attention, 66 layers (2 dense), 1024
// experts of width 2112, top-8.
ModelShape three_trillion_shape() {
  ModelShape s = deepseek_v3_shape();
  s.name = "hypothetical-3t";
  s.n_layers = 66;
  s.n_dense_layers = 2;
  s.n_experts = 1024;
  s.expert_intermediate = 2112;
  s.experts_per_token = 8;
  return s;
}

}  // namespace day0::plan::testing

namespace day0::plan::testing {

ModelShape kimi_k2_shape() {
  ModelShape s = deepseek_v3_shape();
  s.name = "kimi-k2-shape";
  s.n_heads = 64;
  s.vocab = 163840;
  s.n_experts = 384;
  s.n_dense_layers = 1;
  return s;
}

// bench-dense-1b and bench-moe-a02b (../shared/docs/benchmarks.md) as `day0 synth` writes them for
// bench/e2e.sh: grouped-query attention kept at 2 KV heads.
ModelShape bench_dense_1b() {
  ModelShape s;
  s.name = "bench-dense-1b";
  s.hidden = 2048;
  s.n_layers = 16;
  s.n_heads = 32;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.dense_intermediate = 8192;
  s.vocab = 32000;
  return s;
}

ModelShape bench_moe_a02b() {
  ModelShape s;
  s.name = "bench-moe-a02b";
  s.hidden = 1024;
  s.n_layers = 12;
  s.n_heads = 16;
  s.n_kv_heads = 2;
  s.head_dim = 128;
  s.dense_intermediate = 0;
  s.n_experts = 64;
  s.experts_per_token = 8;
  s.expert_intermediate = 512;
  s.vocab = 32000;
  return s;
}

}  // namespace day0::plan::testing
