// Reusable scratch memory for one forward call.  Buffers grow to the largest
// call seen and are then reused, so steady-state decoding allocates nothing
// per token.  Not thread-safe: one Workspace per concurrent forward.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "tensor/tensor.h"

namespace dsv4::model {

// Every scratch buffer of a forward pass, one enumerator each (architecture
// decision 10: intermediates are named).  A slot is an array index, so a
// lookup costs nothing; slots never alias each other.  A slot shared by two
// functions (kMdlStreams0/1, kHcMixes/kHcPre) holds nothing across calls.
// The comment gives the former string key and the owner.
enum class WsSlot : uint8_t {
  // model.cc: residual streams [n, hc, D] (Forward and the MTP block alike),
  // head rows
  kMdlStreams0,  // mdl.s0
  kMdlStreams1,  // mdl.s1
  kMdlHeadRows,  // mdl.hg [r, hc, D] gathered logit rows
  kMdlHeadOut,   // mdl.hy [r, D]
  kMtpE,         // mtp.e  [n, D] embeddings
  kMtpEp,        // mtp.ep [n, D]
  kMtpHn,        // mtp.hn [n, hc, D]
  kMtpHp,        // mtp.hp [n, hc, D]
  // block.cc
  kBlkA,     // blk.a    [n, D]
  kBlkF,     // blk.f    [n, D]
  kBlkMid,   // blk.mid  [n, hc, D]
  kBlkPost,  // blk.post [n, hc]
  kBlkComb,  // blk.comb [n, hc, hc]
  // mhc.cc
  kHcMixes,  // hc.mixes [n, num_mix]
  kHcPre,    // hc.pre   [n, hc]
  // attention_forward.cc
  kAttnQr,         // a.qr [T, q_lora]
  kAttnQ,          // a.q  [T, H, d]
  kAttnKv,         // a.kv [T, d]
  kAttnTopk,       // a.topk
  kAttnRows,       // a.rows [T, list_len] row pointers
  kAttnO,          // a.o  [T, H, d]
  kAttnZ,          // a.z  [T, G * o_lora]
  kAttnCmpKv,      // a.cmp_kv
  kAttnCmpScore,   // a.cmp_score
  kAttnCmpNew,     // a.cmp_new
  kAttnCmpBlocks,  // a.cmp_blocks
  // indexer.cc
  kIxKv,       // a.ix_kv
  kIxScore,    // a.ix_score
  kIxKeys,     // a.ix_keys
  kIxBlocks,   // a.ix_blocks
  kIxKeyRows,  // a.ix_krows
  kIxScores,   // a.ix_scores
  kIxQ,        // a.ix_q
  kIxW,        // a.ix_w
  // compressor.cc
  kCmpPos,     // cmp.pos
  kCmpKv,      // cmp.kv
  kCmpScore,   // cmp.score
  kCmpBlocks,  // cmp.blocks
  // linear.cc
  kLinCodes,   // lin.codes FP8 activation codes
  kLinScales,  // lin.scales
  kLinQ8,      // lin.q8 INT8 activation codes
  kLinS8,      // lin.s8
  // moe.cc
  kMoeLogits,  // moe.logits [n, e]
  kMoeScores,  // moe.scores [n, e]
  kMoeIds,     // moe.ids [n, k]
  kMoeRw,      // moe.rw  [n, k]
  kMoeXq,      // moe.xq  [n, d] activation codes
  kMoeXs,      // moe.xs
  kMoeOff,     // moe.off [e + 1]
  kMoePtok,    // moe.ptok [n*k]
  kMoePw,      // moe.pw  [n*k]
  kMoeAcc,     // moe.acc [n, d] FP32
  kMoeEq,      // moe.eq  gathered codes
  kMoeEs,      // moe.es  gathered scales
  kMoeYe,      // moe.ye  one expert's output
  kMoeYsh,     // moe.ysh shared expert output
  kMoeH,       // moe.h   SwiGLU output [m, inter]
  kMoeHq,      // moe.hq  its codes
  kMoeHs,      // moe.hs  its scales
  kMoeGu,      // moe.gu  fused gate|up [m, 2*inter]
  kMoeG,       // moe.g
  kMoeU,       // moe.u
  kMoeDpAll,   // moe.dp.all every rank's packed tokens (data-parallel MoE, moe_shard.h)
  kMoeDpTok,   // moe.dp.tok this rank's tokens among one expert's rows
  kMoeDpMine,  // moe.dp.mine this rank's tokens packed (codes, scales, ids, weights)
  kCount,
};

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // A zero-filled-at-first-allocation buffer of at least count elements of T
  // in `slot`; the same slot returns the same storage until it must grow.
  // Growth is geometric (x1.5) so a buffer sized by context length (indexer
  // scores, row lists) reallocates O(log n) times, not every few tokens.
  template <typename T>
  T* Get(WsSlot slot, size_t count) {
    Buffer& b = buffers_[static_cast<size_t>(slot)];
    const size_t bytes = count * sizeof(T);
    if (bytes > b.size()) b.Reserve(std::max(bytes, b.size() + b.size() / 2));
    return b.as<T>();
  }

  size_t TotalBytes() const {
    size_t n = 0;
    for (const Buffer& b : buffers_) n += b.size();
    return n;
  }

 private:
  std::array<Buffer, static_cast<size_t>(WsSlot::kCount)> buffers_;
};

}  // namespace dsv4::model
