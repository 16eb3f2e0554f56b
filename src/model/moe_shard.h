// Expert parallelism inside one MoE layer (docs/scale-out.md "Expert
// parallelism"): with N > 1 ranks, rank r runs only the routed experts
// [r·E/N, (r+1)·E/N) (the blocks `dsv4 prepack --ranks N` stacks), every
// rank gathers the others' routed outputs and sums all of them itself in the
// single-process order, so the layer's output is bitwise the one-rank output.
//
// With data-parallel attention across ranks (ExpertShard::data_parallel) each
// rank's forward holds only its own DP partition's rows: every MoE layer first
// all-gathers every rank's tokens (activation codes, scales, routing), runs
// its experts on all of them, all-gathers the routed rows and sums only its
// own tokens' rows, in the same order as one process.  Ranks that run fewer
// MoE layers in a step (no rows, no MTP rows) join the others' exchanges as
// idle fillers in FinishDataParallelStep.
#pragma once

#include <cstdint>
#include <span>

#include "base/thread_pool.h"
#include "dist/communicator.h"
#include "model/workspace.h"
#include "tensor/numeric.h"

namespace dsv4::model {

struct MoeShape;
struct MoeWeights;

// What the routed-output exchanges of every MoE layer moved (the measurement
// behind docs/scale-out.md).  Written by the thread running the forward.
// With --dp 1 every rank forwards every token; with data-parallel attention a
// rank forwards only its own tokens, and the fields count those.
struct ExpertExchangeStats {
  int64_t exchanges = 0;     // MoE layer calls that exchanged
  int64_t token_layers = 0;  // Σ tokens over those calls (data-parallel: this rank's own)
  int64_t local_rows = 0;    // (token, expert) rows this rank computed
  // --dp 1: (token, expert) rows of every rank; data-parallel: the routed rows
  // of this rank's tokens that other ranks computed.
  int64_t rows = 0;
  int64_t bytes_sent = 0;       // --dp 1: this rank's rows × (N − 1); DP: records + rows sent
  int64_t bytes_received = 0;   // --dp 1: the other ranks' rows; DP: records + rows received
  double exchange_seconds = 0;  // inside the exchanges (transfer + waiting for slower ranks)
  int64_t dispatch_bytes = 0;   // data-parallel: every rank's token records gathered (inputs)
};

// The shard of the routed experts one process runs.  comm null or of size 1:
// every expert (single-process behaviour).
struct ExpertShard {
  dist::Communicator* comm = nullptr;
  ExpertExchangeStats* stats = nullptr;  // may be null
  // Each rank forwards its own rows (DP attention across ranks); false: every
  // rank forwards the same rows (--dp 1).
  bool data_parallel = false;
  // Which MoE layer this is (0 .. layers - 1, the MTP block = layers): the
  // exchanges check that every working rank is in the same layer, and an idle
  // rank runs its experts of that layer.
  int32_t layer = 0;

  bool active() const { return comm != nullptr && comm->size() > 1; }
  // This rank's experts [first, last) of num_experts (REQUIRES divisible).
  int64_t first(int64_t num_experts) const { return comm->rank() * num_experts / comm->size(); }
  int64_t last(int64_t num_experts) const {
    return (comm->rank() + 1) * num_experts / comm->size();
  }
};

// MoeForward from the sorted assignments on, when w.shard.active(): runs this
// rank's experts on their rows of the sorted order (contiguous, since the
// order is by expert id), all-gathers every rank's BF16 rows (BF16 is what a
// routed expert outputs, so nothing is rounded twice), adds all rows into
// the FP32 accumulator in ascending expert id, runs the shared expert and
// combines: the same operations in the same order as one process.  xq/xs:
// the activation codes (nb scales per row); ids [n, top_k] the routing; offset/ptok/pw:
// SortByExpert's output, max_rows its largest expert.  A failed exchange
// aborts every rank (only a broken invariant can make it fail).
void ShardedMoeTail(const MoeShape& shape, const MoeWeights& w, const uint8_t* xq, const float* xs,
                    int64_t nb, int64_t n, const int32_t* ids, const int64_t* offset,
                    const int64_t* ptok, const float* pw, int64_t max_rows, bf16* y,
                    int32_t* expert_ids_out, Workspace& ws, ThreadPool* pool);

// MoeForward when w.shard.data_parallel (and active()): x [n, dim] are this
// rank's rows only (n may be 0); y [n, dim] their output, bitwise what one
// process forwarding every rank's rows gives for them.
void DataParallelMoe(const MoeShape& shape, const MoeWeights& w, const bf16* x,
                     const int32_t* token_ids, int64_t n, bf16* y, int32_t* expert_ids_out,
                     Workspace& ws, ThreadPool* pool);

// One MoE layer as the data-parallel exchanges see it.
struct MoeLayerRef {
  const MoeShape* shape = nullptr;
  const MoeWeights* weights = nullptr;
};

// End of a step with data-parallel MoE layers, on every rank: until every
// rank has reached it, joins each exchange the working ranks start with no
// rows of its own (running its experts of layers[that layer] on theirs).
// layers[i].weights->shard.layer == i.  No-op without data_parallel.
void FinishDataParallelStep(std::span<const MoeLayerRef> layers, Workspace& ws, ThreadPool* pool);

}  // namespace dsv4::model
