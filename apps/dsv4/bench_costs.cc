#include "bench_costs.h"

#include <algorithm>
#include <numeric>

#include "kernels/attention.h"
#include "kernels/gemm.h"

namespace dsv4::cli {
namespace {

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool IsRoutedExpert(const std::string& name) {
  return name.find(".ffn.experts.") != std::string::npos;
}

// "layers.L.…" -> L; -1 for top-level tensors.
int64_t LayerOf(const std::string& name) {
  if (!StartsWith(name, "layers.")) return -1;
  return std::stoll(name.substr(7));
}

// Multiply-adds of one application of a linear weight ("*.weight" of rank
// >= 2, or an mHC mix "*hc_*_fn"): the product of its logical dimensions
// (an FP4 byte holds two weights), and the instruction mix of its kernel.
// Returns 0 for tensors that are not matmul operands.
double LinearMacs(const checkpoint::Checkpoint& ckpt, const std::string& name, const TensorView& v,
                  kernels::PeakMix* mix) {
  const bool weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  const bool hc_mix = name.size() > 3 && name.compare(name.size() - 3, 3, "_fn") == 0 &&
                      name.find("hc_") != std::string::npos;
  if ((!weight && !hc_mix) || v.rank() < 2 || name == "embed.weight") return 0;
  double macs = static_cast<double>(v.numel());
  *mix = kernels::PeakMix::kFp32Fma;
  // FP8 GEMMs, wo_a included (read in place unless a scale is out of its
  // exact range): BF16 dot products where that kernel runs (docs/kernels.md).
  if (v.dtype == DType::kF8E4M3 && kernels::Fp8GemmUsesBf16Dots()) {
    *mix = kernels::PeakMix::kBf16Dot;
  }
  if (v.dtype == DType::kI8) {
    // FP4 (E8M0 scales per 32) or W8A8 INT8 (FP32 scales): integer dots, or
    // BF16 dot products for FP4 weights that kernel runs (docs/kernels.md
    // "FP4 with BF16 dot products").
    *mix = kernels::PeakMix::kInt8Dot;
    const TensorView* scale = ckpt.Find(name.substr(0, name.size() - 7) + ".scale");
    if (scale != nullptr && scale->dtype == DType::kF8E8M0) {
      macs *= 2;
      const int64_t out = v.dim(v.rank() - 2), in = 2 * v.dim(v.rank() - 1);
      const int64_t stacked = v.numel() / (out * in / 2);  // experts stacked in one tensor
      const kernels::Fp4Weight w{v.as<uint8_t>(), scale->as<uint8_t>(), out * stacked, in};
      if (kernels::Fp4GemmUsesBf16Dots(w)) *mix = kernels::PeakMix::kBf16Dot;
    }
  }
  return macs;
}

// Attention entries and indexer keys of position p (0-based) in a layer of
// compress ratio `ratio` (docs/model.md "Attention index layout").
int64_t AttendedEntries(const checkpoint::ModelConfig& cfg, int64_t ratio, int64_t p) {
  int64_t n = std::min(p + 1, cfg.sliding_window);
  if (ratio == 4) n += std::min(cfg.index_topk, (p + 1) / 4);
  if (ratio == 128) n += (p + 1) / 128;
  return n;
}

}  // namespace

std::vector<std::pair<std::string, const TensorView*>> ForwardTensors(
    const checkpoint::Checkpoint& ckpt) {
  std::vector<std::pair<std::string, const TensorView*>> out;
  const checkpoint::SafetensorsFile* sidecar = ckpt.overlay();
  std::vector<std::string> names = sidecar != nullptr ? sidecar->Names() : ckpt.Names();
  if (sidecar != nullptr) names.insert(names.end(), {"embed.weight", "head.weight"});
  for (const std::string& name : names) {
    if (StartsWith(name, "__pad.")) continue;
    if (const TensorView* v = ckpt.Find(name)) out.emplace_back(name, v);
  }
  return out;
}

double DecodeWeightBytes::EstimatePerToken(int64_t top_k) const {
  const double experts = std::accumulate(per_expert.begin(), per_expert.end(), 0.0);
  return dense + experts * static_cast<double>(top_k) + embed_row;
}

double DecodeWeightBytes::Step(const model::ExpertUsage& usage, int64_t distinct_ids) const {
  double bytes = dense + embed_row * static_cast<double>(distinct_ids);
  const int64_t layers = std::min<int64_t>(usage.num_layers(), std::ssize(per_expert));
  for (int64_t l = 0; l < layers; ++l) {
    bytes += per_expert[static_cast<size_t>(l)] * static_cast<double>(usage.layer(l).distinct());
  }
  return bytes;
}

DecodeWeightBytes CountDecodeWeightBytes(const model::Model& model) {
  const checkpoint::ModelConfig& cfg = model.config();
  DecodeWeightBytes b;
  b.num_experts = cfg.n_routed_experts;
  b.per_expert.assign(static_cast<size_t>(cfg.num_hidden_layers), 0.0);
  for (const auto& [name, v] : ForwardTensors(model.checkpoint())) {
    const double n = static_cast<double>(v->nbytes());
    if (StartsWith(name, "mtp.")) continue;
    if (name == "embed.weight") {
      b.embed_row += n / static_cast<double>(cfg.vocab_size);
    } else if (IsRoutedExpert(name)) {
      const int64_t layer = LayerOf(name);
      if (layer >= 0 && layer < cfg.num_hidden_layers) {
        b.per_expert[static_cast<size_t>(layer)] += n / static_cast<double>(cfg.n_routed_experts);
      }
    } else {
      b.dense += n;
    }
  }
  return b;
}

double PrefillFlops::total() const { return std::accumulate(by_mix.begin(), by_mix.end(), 0.0); }

PrefillFlops CountPrefillFlops(const model::Model& model, int64_t prompt_len) {
  const checkpoint::ModelConfig& cfg = model.config();
  const double tokens = static_cast<double>(prompt_len);
  PrefillFlops f;
  auto add = [&](kernels::PeakMix mix, double flops) {
    f.by_mix[static_cast<size_t>(mix)] += flops;
  };
  for (const auto& [name, v] : ForwardTensors(model.checkpoint())) {
    if (StartsWith(name, "mtp.")) continue;
    kernels::PeakMix mix = kernels::PeakMix::kFp32Fma;
    const double flops = 2 * LinearMacs(model.checkpoint(), name, *v, &mix);
    if (flops == 0) continue;
    if (IsRoutedExpert(name)) {  // every token runs top_k of the layer's experts
      const double share =
          static_cast<double>(cfg.num_experts_per_tok) / static_cast<double>(cfg.n_routed_experts);
      f.routed_experts += flops * share;
      add(mix, flops * share);
    } else if (LayerOf(name) < 0) {  // head, hc_head: the last token of each sequence
      f.head += flops / tokens;
      add(mix, flops / tokens);
    } else {
      add(mix, flops);
    }
  }
  // Attention core (QK and PV over every attended entry: BF16 dot products
  // where that kernel runs, else FP32 FMA) and the indexer's scores (one FP32
  // dot product per head and visible compressed key).
  const double qk_pv = 4.0 * static_cast<double>(cfg.num_attention_heads * cfg.head_dim);
  const double index = 2.0 * static_cast<double>(cfg.index_n_heads * cfg.index_head_dim);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const int64_t ratio = cfg.compress_ratios[static_cast<size_t>(l)];
    double entries = 0, keys = 0;
    for (int64_t p = 0; p < prompt_len; ++p) {
      entries += static_cast<double>(AttendedEntries(cfg, ratio, p));
      if (ratio == 4) keys += static_cast<double>((p + 1) / 4);
    }
    f.attention += qk_pv * entries / tokens;
    f.indexer_scores += index * keys / tokens;
  }
  add(kernels::SparseAttentionUsesBf16Dots() ? kernels::PeakMix::kBf16Dot
                                             : kernels::PeakMix::kFp32Fma,
      f.attention);
  add(kernels::PeakMix::kFp32Fma, f.indexer_scores);
  return f;
}

}  // namespace dsv4::cli
