#include "checkpoint/weight_spec.h"

#include <cstring>
#include <set>
#include <utility>

namespace dsv4::checkpoint {

namespace {

constexpr int64_t kFp4BlockK = 32;  // MXFP4: one E8M0 scale per 1x32 input block

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// What the W8A8 converter does with a native FP8 linear (docs/convert.md).
enum class W8a8Role { kInt8, kBf16 };

class SpecBuilder {
 public:
  explicit SpecBuilder(const ModelConfig& cfg) : cfg_(cfg), w8a8_(cfg.quantization.is_w8a8()) {
    const auto& bs = cfg.quantization.weight_block_size;
    // ValidateModelConfig pins native blocks to [128, 128]; W8A8 has none.
    block_out_ = bs.size() == 2 ? bs[0] : 128;
    block_in_ = bs.size() == 2 ? bs[1] : 128;
  }

  void Add(std::string name, DType dtype, Shape shape, WeightSpec::Kind kind, Shape logical = {}) {
    WeightSpec s;
    s.name = std::move(name);
    s.dtype = dtype;
    s.logical_shape = logical.empty() ? shape : std::move(logical);
    s.shape = std::move(shape);
    s.kind = kind;
    s.layer = layer_;
    specs_.push_back(std::move(s));
  }
  void Bf16(const std::string& name, Shape shape) {
    Add(name, DType::kBF16, std::move(shape), WeightSpec::kBf16);
  }
  void F32(const std::string& name, Shape shape) {
    Add(name, DType::kF32, std::move(shape), WeightSpec::kF32);
  }

  // A dense linear stored as FP8 with 128x128 block scales in the native format.
  void DenseLinear(const std::string& prefix, int64_t out, int64_t in, W8a8Role role) {
    if (w8a8_) {
      if (role == W8a8Role::kBf16) return Bf16(prefix + ".weight", {out, in});
      return Int8Linear(prefix, out, in);
    }
    Add(prefix + ".weight", DType::kF8E4M3, {out, in}, WeightSpec::kFp8Weight);
    Add(prefix + ".scale", DType::kF8E8M0, {CeilDiv(out, block_out_), CeilDiv(in, block_in_)},
        WeightSpec::kFp8Scale, {out, in});
  }

  // A routed expert linear: MXFP4 natively, unpacked INT8 in W8A8.
  void ExpertLinear(const std::string& prefix, int64_t out, int64_t in) {
    if (w8a8_) return Int8Linear(prefix, out, in);
    Add(prefix + ".weight", DType::kI8, {out, in / 2}, WeightSpec::kFp4Weight, {out, in});
    Add(prefix + ".scale", DType::kF8E8M0, {out, in / kFp4BlockK}, WeightSpec::kFp4Scale,
        {out, in});
  }

  void Globals();
  void Block(const std::string& prefix, int64_t layer);
  void MtpExtras(const std::string& prefix);

  std::vector<WeightSpec> Take() { return std::move(specs_); }

 private:
  // Per-output-channel symmetric INT8 with an F32 scale [out] under ".scale".
  void Int8Linear(const std::string& prefix, int64_t out, int64_t in) {
    Add(prefix + ".weight", DType::kI8, {out, in}, WeightSpec::kInt8Weight);
    Add(prefix + ".scale", DType::kF32, {out}, WeightSpec::kInt8Scale, {out, in});
  }
  void Attention(const std::string& p, int64_t ratio);
  void Compressor(const std::string& p, int64_t ratio, int64_t dim);
  void Ffn(const std::string& p, int64_t layer);

