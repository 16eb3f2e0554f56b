#include "model/indexer.h"

#include <algorithm>
#include <cmath>

#include "base/logging.h"
#include "kernels/hadamard.h"
#include "kernels/indexer.h"
#include "kernels/quant.h"
#include "kernels/rope.h"

namespace dsv4::model {
namespace {

// Query rows scored together: bounds the score buffer at kRowTile x entries.
constexpr int64_t kRowTile = 32;
// Keys per work item when few rows are scored (decode, short verify steps).
constexpr int64_t kKeyChunk = 64;

// score [rows, max_entries] as kernels::IndexerScores, with the work split
// over (row, key chunk) items when there are fewer rows than threads (a decode
// row scoring a long context would otherwise run on one thread).  Every score
// is computed independently of the split, so the result is too.
void ScoreRows(const bf16* q, int64_t rows, int64_t heads, int64_t dim, const bf16* w,
               const bf16* const* key_rows, int64_t max_entries, const int64_t* visible,
               float* scores, ThreadPool* pool) {
  if (pool == nullptr || rows >= pool->num_threads() || max_entries <= kKeyChunk) {
    kernels::IndexerScores(q, rows, heads, dim, w, key_rows, max_entries, visible, scores, pool);
    return;
  }
  const int64_t chunks = (max_entries + kKeyChunk - 1) / kKeyChunk;
  ParallelFor(pool, rows * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / chunks;
      const int64_t e0 = (item % chunks) * kKeyChunk;
      const int64_t len = std::min(kKeyChunk, max_entries - e0);
      const int64_t n_vis = std::clamp<int64_t>(visible[r] - e0, 0, len);
      kernels::IndexerScores(q + r * heads * dim, 1, heads, dim, w + r * heads, key_rows + e0, len,
                             &n_vis, scores + r * max_entries + e0, nullptr);
    }
  });
}

}  // namespace

Result<std::unique_ptr<Indexer>> Indexer::Load(const checkpoint::Checkpoint& ckpt,
                                               const checkpoint::ModelConfig& cfg,
                                               const std::string& prefix, const float* rope_freqs,
                                               WeightStore& store) {
  std::unique_ptr<Indexer> ix(new Indexer());
  ix->n_heads_ = cfg.index_n_heads;
  ix->head_dim_ = cfg.index_head_dim;
  ix->rope_dim_ = cfg.qk_rope_head_dim;
  ix->topk_ = cfg.index_topk;
  if (ix->n_heads_ <= 0 || ix->head_dim_ <= 0 || ix->topk_ <= 0 ||
      (ix->head_dim_ & (ix->head_dim_ - 1)) != 0 || ix->head_dim_ % 32 != 0 ||
      ix->rope_dim_ > ix->head_dim_) {
    return InvalidArgument(
        "{}: unsupported indexer geometry (index_n_heads {}, index_head_dim {}, index_topk {})",
        prefix, ix->n_heads_, ix->head_dim_, ix->topk_);
  }
  ix->weight_scale_ = static_cast<float>(std::pow(static_cast<double>(ix->head_dim_), -0.5) *
                                         std::pow(static_cast<double>(ix->n_heads_), -0.5));
  DSV4_ASSIGN_OR_RETURN(ix->wq_b_, Linear::Load(ckpt, prefix + "wq_b", ix->n_heads_ * ix->head_dim_,
                                                cfg.q_lora_rank, store));
  DSV4_ASSIGN_OR_RETURN(ix->weights_proj_, Bf16Linear::Load(ckpt, prefix + "weights_proj",
                                                            ix->n_heads_, cfg.hidden_size));
  CompressorSpec spec;
  spec.ratio = ix->ratio_;
  spec.dim = cfg.hidden_size;
  spec.head_dim = ix->head_dim_;
  spec.rope_dim = ix->rope_dim_;
  spec.rotate = true;
  spec.norm_eps = static_cast<float>(cfg.rms_norm_eps);
  DSV4_ASSIGN_OR_RETURN(ix->compressor_,
                        Compressor::Load(ckpt, prefix + "compressor.", spec, rope_freqs));
  ix->freqs_.assign(rope_freqs, rope_freqs + ix->rope_dim_ / 2);
  return ix;
}

// qI = FP4-QAT(Hadamard(RoPE(wq_b(qr)))) per head (docs/model.md "Lightning indexer" step 1).
void Indexer::Queries(const bf16* qr, const ForwardBatch& batch, bf16* q, Workspace& ws,
                      ThreadPool* pool) const {
  const int64_t t = batch.num_tokens();
  wq_b_.Forward(qr, t, q, ws, pool);
  kernels::ApplyRope(q, t, n_heads_, head_dim_, rope_dim_, batch.positions.data(), freqs_.data(),
                     false, pool);
  kernels::HadamardBf16(q, t * n_heads_, head_dim_, pool);
  kernels::Fp4Qat(q, t * n_heads_, head_dim_);
}

