// Attention::Forward: the general path (docs/model.md "Operation order in one
// attention sub-layer") for any mix of sequence slices.  The index layout it
// builds is documented in docs/model.md "Attention index layout".
#include <algorithm>
#include <cstring>

#include "base/logging.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/quant.h"
#include "kernels/rope.h"
#include "kernels/scratch.h"
#include "model/attention.h"
#include "model/attention_weights.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/op_profile.h"
#include "profile/profile.h"

namespace dsv4::model {
namespace {

size_t Sz(int64_t n) { return static_cast<size_t>(n); }

struct SeenSlotsTag {};

// Checks the slices and forgets positions >= start_pos of slots that re-run
// positions (within the cache's slack).
void PrepareSlices(const ForwardBatch& batch, AttentionCache& cache, int64_t ratio) {
  DSV4_CHECK(cache.geometry().compress_ratio == ratio);
  // Per-thread scratch, not a vector: a decode step allocates nothing.
  uint8_t* seen = kernels::ScratchArray<SeenSlotsTag, uint8_t>::Get(Sz(cache.num_slots()));
  std::fill_n(seen, cache.num_slots(), uint8_t{0});
  int64_t rows = 0;
  for (const SequenceSlice& s : batch.seqs) {
    DSV4_CHECK(s.cache_slot >= 0 && s.cache_slot < cache.num_slots());
    DSV4_CHECK_MSG(!seen[Sz(s.cache_slot)], "cache slot {} appears twice in one call",
                   s.cache_slot);
    seen[Sz(s.cache_slot)] = 1;
    DSV4_CHECK(s.num_tokens >= 1 && s.row_offset == rows);
    rows += s.num_tokens;
    DSV4_CHECK_MSG(cache.CanContinueAt(s.cache_slot, s.start_pos),
                   "slot {}: cannot continue at {} with {} cached tokens and slack {}",
                   s.cache_slot, s.start_pos, cache.NumCachedTokens(s.cache_slot), cache.slack());
    if (s.start_pos < cache.NumCachedTokens(s.cache_slot)) cache.Rewind(s.cache_slot, s.start_pos);
  }
  DSV4_CHECK(rows == batch.num_tokens());
}

// qr = q_norm(wq_a(x)) [T, q_lora]; q = RoPE(QHeadRms(wq_b(qr))) [T, H, d].
void QueryPath(const AttentionWeights& w, const bf16* x, const ForwardBatch& batch, bf16* qr,
               bf16* q, Workspace& ws, ThreadPool* pool) {
  const int64_t t = batch.num_tokens();
  w.wq_a.Forward(x, t, qr, ws, pool);
  kernels::RmsNorm(qr, t, w.q_lora, w.q_norm.as<bf16>(), w.eps, qr);
  w.wq_b.Forward(qr, t, q, ws, pool);
  kernels::QHeadRms(q, t * w.n_heads, w.head_dim, w.eps);
  kernels::ApplyRope(q, t, w.n_heads, w.head_dim, w.rope_dim, batch.positions.data(),
                     w.freqs.data(), false, pool);
}

// kv = FP8-QAT(RoPE(kv_norm(wkv(x)))) [T, d] (docs/model.md "Attention paths", raw KV).
void KvPath(const AttentionWeights& w, const bf16* x, const ForwardBatch& batch, bf16* kv,
            Workspace& ws, ThreadPool* pool) {
  const int64_t t = batch.num_tokens();
  w.wkv.Forward(x, t, kv, ws, pool);
  kernels::RmsNorm(kv, t, w.head_dim, w.kv_norm.as<bf16>(), w.eps, kv);
  kernels::ApplyRope(kv, t, 1, w.head_dim, w.rope_dim, batch.positions.data(), w.freqs.data(),
                     false, pool);
  kernels::KvQatFp8(kv, t, w.head_dim, w.head_dim - w.rope_dim);
}

// Appends every compressed row completed by this call to each slice's list.
void UpdateCompressed(const Compressor& comp, const bf16* x, const ForwardBatch& batch,
                      AttentionCache& cache, Workspace& ws, ThreadPool* pool) {
  const int64_t t = batch.num_tokens();
  const int64_t width = comp.state_width();
  const int64_t d = comp.spec().head_dim;
  const int64_t ratio = comp.spec().ratio;
  float* kv = ws.Get<float>(WsSlot::kAttnCmpKv, Sz(t * width));
  float* score = ws.Get<float>(WsSlot::kAttnCmpScore, Sz(t * width));
  comp.Project(x, t, kv, score, pool);
  const int64_t max_new = t / ratio + static_cast<int64_t>(batch.seqs.size());
  bf16* entries = ws.Get<bf16>(WsSlot::kAttnCmpNew, Sz(max_new * d));
  int64_t* blocks = ws.Get<int64_t>(WsSlot::kAttnCmpBlocks, Sz(max_new));
  int64_t total = 0;
  for (const SequenceSlice& s : batch.seqs) {
    const Compressor::State state{cache.AttnStateKv(s.cache_slot),
                                  cache.AttnStateScore(s.cache_slot), cache.AttnStateRows()};
    const int64_t n = comp.Absorb(kv + s.row_offset * width, score + s.row_offset * width,
                                  s.start_pos, s.num_tokens, state, entries + total * d);
    const int64_t first = Compressor::FirstEmitted(ratio, s.start_pos);
    DSV4_CHECK(cache.compressed().size(s.cache_slot) == first);
    for (int64_t i = 0; i < n; ++i) blocks[total + i] = first + i;
    total += n;
  }
  comp.Finish(entries, total, blocks, ws, pool);  // row-wise, so all slices at once
  total = 0;
  for (const SequenceSlice& s : batch.seqs) {
    const int64_t n = Compressor::NumEmitted(ratio, s.start_pos, s.num_tokens);
    for (int64_t i = 0; i < n; ++i, ++total) {
      std::copy_n(entries + total * d, d, cache.compressed().Append(s.cache_slot));
    }
  }
}

// Width of the compressed part of the longest list in the call.
int64_t CompressedWidth(const ForwardBatch& batch, int64_t ratio, int64_t topk) {
  int64_t width = 0;
  for (const SequenceSlice& s : batch.seqs) {
    const int64_t visible = (s.start_pos + s.num_tokens) / std::max<int64_t>(ratio, 1);
    if (ratio == 4) width = std::max(width, std::min(topk, visible));
    if (ratio == 128) width = std::max(width, visible);
  }
  return width;
}

// Row pointers of every query's index list (canonical layout): window part of
// width W (positions max(0, p-W+1) .. p oldest first, then padding), then the
// compressed part (HCA: all visible rows ascending; CSA: the indexer's
// selection in its order), then padding up to list_len.  Trailing padding does
// not change the kernel's result (an all-padding block leaves m, Z, acc as
// they are; padding inside a block adds exact zeros).
void BuildRows(const AttentionWeights& w, int64_t ratio, const ForwardBatch& batch,
               const AttentionCache& cache, const bf16* kv, const int32_t* topk, int64_t topk_width,
               int64_t list_len, const bf16** rows) {
  const int64_t win = w.window;
  const int64_t d = w.head_dim;
  for (const SequenceSlice& s : batch.seqs) {
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t row = s.row_offset + i;
      const int64_t p = s.start_pos + i;
      const bf16** list = rows + row * list_len;
      int64_t j = 0;
      for (int64_t q = std::max<int64_t>(0, p - win + 1); q <= p; ++q, ++j) {
        list[j] = q >= s.start_pos ? kv + (s.row_offset + q - s.start_pos) * d
                                   : cache.RingRow(s.cache_slot, q);
      }
      for (; j < win; ++j) list[j] = nullptr;
      if (ratio == 128) {
        for (int64_t t = 0; t < (p + 1) / 128; ++t) {
          list[j++] = cache.compressed().Row(s.cache_slot, t);
        }
      } else if (ratio == 4) {
        const int32_t* sel = topk + row * topk_width;
        for (int64_t k = 0; k < topk_width && j < list_len; ++k) {
          if (sel[k] >= 0) list[j++] = cache.compressed().Row(s.cache_slot, sel[k]);
        }
      }
      for (; j < list_len; ++j) list[j] = nullptr;
    }
  }
}

// After attention (this call's rows may still be read from the ring before).
void WriteRing(const AttentionWeights& w, const ForwardBatch& batch, const bf16* kv,
               AttentionCache& cache) {
  const int64_t cap = cache.geometry().ring_capacity;
  for (const SequenceSlice& s : batch.seqs) {
    const int64_t end = s.start_pos + s.num_tokens;
    for (int64_t p = std::max(s.start_pos, end - cap); p < end; ++p) {
      std::copy_n(kv + (s.row_offset + p - s.start_pos) * w.head_dim, w.head_dim,
                  cache.RingRow(s.cache_slot, p));
    }
    cache.SetNumCachedTokens(s.cache_slot, end);
  }
}

// out = wo_b(wo_a_grouped(inverse-RoPE(o))) (docs/model.md "Attention paths", output).
void OutputPath(const AttentionWeights& w, bf16* o, const ForwardBatch& batch, bf16* out,
                Workspace& ws, ThreadPool* pool) {
  const int64_t t = batch.num_tokens();
  kernels::ApplyRope(o, t, w.n_heads, w.head_dim, w.rope_dim, batch.positions.data(),
                     w.freqs.data(), true, pool);
  const int64_t hd = w.n_heads * w.head_dim;
  // Group g reads heads 8g..8g+7 of a token (concatenated) and writes z's
  // columns [g·o_lora, (g+1)·o_lora).
  const int64_t zw = w.n_groups * w.o_lora;
  bf16* z = ws.Get<bf16>(WsSlot::kAttnZ, Sz(t * zw));  // [T, G * o_lora], group-major
  w.wo_a.ForwardGrouped(o, hd, t, w.n_groups, z, zw, pool);
  w.wo_b.Forward(z, t, out, ws, pool);
}

void FillTrace(const int32_t* topk, int64_t t, int64_t width, AttentionTrace* trace) {
  trace->topk_width = width;
  trace->indexer_topk.assign(topk, topk + t * width);
  for (int64_t r = 0; r < t; ++r) {
    int32_t* b = trace->indexer_topk.data() + r * width;
    int32_t* e = std::partition(b, b + width, [](int32_t v) { return v >= 0; });
    std::sort(b, e);
  }
}

// The indexer's projections (its wq_b, weights_proj, its compressor's wkv and
// wgate) and its scoring of every visible compressed key (INT8 + one FP32
// scale per row, read once per sequence).
void IndexerCost(const AttentionWeights& w, const Indexer& indexer, int64_t layer,
                 const ForwardBatch& batch, profile::Span* s) {
  const int64_t t = batch.num_tokens();
  const int64_t nh = indexer.n_heads();
  const int64_t ihd = indexer.head_dim();
  const int64_t sw = indexer.compressor().state_width();
  int64_t scored = 0, key_bytes = 0;
  for (const SequenceSlice& sl : batch.seqs) {
    const int64_t visible = (sl.start_pos + sl.num_tokens) / 4;
    scored += sl.num_tokens * visible;
    key_bytes += visible * (ihd + 4);
  }
  s->Arg("layer", layer)
      .Arg("bytes", nh * ihd * w.q_lora + nh * w.dim * 2 + 2 * sw * w.dim * 2 + key_bytes)
      .Arg("flops", op_cost::GemmFlops(t, nh * ihd, w.q_lora) + op_cost::GemmFlops(t, nh, w.dim) +
                        2 * op_cost::GemmFlops(t, sw, w.dim) + 2 * scored * nh * ihd);
}

}  // namespace

