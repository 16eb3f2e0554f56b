#include "model/compressor.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/logging.h"
#include "kernels/compressor.h"
#include "kernels/gemm.h"
#include "kernels/hadamard.h"
#include "kernels/norm.h"
#include "kernels/quant.h"
#include "kernels/rope.h"

namespace dsv4::model {

Result<std::unique_ptr<Compressor>> Compressor::Load(const checkpoint::Checkpoint& ckpt,
                                                     const std::string& prefix,
                                                     const CompressorSpec& spec,
                                                     const float* rope_freqs) {
  if (spec.ratio != 4 && spec.ratio != 128) {
    return InvalidArgument("{}: compress ratio {} is not 4 or 128", prefix, spec.ratio);
  }
  std::unique_ptr<Compressor> c(new Compressor());
  c->spec_ = spec;
  const int64_t width = c->state_width();
  DSV4_ASSIGN_OR_RETURN(c->wkv_, Bf16Linear::Load(ckpt, prefix + "wkv", width, spec.dim));
  DSV4_ASSIGN_OR_RETURN(c->wgate_, Bf16Linear::Load(ckpt, prefix + "wgate", width, spec.dim));
  // Same shape, so the same layout decision: Project passes one layout.
  DSV4_CHECK(c->wkv_.layout() == c->wgate_.layout());
  DSV4_ASSIGN_OR_RETURN(c->ape_, LoadF32Copy(ckpt, prefix + "ape", {spec.ratio, width}));
  DSV4_ASSIGN_OR_RETURN(c->norm_, LoadBf16Copy(ckpt, prefix + "norm.weight", {spec.head_dim}));
  c->freqs_.assign(rope_freqs, rope_freqs + spec.rope_dim / 2);
  return c;
}

std::unique_ptr<Compressor> Compressor::FromData(const CompressorSpec& spec, const bf16* wkv,
                                                 const bf16* wgate, const float* ape,
                                                 const bf16* norm, const float* rope_freqs) {
  DSV4_CHECK(spec.ratio == 4 || spec.ratio == 128);
  std::unique_ptr<Compressor> c(new Compressor());
  c->spec_ = spec;
  const int64_t width = c->state_width();
  c->wkv_ = Bf16Linear::FromData(wkv, width, spec.dim);
  c->wgate_ = Bf16Linear::FromData(wgate, width, spec.dim);
  DSV4_CHECK(c->wkv_.layout() == c->wgate_.layout());
  c->ape_ = Buffer(static_cast<size_t>(spec.ratio * width) * sizeof(float));
  std::memcpy(c->ape_.data(), ape, c->ape_.size());
  c->norm_ = Buffer(static_cast<size_t>(spec.head_dim) * sizeof(bf16));
  std::memcpy(c->norm_.data(), norm, c->norm_.size());
  c->freqs_.assign(rope_freqs, rope_freqs + spec.rope_dim / 2);
  return c;
}

void Compressor::ResetState(const State& state) const {
  DSV4_CHECK(state.capacity >= min_state_rows());
  const int64_t n = state.capacity * state_width();
  std::fill_n(state.kv, n, 0.0f);
  std::fill_n(state.score, n, -std::numeric_limits<float>::infinity());
}

void Compressor::Project(const bf16* x, int64_t n, float* kv, float* score,
                         ThreadPool* pool) const {
  // One dispatch for both projections of the same rows, in the layout they
  // share (checked at load).
  kernels::GemmBf16F32Pair(x, n, wkv_.in(), wkv_.data(), wkv_.out(), kv, wgate_.data(),
                           wgate_.out(), score, pool, wkv_.layout());
}

// Entry `block` from the ring: the block's source rows (ratio 4: the first
// halves of the previous block's tokens, then the second halves of the block's
// own tokens; ratio 128: the block's tokens) pooled by kernels::SoftmaxPool,
// the reference's per-channel softmax and FP32 weighted sum (a division
// instead of its reciprocal multiply changes 1 of the golden's 1024 r128
// pooled values by 1 ulp).  The absent previous block of block 0 (the
// reference's kv 0 / score -inf) contributes exact zeros, so it is skipped.
void Compressor::PoolBlock(const State& state, int64_t block, bf16* out) const {
  const int64_t d = spec_.head_dim;
  const int64_t width = state_width();
  const int64_t ratio = spec_.ratio;
  const float* kv_rows[kernels::kMaxPoolRows];
  const float* score_rows[kernels::kMaxPoolRows];
  int64_t rows = 0;
  for (int64_t j = 0; j < min_state_rows(); ++j) {
    // ratio 4: j < 4 -> token 4b-4+j, first half; j >= 4 -> token 4b+j-4, second half.
    const int64_t token = ratio == 4 ? 4 * block - 4 + j : ratio * block + j;
    if (token < 0) continue;
    const int64_t col = (ratio == 4 && j >= 4) ? d : 0;
    const int64_t row = (token % state.capacity) * width + col;
    kv_rows[rows] = state.kv + row;
    score_rows[rows] = state.score + row;
    ++rows;
  }
  kernels::SoftmaxPool(kv_rows, score_rows, rows, d, out);
}

int64_t Compressor::Absorb(const float* kv, const float* score, int64_t start_pos, int64_t n,
                           const State& state, bf16* pooled) const {
  DSV4_CHECK(state.capacity >= min_state_rows());
  const int64_t ratio = spec_.ratio;
  const int64_t width = state_width();
  const float* ape = ape_.as<float>();
  int64_t emitted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = start_pos + i;
    const int64_t k = p % ratio;
    float* skv = state.kv + (p % state.capacity) * width;
    float* ssc = state.score + (p % state.capacity) * width;
    std::memcpy(skv, kv + i * width, static_cast<size_t>(width) * sizeof(float));
    for (int64_t c = 0; c < width; ++c) ssc[c] = score[i * width + c] + ape[k * width + c];
    if (k != ratio - 1) continue;
    PoolBlock(state, p / ratio, pooled + emitted * spec_.head_dim);
    ++emitted;
  }
  return emitted;
}

