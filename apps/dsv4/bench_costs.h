// What dsv4 bench counts from the checkpoint's tensors and the config
// (docs/performance.md "Measured bytes, peak compute and prefill FLOPs"):
// the weight bytes a decode step reads, estimated from top_k or measured
// from the routing the step took, and the matmul FLOPs of a prefill token,
// split by the instruction mix of the kernel that runs them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "kernels/peak.h"
#include "model/expert_usage.h"
#include "model/model.h"

namespace dsv4::cli {

// The mapped tensors the forward pass reads: with a prepacked sidecar its
// tensors plus the checkpoint's embed and head, else the checkpoint's.
std::vector<std::pair<std::string, const TensorView*>> ForwardTensors(
    const checkpoint::Checkpoint& ckpt);

// Weight bytes of the main model's forward (the MTP block is not run by plain
// decoding), by how often a decode step reads them.
struct DecodeWeightBytes {
  double dense = 0;                // every tensor but routed experts and embed: once per step
  std::vector<double> per_expert;  // [layer]: one routed expert of the layer (all the same size)
  double embed_row = 0;
  int64_t num_experts = 0;

  // The estimate for one token: dense + top_k experts per MoE layer + one
  // embedding row.
  double EstimatePerToken(int64_t top_k) const;
  // What a step read: dense + the distinct experts marked in each layer of
  // usage + distinct_ids embedding rows.
  double Step(const model::ExpertUsage& usage, int64_t distinct_ids) const;
};

DecodeWeightBytes CountDecodeWeightBytes(const model::Model& model);

// Matmul FLOPs (2 per multiply-add) per prompt token of a prefill of
// sequences of prompt_len tokens from position 0, as the forward runs them:
// every dense linear of the main layers (2·in·out; the mHC mixes and the
// router included), top_k of the routed experts, the shared expert, the
// attention core over the entries each position attends (window and
// compressed), the indexer's scoring of the compressed keys visible to each
// position; the head and hc_head only for the one logit row per sequence.
struct PrefillFlops {
  // By the kernel's instruction mix: FP32 FMA (BF16 and FP32 linears,
  // attention, indexer; FP8 linears on CPUs without the BF16 dot kernel),
  // BF16 dot products (FP8 linears, wo_a included, where
  // Fp8GemmUsesBf16Dots) and INT8 dot products (FP4 experts, W8A8 linears).
  std::array<double, kernels::kNumPeakMixes> by_mix{};
  // Parts of the total, for the printout.
  double routed_experts = 0;
  double attention = 0;  // core: QK and PV
  double indexer_scores = 0;
  double head = 0;  // head + hc_head, per prompt token

  double total() const;
};

PrefillFlops CountPrefillFlops(const model::Model& model, int64_t prompt_len);

}  // namespace dsv4::cli
