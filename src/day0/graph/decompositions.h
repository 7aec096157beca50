#pragma once
// Decompositions: a fused op rewritten as calls of simpler ops on a backend (normally the fallback
// resolver, so every piece is itself resolved: native, decomposed again, or host). The pieces each
// function calls are exactly those listed in the op's schema (ops/op_schema.cpp); tests run every
// decomposition against the fused reference kernel.
//
// Temporaries are host vectors: fine for the host backends of today; a device backend would allocate
// them in its own memory space.
#include "day0/backends/backend.h"

namespace day0 {

bool has_decomposition(std::string_view op);

void decompose_grouped_matmul(Backend& be, const GroupedMatmulArgs& a);  // matmul per group
void decompose_rms_norm(Backend& be, const RmsNormArgs& a);              // mul, row_mean, rsqrt
void decompose_layer_norm(Backend& be, const LayerNormArgs& a);          // row_mean, scale, add, mul, rsqrt
void decompose_swiglu(Backend& be, const SwigluArgs& a);                 // silu, mul
void decompose_gated_rms_norm(Backend& be, const GatedRmsNormArgs& a);   // rms_norm, silu, mul
void decompose_swiglu_clamped(Backend& be, const SwigluArgs& a);         // clamp, scale, sigmoid, mul
void decompose_hc_collapse(Backend& be, const HcCollapseArgs& a);        // mul, add
void decompose_hc_expand(Backend& be, const HcExpandArgs& a);            // mul, add, round_bf16
void decompose_mla_attention(Backend& be, const MlaArgs& a);             // matmul, scale, attention
// Per sequence: the pages dequantised into contiguous float32 (host vectors), then `attention` /
// `mla_attention` on them. The reference backend's paged kernels are exactly this (the oracle).
void decompose_paged_attention(Backend& be, const PagedAttentionArgs& a);
void decompose_paged_mla_attention(Backend& be, const PagedMlaArgs& a);
// gather_rows, matmul, swiglu, mul, scatter_add; the clamped variant (swiglu_limit) calls swiglu_clamped,
// which the resolver places on its own.
void decompose_moe_experts(Backend& be, const MoeExpertsArgs& a);

}  // namespace day0