void Indexer::UpdateKeys(const bf16* x, const ForwardBatch& batch, AttentionCache& cache,
                         Workspace& ws, ThreadPool* pool) const {
  const int64_t t = batch.num_tokens();
  const int64_t width = compressor_->state_width();
  float* kv = ws.Get<float>(WsSlot::kIxKv, static_cast<size_t>(t * width));
  float* score = ws.Get<float>(WsSlot::kIxScore, static_cast<size_t>(t * width));
  compressor_->Project(x, t, kv, score, pool);
  bf16* keys = ws.Get<bf16>(WsSlot::kIxKeys, static_cast<size_t>((t / ratio_ + 1) * head_dim_));
  int64_t* blocks = ws.Get<int64_t>(WsSlot::kIxBlocks, static_cast<size_t>(t / ratio_ + 1));
  for (const SequenceSlice& s : batch.seqs) {
    const Compressor::State state{cache.IndexStateKv(s.cache_slot),
                                  cache.IndexStateScore(s.cache_slot), cache.IndexStateRows()};
    const int64_t n = compressor_->Absorb(kv + s.row_offset * width, score + s.row_offset * width,
                                          s.start_pos, s.num_tokens, state, keys);
    if (n == 0) continue;
    const int64_t first = Compressor::FirstEmitted(ratio_, s.start_pos);
    DSV4_CHECK(cache.index_keys().size(s.cache_slot) == first);
    for (int64_t i = 0; i < n; ++i) blocks[i] = first + i;
    compressor_->Finish(keys, n, blocks, ws, pool);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(keys + i * head_dim_, head_dim_, cache.index_keys().Append(s.cache_slot));
    }
  }
}

// Scores one slice's rows against its keys in row tiles and takes each row's
// top-k over its visible prefix (docs/model.md "Lightning indexer" steps 4-5).
void Indexer::Select(const SequenceSlice& s, const bf16* q, const bf16* w,
                     const AttentionCache& cache, int32_t* topk_out, Workspace& ws,
                     ThreadPool* pool) const {
  const int64_t num_keys = cache.index_keys().size(s.cache_slot);
  const bf16** key_rows =
      ws.Get<const bf16*>(WsSlot::kIxKeyRows, static_cast<size_t>(num_keys) + 1);
  for (int64_t e = 0; e < num_keys; ++e) key_rows[e] = cache.index_keys().Row(s.cache_slot, e);
  float* scores = ws.Get<float>(WsSlot::kIxScores, static_cast<size_t>(kRowTile * (num_keys + 1)));
  int64_t visible[kRowTile];
  for (int64_t r0 = 0; r0 < s.num_tokens; r0 += kRowTile) {
    const int64_t rows = std::min(kRowTile, s.num_tokens - r0);
    for (int64_t r = 0; r < rows; ++r) visible[r] = (s.start_pos + r0 + r + 1) / ratio_;
    const int64_t max_entries = visible[rows - 1];
    const int64_t row = s.row_offset + r0;
    if (max_entries > 0) {
      ScoreRows(q + row * n_heads_ * head_dim_, rows, n_heads_, head_dim_, w + row * n_heads_,
                key_rows, max_entries, visible, scores, pool);
    }
    for (int64_t r = 0; r < rows; ++r) {
      int32_t* out = topk_out + (row + r) * topk_;
      const int64_t k = std::min(topk_, visible[r]);
      if (k > 0) kernels::TopKDescending(scores + r * max_entries, visible[r], k, out);
      std::fill(out + k, out + topk_, -1);
    }
  }
}

void Indexer::Forward(const bf16* x, const bf16* qr, const ForwardBatch& batch,
                      AttentionCache& cache, int32_t* topk_out, Workspace& ws,
                      ThreadPool* pool) const {
  const int64_t t = batch.num_tokens();
  bf16* q = ws.Get<bf16>(WsSlot::kIxQ, static_cast<size_t>(t * n_heads_ * head_dim_));
  Queries(qr, batch, q, ws, pool);
  UpdateKeys(x, batch, cache, ws, pool);
  // w = bf16(fp32(weights_proj(x)) * c), c applied as an FP32 scalar.
  bf16* w = ws.Get<bf16>(WsSlot::kIxW, static_cast<size_t>(t * n_heads_));
  weights_proj_.Forward(x, weights_proj_.in(), t, w, n_heads_, pool);
  for (int64_t i = 0; i < t * n_heads_; ++i) w[i] = F32ToBf16(Bf16ToF32(w[i]) * weight_scale_);
  for (const SequenceSlice& s : batch.seqs) Select(s, q, w, cache, topk_out, ws, pool);
}

}  // namespace dsv4::model