  const ModelConfig& cfg_;
  const bool w8a8_;
  int64_t block_out_ = 128;
  int64_t block_in_ = 128;
  int64_t layer_ = -1;
  std::vector<WeightSpec> specs_;
};

void SpecBuilder::Globals() {
  layer_ = -1;
  const int64_t d = cfg_.hidden_size;
  Bf16("embed.weight", {cfg_.vocab_size, d});
  Bf16("head.weight", {cfg_.vocab_size, d});
  Bf16("norm.weight", {d});
  F32("hc_head_fn", {cfg_.hc_mult, cfg_.hc_mult * d});
  F32("hc_head_base", {cfg_.hc_mult});
  F32("hc_head_scale", {1});
}

// Compressor of a ratio-r layer: with r == 4 consecutive blocks overlap, so
// the projections (and ape) carry two `dim`-wide halves (docs/model.md "KV compressor").
void SpecBuilder::Compressor(const std::string& p, int64_t ratio, int64_t dim) {
  const int64_t width = (ratio == 4 ? 2 : 1) * dim;
  Bf16(p + "wkv.weight", {width, cfg_.hidden_size});
  Bf16(p + "wgate.weight", {width, cfg_.hidden_size});
  F32(p + "ape", {ratio, width});
  Bf16(p + "norm.weight", {dim});
}

void SpecBuilder::Attention(const std::string& p, int64_t ratio) {
  const int64_t d = cfg_.hidden_size;
  const int64_t h = cfg_.num_attention_heads;
  const int64_t hd = cfg_.head_dim;
  const int64_t q_rank = cfg_.q_lora_rank;
  const int64_t o_width = cfg_.o_groups * cfg_.o_lora_rank;
  F32(p + "attn_sink", {h});
  DenseLinear(p + "wq_a", q_rank, d, W8a8Role::kBf16);
  Bf16(p + "q_norm.weight", {q_rank});
  DenseLinear(p + "wq_b", h * hd, q_rank, W8a8Role::kInt8);
  DenseLinear(p + "wkv", hd, d, W8a8Role::kBf16);
  Bf16(p + "kv_norm.weight", {hd});
  // wo_a maps each group's concatenated head outputs to its own o_lora_rank rows.
  DenseLinear(p + "wo_a", o_width, h * hd / cfg_.o_groups, W8a8Role::kBf16);
  DenseLinear(p + "wo_b", d, o_width, W8a8Role::kInt8);
  if (ratio == 0) return;
  Compressor(p + "compressor.", ratio, hd);
  if (ratio != 4) return;
  const int64_t ih = cfg_.index_n_heads;
  const int64_t ihd = cfg_.index_head_dim;
  DenseLinear(p + "indexer.wq_b", ih * ihd, q_rank, W8a8Role::kInt8);
  Bf16(p + "indexer.weights_proj.weight", {ih, d});
  Compressor(p + "indexer.compressor.", ratio, ihd);
}

void SpecBuilder::Ffn(const std::string& p, int64_t layer) {
  const int64_t d = cfg_.hidden_size;
  const int64_t inter = cfg_.moe_intermediate_size;
  const int64_t num_experts = cfg_.n_routed_experts;
  Bf16(p + "gate.weight", {num_experts, d});
  if (cfg_.is_hash_layer(layer)) {
    Add(p + "gate.tid2eid", DType::kI64, {cfg_.vocab_size, cfg_.num_experts_per_tok},
        WeightSpec::kI64);
  } else {
    F32(p + "gate.bias", {num_experts});
  }
  if (cfg_.n_shared_experts > 0) {
    const int64_t shared = cfg_.n_shared_experts * inter;
    DenseLinear(p + "shared_experts.w1", shared, d, W8a8Role::kInt8);
    DenseLinear(p + "shared_experts.w2", d, shared, W8a8Role::kInt8);
    DenseLinear(p + "shared_experts.w3", shared, d, W8a8Role::kInt8);
  }
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    ExpertLinear(ep + "w1", inter, d);
    ExpertLinear(ep + "w2", d, inter);
    ExpertLinear(ep + "w3", inter, d);
  }
}

void SpecBuilder::Block(const std::string& prefix, int64_t layer) {
  layer_ = layer;
  const int64_t d = cfg_.hidden_size;
  const int64_t mix = cfg_.hc_mix();
  for (const char* sub : {"attn", "ffn"}) {
    const std::string hc = prefix + "hc_" + sub;
    F32(hc + "_fn", {mix, cfg_.hc_mult * d});
    F32(hc + "_base", {mix});
    F32(hc + "_scale", {3});  // (pre, post, comb)
  }
  Bf16(prefix + "attn_norm.weight", {d});
  Bf16(prefix + "ffn_norm.weight", {d});
  Attention(prefix + "attn.", cfg_.compress_ratio(layer));
  Ffn(prefix + "ffn.", layer);
}

void SpecBuilder::MtpExtras(const std::string& prefix) {
  const int64_t d = cfg_.hidden_size;
  DenseLinear(prefix + "e_proj", d, d, W8a8Role::kInt8);
  DenseLinear(prefix + "h_proj", d, d, W8a8Role::kInt8);
  Bf16(prefix + "enorm.weight", {d});
  Bf16(prefix + "hnorm.weight", {d});
  Bf16(prefix + "norm.weight", {d});
  F32(prefix + "hc_head_fn", {cfg_.hc_mult, cfg_.hc_mult * d});
  F32(prefix + "hc_head_base", {cfg_.hc_mult});
  F32(prefix + "hc_head_scale", {1});
}

// Every row of a [vocab, topk] table must name topk distinct experts.
Status CheckTid2Eid(const TensorView& v, const std::string& file, const std::string& name,
                    int64_t num_experts) {
  const int64_t rows = v.dim(0);
  const int64_t topk = v.dim(1);
  const auto* bytes = static_cast<const uint8_t*>(v.data);
  std::vector<int64_t> row(static_cast<size_t>(topk));
  for (int64_t r = 0; r < rows; ++r) {
    // memcpy: mapped tensor data need not be 8-byte aligned.
    std::memcpy(row.data(), bytes + r * topk * 8, static_cast<size_t>(topk) * 8);
    for (int64_t i = 0; i < topk; ++i) {
      const int64_t id = row[static_cast<size_t>(i)];
      if (id < 0 || id >= num_experts) {
        return DataLoss("{}: tensor '{}': row {} holds expert id {}, outside [0, {})", file, name,
                        r, id, num_experts);
      }
      for (int64_t j = 0; j < i; ++j) {
        if (row[static_cast<size_t>(j)] == id) {
          return DataLoss("{}: tensor '{}': row {} names expert {} twice", file, name, r, id);
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

const char* WeightKindName(WeightSpec::Kind kind) {
  switch (kind) {
    case WeightSpec::kFp8Weight:
      return "fp8_weight";
    case WeightSpec::kFp8Scale:
      return "fp8_scale";
    case WeightSpec::kFp4Weight:
      return "fp4_weight";
    case WeightSpec::kFp4Scale:
      return "fp4_scale";
    case WeightSpec::kInt8Weight:
      return "int8_weight";
    case WeightSpec::kInt8Scale:
      return "int8_scale";
    case WeightSpec::kBf16:
      return "bf16";
    case WeightSpec::kF32:
      return "f32";
    case WeightSpec::kI64:
      return "i64";
  }
  return "unknown";
}

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& cfg) {
  SpecBuilder b(cfg);
  b.Globals();
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    b.Block("layers." + std::to_string(l) + ".", l);
  }
  for (int64_t k = 0; k < cfg.num_nextn_predict_layers; ++k) {
    const std::string prefix = "mtp." + std::to_string(k) + ".";
    b.Block(prefix, cfg.num_hidden_layers + k);
    b.MtpExtras(prefix);
  }
  return b.Take();
}

namespace {

// The compressed-tensors naming of a W8A8 scale: "<module>.weight_scale" F32
// [out] or [out, 1] where dsv4 convert and the reference write
// "<module>.scale" [out] (the loader accepts both, model/linear.h).  Returns
// the name found.
Result<std::string> CheckWeightScaleNaming(const Checkpoint& ckpt, const WeightSpec& s) {
  const std::string module = s.name.substr(0, s.name.size() - std::string(".scale").size());
  const std::string alt = module + ".weight_scale";
  const TensorView* v = ckpt.Find(alt);
  if (v == nullptr) {
    return NotFound("{}: tensor '{}' ({} {}) is missing from the checkpoint (nor is '{}' there)",
                    ckpt.dir(), s.name, DTypeName(s.dtype), ShapeToString(s.shape), alt);
  }
  const int64_t out = s.shape[0];
  if (v->dtype != DType::kF32 || (v->shape != Shape{out} && v->shape != Shape{out, 1})) {
    return InvalidArgument("{}: tensor '{}': expected F32 [{}] (or [{}, 1]), found {} {}",
                           ckpt.FileOf(alt), alt, out, out, DTypeName(v->dtype),
                           ShapeToString(v->shape));
  }
  return alt;
}

}  // namespace

Status ValidateCheckpoint(const Checkpoint& ckpt, const ModelConfig& cfg) {
  const std::vector<WeightSpec> specs = ExpectedWeights(cfg);
  std::set<std::string, std::less<>> expected;
  for (const WeightSpec& s : specs) {
    expected.insert(s.name);
    const TensorView* v = ckpt.Find(s.name);
    if (v == nullptr && s.kind == WeightSpec::kInt8Scale) {
      DSV4_ASSIGN_OR_RETURN(const std::string alt, CheckWeightScaleNaming(ckpt, s));
      expected.insert(alt);
      continue;
    }
    if (v == nullptr) {
      return NotFound("{}: tensor '{}' ({} {}) is missing from the checkpoint", ckpt.dir(), s.name,
                      DTypeName(s.dtype), ShapeToString(s.shape));
    }
    if (v->dtype != s.dtype || v->shape != s.shape) {
      return InvalidArgument("{}: tensor '{}': expected {} {}, found {} {}", ckpt.FileOf(s.name),
                             s.name, DTypeName(s.dtype), ShapeToString(s.shape),
                             DTypeName(v->dtype), ShapeToString(v->shape));
    }
    if (s.kind == WeightSpec::kI64) {
      DSV4_RETURN_IF_ERROR(CheckTid2Eid(*v, ckpt.FileOf(s.name), s.name, cfg.n_routed_experts));
    }
  }
  for (const std::string& name : ckpt.Names()) {
    if (expected.count(name) == 0) {
      return InvalidArgument("{}: unexpected tensor '{}' (not in the DeepSeek-V4 layout of {})",
                             ckpt.FileOf(name), name, ckpt.dir() + "/config.json");
    }
  }
  return Status::Ok();
}

}  // namespace dsv4::checkpoint