void Attention::Forward(const bf16* x, const ForwardBatch& batch, AttentionCache& cache, bf16* out,
                        Workspace& ws, ThreadPool* pool, AttentionTrace* trace) const {
  const AttentionWeights& w = *w_;
  const int64_t t = batch.num_tokens();
  if (trace != nullptr) *trace = AttentionTrace();
  if (t == 0) return;
  PrepareSlices(batch, cache, ratio_);
  bf16* qr = ws.Get<bf16>(WsSlot::kAttnQr, Sz(t * w.q_lora));              // [T, q_lora]
  bf16* q = ws.Get<bf16>(WsSlot::kAttnQ, Sz(t * w.n_heads * w.head_dim));  // [T, H, d]
  bf16* kv = ws.Get<bf16>(WsSlot::kAttnKv, Sz(t * w.head_dim));            // [T, d]
  const int64_t hd = w.n_heads * w.head_dim;
  {
    profile::Span s(profile::kKernel, "kernel", "attn.q");
    if (s) {
      s.Arg("layer", layer_id_)
          .Arg("bytes", op_cost::LinearBytes(w.wq_a, w.q_lora, w.dim) +
                            op_cost::LinearBytes(w.wq_b, hd, w.q_lora))
          .Arg("flops",
               op_cost::GemmFlops(t, w.q_lora, w.dim) + op_cost::GemmFlops(t, hd, w.q_lora));
    }
    QueryPath(w, x, batch, qr, q, ws, pool);
  }
  {
    profile::Span s(profile::kKernel, "kernel", "attn.kv");
    if (s) {
      s.Arg("layer", layer_id_)
          .Arg("bytes", op_cost::LinearBytes(w.wkv, w.head_dim, w.dim))
          .Arg("flops", op_cost::GemmFlops(t, w.head_dim, w.dim));
    }
    KvPath(w, x, batch, kv, ws, pool);
  }

  int32_t* topk = nullptr;  // [T, index_topk]
  int64_t topk_width = 0;
  if (indexer_ != nullptr) {
    topk_width = indexer_->topk();
    topk = ws.Get<int32_t>(WsSlot::kAttnTopk, Sz(t * topk_width));
    profile::Span s(profile::kKernel, "kernel", "attn.indexer");
    if (s) IndexerCost(w, *indexer_, layer_id_, batch, &s);
    indexer_->Forward(x, qr, batch, cache, topk, ws, pool);
    s.End();
    if (trace != nullptr) FillTrace(topk, t, topk_width, trace);
  }
  if (compressor_ != nullptr) {
    profile::Span s(profile::kKernel, "kernel", "attn.compressor");
    if (s) {
      const int64_t sw = compressor_->state_width();
      s.Arg("layer", layer_id_)
          .Arg("ratio", ratio_)
          .Arg("bytes", 2 * sw * w.dim * 2)  // wkv and wgate, BF16
          .Arg("flops", 2 * op_cost::GemmFlops(t, sw, w.dim));
    }
    UpdateCompressed(*compressor_, x, batch, cache, ws, pool);
  }

  const int64_t list_len = w.window + CompressedWidth(batch, ratio_, topk_width);
  const bf16** rows = ws.Get<const bf16*>(WsSlot::kAttnRows, Sz(t * list_len));  // [T, list_len]
  bf16* o = ws.Get<bf16>(WsSlot::kAttnO, Sz(t * w.n_heads * w.head_dim));        // [T, H, d]
  {
    // Every query's list of list_len KV rows (window + compressed), read
    // per query: QK and PV over H heads.
    profile::Span s(profile::kKernel, "kernel", "attn.core");
    if (s) {
      s.Arg("layer", layer_id_)
          .Arg("ratio", ratio_)
          .Arg("list_len", list_len)
          .Arg("bytes", t * list_len * w.head_dim * 2 + 2 * t * hd * 2)
          .Arg("flops", 4 * t * w.n_heads * list_len * w.head_dim);
    }
    BuildRows(w, ratio_, batch, cache, kv, topk, topk_width, list_len, rows);
    kernels::SparseAttention(q, t, w.n_heads, w.head_dim, rows, list_len, w.sink.as<float>(),
                             w.softmax_scale, o, pool);
    WriteRing(w, batch, kv, cache);
  }
  {
    profile::Span s(profile::kKernel, "kernel", "attn.o");
    if (s) {
      const int64_t z = w.n_groups * w.o_lora;
      s.Arg("layer", layer_id_)
          .Arg("bytes", z * (hd / w.n_groups) * (w.wo_a.is_fp8() ? 1 : 2) +
                            op_cost::LinearBytes(w.wo_b, w.dim, z))
          .Arg("flops",
               op_cost::GemmFlops(t, z, hd / w.n_groups) + op_cost::GemmFlops(t, w.dim, z));
    }
    OutputPath(w, o, batch, out, ws, pool);
  }
}

}  // namespace dsv4::model