void Compressor::Finish(bf16* entries, int64_t n, const int64_t* blocks, Workspace& ws,
                        ThreadPool* pool) const {
  if (n == 0) return;
  const int64_t d = spec_.head_dim;
  kernels::RmsNorm(entries, n, d, norm_.as<bf16>(), spec_.norm_eps, entries);
  int64_t* positions = ws.Get<int64_t>(WsSlot::kCmpPos, static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[i] = blocks[i] * spec_.ratio;
  kernels::ApplyRope(entries, n, 1, d, spec_.rope_dim, positions, freqs_.data(), false, pool);
  if (spec_.rotate) {
    kernels::HadamardBf16(entries, n, d, pool);
    kernels::Fp4Qat(entries, n, d);
  } else {
    kernels::KvQatFp8(entries, n, d, d - spec_.rope_dim);
  }
}

int64_t Compressor::Forward(const bf16* x, int64_t start_pos, int64_t n, const State& state,
                            bf16* entries, Workspace& ws, ThreadPool* pool) const {
  const auto elems = static_cast<size_t>(n * state_width());
  float* kv = ws.Get<float>(WsSlot::kCmpKv, elems);
  float* score = ws.Get<float>(WsSlot::kCmpScore, elems);
  Project(x, n, kv, score, pool);
  const int64_t emitted = Absorb(kv, score, start_pos, n, state, entries);
  int64_t* blocks = ws.Get<int64_t>(WsSlot::kCmpBlocks, static_cast<size_t>(emitted) + 1);
  for (int64_t i = 0; i < emitted; ++i) blocks[i] = FirstEmitted(spec_.ratio, start_pos) + i;
  Finish(entries, emitted, blocks, ws, pool);
  return emitted;
}

}  // namespace dsv4::model
