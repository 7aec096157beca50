#pragma once
// The plain form of a paged call: each sequence's cache gathered into contiguous rows and handed to
// `attention` / `mla_attention`. The reference backend computes paged attention this way (it is the
// oracle) and so do the graph decompositions for a backend without the paged ops; one place says
// how a PagedSequence maps onto the contiguous arguments.
#include <vector>

#include "day0/core/error.h"
#include "day0/ops/kernel_args.h"
#include "day0/ops/kv_pages.h"

namespace day0 {

// Calls run(const AttentionArgs&) once per sequence of `a` that has query rows. The call's heads are the
// first columns of the cache rows (a pool shared with layers of more KV heads is wider).
template <class Run>
void for_each_gathered_sequence(const PagedAttentionArgs& a, Run&& run) {
  std::vector<float> k, v;  // [S, first_width], [S, second_width], reused
  const int64_t kw = a.n_kv_heads * a.head_dim;
  const int64_t vw = a.n_kv_heads * (a.v_head_dim > 0 ? a.v_head_dim : a.head_dim);
  for (const PagedSequence& s : a.seqs) {
    if (s.q_rows == 0) continue;
    gather_kv_pages(s.kv, k, v);
    run(AttentionArgs{.q = a.q.row_slice(s.q_row0, s.q_rows),
                      .k = ConstMatrix(k.data(), s.kv.length, s.kv.first_width).col_slice(0, kw),
                      .v = ConstMatrix(v.data(), s.kv.length, s.kv.second_width).col_slice(0, vw),
                      .out = a.out.row_slice(s.q_row0, s.q_rows),
                      .n_heads = a.n_heads,
                      .n_kv_heads = a.n_kv_heads,
                      .head_dim = a.head_dim,
                      .v_head_dim = a.v_head_dim,
                      .q_pos0 = s.q_pos0,
                      .k_pos0 = s.kv.pos0,
                      .scale = a.scale,
                      .mask = a.mask,
                      .window = a.window,
                      .sinks = a.sinks,
                      .selection = a.selection.empty()
                                       ? a.selection
                                       : BlockSelection{a.selection.blocks.row_slice(s.q_row0, s.q_rows),
                                                        a.selection.block_size, a.selection.groups}});
  }
}

// Calls run(const MlaArgs&) once per sequence of `a` that has query rows.
template <class Run>
void for_each_gathered_sequence(const PagedMlaArgs& a, Run&& run) {
  std::vector<float> c_kv, k_pe;  // [S, kv_lora_rank], [S, d_rope], reused
  for (const PagedSequence& s : a.seqs) {
    if (s.q_rows == 0) continue;
    D0_CHECK_MSG(s.kv.pos0 == 0, "paged_mla_attention: MLA layers keep every position");
    gather_kv_pages(s.kv, c_kv, k_pe);
    run(MlaArgs{.q = a.q.row_slice(s.q_row0, s.q_rows),
                .c_kv = ConstMatrix(c_kv.data(), s.kv.length, s.kv.first_width),
                // k_pe is the first d_rope columns of the second tensor (the lightning indexer's
                // key, if any, follows it in the same rows).
                .k_pe = ConstMatrix(k_pe.data(), s.kv.length, s.kv.second_width).col_slice(0, a.d_rope),
                .w_kv_b = a.w_kv_b,
                .out = a.out.row_slice(s.q_row0, s.q_rows),
                .n_heads = a.n_heads,
                .d_nope = a.d_nope,
                .d_rope = a.d_rope,
                .d_v = a.d_v,
                .kv_lora_rank = a.kv_lora_rank,
                .q_pos0 = s.q_pos0,
                .scale = a.scale,
                .form = a.form,
                .selected = a.selected.rows == 0 ? a.selected : a.selected.row_slice(s.q_row0, s.q_rows)});
  }
}

}  // namespace day0
