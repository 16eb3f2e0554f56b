// The KV compressor of CSA/HCA layers and of the lightning indexer
// (docs/model.md "KV compressor"; op goldens: tests/data/golden/ops/README.md §14).
//
// Per token: FP32 projections kv = x.wkv^T, score = x.wgate^T + ape[p mod ratio]
// (coff*d wide, coff = 2 for the overlapping ratio 4, else 1).  A sequence's
// state is a ring of its last tokens' projections (token p in row
// p mod capacity, capacity >= coff*ratio).  Every block completed by a call is
// pooled from the ring rows of its tokens (ratio 4, block b: the first halves
// of tokens 4b-4..4b-1, absent for b = 0, and the second halves of tokens
// 4b..4b+3; ratio 128: tokens 128b..128b+127) with a per-channel softmax over
// their scores and an FP32 weighted sum, exactly the reference's arithmetic,
// so entries do not depend on how a sequence is split into calls.  Rows beyond
// coff*ratio let a sequence rewind: re-running from position P needs only the
// rows of tokens >= coff*ratio*floor(P/ratio) - (coff-1)*ratio, which survive as
// long as (tokens processed) - P <= capacity - coff*ratio.
// Each entry then becomes bf16 -> RMSNorm -> RoPE at position ratio*b ->
// FP8 KV QAT on the nope dims (attention) or Hadamard + FP4 QAT (indexer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "model/linear.h"
#include "model/workspace.h"
#include "tensor/numeric.h"
#include "tensor/tensor.h"

namespace dsv4::model {

struct CompressorSpec {
  int64_t ratio = 0;     // 4 (overlapping) or 128
  int64_t dim = 0;       // input width D
  int64_t head_dim = 0;  // d: entry width
  int64_t rope_dim = 0;  // RoPE on the last rope_dim dims of an entry
  bool rotate = false;   // true: indexer (Hadamard + FP4 QAT); false: FP8 KV QAT
  float norm_eps = 1e-6f;
};

class Compressor {
 public:
  // prefix e.g. "layers.2.attn.compressor." (tensors wkv.weight, wgate.weight,
  // ape, norm.weight).  rope_freqs [rope_dim/2]: the layer's table.
  static Result<std::unique_ptr<Compressor>> Load(const checkpoint::Checkpoint& ckpt,
                                                  const std::string& prefix,
                                                  const CompressorSpec& spec,
                                                  const float* rope_freqs);
  // Copies the given weights: wkv/wgate [coff*d, D], ape [ratio, coff*d], norm [d].
  static std::unique_ptr<Compressor> FromData(const CompressorSpec& spec, const bf16* wkv,
                                              const bf16* wgate, const float* ape, const bf16* norm,
                                              const float* rope_freqs);

  const CompressorSpec& spec() const { return spec_; }
  int64_t coff() const { return spec_.ratio == 4 ? 2 : 1; }
  // Per-sequence state: two FP32 rings (kv, score + ape) of [capacity, state_width].
  struct State {
    float* kv = nullptr;
    float* score = nullptr;
    int64_t capacity = 0;  // >= min_state_rows()
  };
  int64_t min_state_rows() const { return coff() * spec_.ratio; }
  int64_t state_width() const { return coff() * spec_.head_dim; }
  // Fresh state (kv 0, score -inf; never read before written, cleared for hygiene).
  void ResetState(const State& state) const;

  // Entries emitted by a call of n tokens starting at start_pos: blocks
  // start_pos/ratio .. (start_pos+n)/ratio - 1.
  static int64_t FirstEmitted(int64_t ratio, int64_t start_pos) { return start_pos / ratio; }
  static int64_t NumEmitted(int64_t ratio, int64_t start_pos, int64_t n) {
    return (start_pos + n) / ratio - start_pos / ratio;
  }

  // kv, score [n, state_width] FP32 = projections of x [n, D] (score without ape).
  // Row-wise: row r depends only on x row r.
  void Project(const bf16* x, int64_t n, float* kv, float* score, ThreadPool* pool) const;
  // Streams projected rows of ONE sequence at positions start_pos .. start_pos+n-1
  // into its state and writes the pooled (bf16-rounded, not yet normalized)
  // entry of every completed block to pooled [NumEmitted, d].  Returns NumEmitted.
  // REQUIRES: the state holds the rows of the earlier tokens the emitted blocks
  // mix (see the rewind rule above).
  int64_t Absorb(const float* kv, const float* score, int64_t start_pos, int64_t n,
                 const State& state, bf16* pooled) const;
  // In place on n pooled entries whose block indices are blocks[0..n):
  // RMSNorm -> RoPE at ratio*block -> QAT (or Hadamard + FP4 QAT).  Row-wise.
  void Finish(bf16* entries, int64_t n, const int64_t* blocks, Workspace& ws,
              ThreadPool* pool) const;

  // Project + Absorb + Finish for one sequence (the unit-test entry point).
  // entries [NumEmitted, d].  Returns NumEmitted.
  int64_t Forward(const bf16* x, int64_t start_pos, int64_t n, const State& state, bf16* entries,
                  Workspace& ws, ThreadPool* pool) const;

 private:
  Compressor() = default;
  void PoolBlock(const State& state, int64_t block, bf16* out) const;

  CompressorSpec spec_;
  Bf16Linear wkv_;            // [coff*d, D], used as FP32
  Bf16Linear wgate_;          // [coff*d, D], used as FP32
  Buffer ape_;                // [ratio, coff*d] FP32
  Buffer norm_;               // [d] BF16
  std::vector<float> freqs_;  // [rope_dim/2]
};

}  // namespace dsv4::model
