#include "tools/make_tiny_random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/logging.h"
#include "tensor/numeric.h"

namespace dsv4::tools {

namespace {

constexpr int64_t kFp8Block = 128;
constexpr int64_t kFp4Group = 32;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ceil(log2(x)) for finite x > 0, exact (frexp does not round).
int CeilLog2(float x) {
  int p = 0;
  const float m = std::frexp(x, &p);  // x = m * 2^p, m in [0.5, 1)
  return m == 0.5f ? p - 1 : p;
}

// 2^e as a float, exact for the exponents used here.
float Pow2(int e) { return std::ldexp(1.0f, e); }

// The linear a weight or scale belongs to ("layers.0.attn.wq_a").
std::string_view LinearName(std::string_view name) {
  for (std::string_view suffix : {".weight", ".scale"}) {
    if (EndsWith(name, suffix)) return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

// Output gain of a linear: the projections that write into the residual
// (wo_b, the expert down projections) are smaller, as in tiny-a.
float LinearGain(std::string_view linear) {
  if (EndsWith(linear, "wo_b")) return 0.5f;
  if (EndsWith(linear, ".w2")) return 0.70710678f;
  return 1.0f;
}

}  // namespace

uint64_t StreamKey(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return RandomBits(h, seed);
}

float NormalFromBits(uint64_t bits) {
  // Sum of four uniforms on [0, 65535]: mean 131070, variance (65536^2 - 1) / 3.
  const int64_t sum =
      static_cast<int64_t>(bits & 0xFFFF) + static_cast<int64_t>((bits >> 16) & 0xFFFF) +
      static_cast<int64_t>((bits >> 32) & 0xFFFF) + static_cast<int64_t>(bits >> 48);
  constexpr float kInvStd = 2.6428998e-05f;  // 1 / sqrt((65536^2 - 1) / 3)
  return static_cast<float>(sum - 131070) * kInvStd;
}

float UniformFromBits(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

uint8_t EncodeE4M3(float x) {
  const uint32_t bits = F32ToBits(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (!(mag < 0x43E00000u)) return sign | 0x7E;  // |x| >= 448 (or NaN: never produced) saturates
  if (mag < 0x3C800000u) {
    // |x| < 2^-6: subnormal codes are multiples of 2^-9 (exact scaling); 8
    // rounds up into the first normal code, which is 8 too.
    return sign | static_cast<uint8_t>(std::nearbyint(BitsToF32(mag) * 512.0f));
  }
  // Normal: keep 3 of the 23 mantissa bits, round to nearest even on the
  // whole exponent|mantissa word so a carry bumps the exponent; then rebias
  // the exponent from 127 to 7.
  const uint32_t rounded = (mag + 0x7FFFFu + ((mag >> 20) & 1u)) >> 20;
  return sign | static_cast<uint8_t>(rounded - (120u << 3));
}

uint8_t EncodeE2M1(float x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // Midpoints between 0, .5, 1, 1.5, 2, 3, 4, 6; ties go to the even code.
  uint8_t code;
  if (a <= 0.25f) {
    code = 0;
  } else if (a < 0.75f) {
    code = 1;
  } else if (a <= 1.25f) {
    code = 2;
  } else if (a < 1.75f) {
    code = 3;
  } else if (a <= 2.5f) {
    code = 4;
  } else if (a < 3.5f) {
    code = 5;
  } else if (a <= 5.0f) {
    code = 6;
  } else {
    code = 7;
  }
  return sign | code;
}

TensorGenerator::TensorGenerator(const checkpoint::WeightSpec& spec,
                                 const checkpoint::ModelConfig& cfg, uint64_t seed)
    : kind_(spec.kind), num_experts_(cfg.n_routed_experts) {
  const std::string_view name = spec.name;
  if (spec.shape.size() >= 2) num_rows_ = spec.shape[0];
  row_elems_ = num_rows_ == 0 ? 0 : NumElements(spec.shape) / num_rows_;
  row_bytes_ = static_cast<size_t>(row_elems_) * DTypeSize(spec.dtype);
  in_ = spec.logical_shape.size() >= 2 ? spec.logical_shape[1] : 1;
  const std::string_view linear = LinearName(name);
  value_key_ = StreamKey(seed, linear);
  scale_key_ = StreamKey(seed ^ 0x5CA1E5CA1E5CA1E5ull, linear);
  const float inv_sqrt_in = 1.0f / std::sqrt(static_cast<float>(in_));
  switch (spec.kind) {
    case checkpoint::WeightSpec::kFp8Weight:
    case checkpoint::WeightSpec::kFp8Scale:
      rule_ = Rule::kFp8;
      std_ = LinearGain(linear) * inv_sqrt_in;
      scale_cols_ = (in_ + kFp8Block - 1) / kFp8Block;
      // Block exponents e0 .. e0+3 with 2^e0 >= 2 * 4σ / 448: codes of a 4σ
      // value land in 28 .. 224 (tiny-a: 2^-9 .. 2^-6 for σ = 1/16).
      fp8_base_exponent_ = CeilLog2(4.0f * std_ / 448.0f) + 1;
      return;
    case checkpoint::WeightSpec::kFp4Weight:
    case checkpoint::WeightSpec::kFp4Scale:
      rule_ = Rule::kFp4;
      std_ = LinearGain(linear) * inv_sqrt_in;
      return;
    case checkpoint::WeightSpec::kInt8Weight:
    case checkpoint::WeightSpec::kInt8Scale:
      rule_ = Rule::kInt8;
      std_ = LinearGain(linear) * inv_sqrt_in;
      return;
    case checkpoint::WeightSpec::kI64:
      rule_ = Rule::kTid2eid;
      return;
    case checkpoint::WeightSpec::kBf16:
    case checkpoint::WeightSpec::kF32:
      break;
  }
  // Plain BF16/F32 parameters, by role (values from tiny-a's statistics).
  rule_ = Rule::kNormal;
  if (name == "embed.weight") {
    std_ = 1.0f;
  } else if (name == "head.weight") {
    std_ = 2.0f * inv_sqrt_in;  // final hidden has rms ~1: logits std ~2
  } else if (EndsWith(name, "norm.weight")) {
    mean_ = 1.0f;
    std_ = 0.1f;
  } else if (EndsWith(name, "_scale")) {  // hc_{attn,ffn,head}_scale
    rule_ = Rule::kUniform;
    mean_ = 0.5f;
    std_ = 1.0f;
  } else if (EndsWith(name, "_base") || EndsWith(name, "attn_sink") || EndsWith(name, ".ape")) {
    std_ = 0.5f;
  } else if (EndsWith(name, "gate.bias")) {
    std_ = 0.15f;
  } else if (EndsWith(name, "wgate.weight")) {
    std_ = 1.5f * inv_sqrt_in;
  } else if (spec.shape.size() >= 2) {  // hc_*_fn, router, compressor wkv, weights_proj
    std_ = inv_sqrt_in;
  } else {
    std_ = 0.5f;
  }
}

void TensorGenerator::FillRows(int64_t begin, int64_t end, uint8_t* out) const {
  DSV4_CHECK(begin >= 0 && begin <= end && end <= num_rows_);
  switch (rule_) {
    case Rule::kNormal:
    case Rule::kUniform:
      return FillFloats(begin, end, out);
    case Rule::kFp8:
      return kind_ == checkpoint::WeightSpec::kFp8Weight ? FillFp8Weight(begin, end, out)
                                                         : FillFp8Scale(begin, end, out);
    case Rule::kFp4:
      return FillFp4(begin, end, out);
    case Rule::kInt8:
      return FillInt8(begin, end, out);
    case Rule::kTid2eid:
      return FillTid2eid(begin, end, out);
  }
}

void TensorGenerator::FillFloats(int64_t begin, int64_t end, uint8_t* out) const {
  const bool is_bf16 = kind_ == checkpoint::WeightSpec::kBf16;
  for (int64_t i = begin * row_elems_; i < end * row_elems_; ++i) {
    const uint64_t bits = RandomBits(value_key_, static_cast<uint64_t>(i));
    const float r = rule_ == Rule::kUniform ? UniformFromBits(bits) : NormalFromBits(bits);
    const float v = mean_ + std_ * r;
    if (is_bf16) {
      const bf16 b = F32ToBf16(v);
      std::memcpy(out, &b, 2);
      out += 2;
    } else {
      std::memcpy(out, &v, 4);
      out += 4;
    }
  }
}

int TensorGenerator::Fp8BlockExponent(int64_t block_row, int64_t block_col) const {
  const uint64_t bits =
      RandomBits(scale_key_, static_cast<uint64_t>(block_row * scale_cols_ + block_col));
  return fp8_base_exponent_ + static_cast<int>(bits >> 62);
}

void TensorGenerator::FillFp8Weight(int64_t begin, int64_t end, uint8_t* out) const {
  std::vector<float> inv_scale(static_cast<size_t>(scale_cols_));
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t b = 0; b < scale_cols_; ++b) {
      inv_scale[static_cast<size_t>(b)] = Pow2(-Fp8BlockExponent(r / kFp8Block, b));
    }
    const uint64_t row_index = static_cast<uint64_t>(r * in_);
    for (int64_t c = 0; c < in_; ++c) {
      const float v =
          std_ * NormalFromBits(RandomBits(value_key_, row_index + static_cast<uint64_t>(c)));
      // Multiplying by a power of two is exact: v / scale without rounding.
      *out++ = EncodeE4M3(v * inv_scale[static_cast<size_t>(c / kFp8Block)]);
    }
  }
}

void TensorGenerator::FillFp8Scale(int64_t begin, int64_t end, uint8_t* out) const {
  for (int64_t br = begin; br < end; ++br) {
    for (int64_t bc = 0; bc < row_elems_; ++bc) {
      *out++ = static_cast<uint8_t>(Fp8BlockExponent(br, bc) + 127);
    }
  }
}

float TensorGenerator::Fp4RowStd(int64_t r) const {
  // Rows of a trained expert differ in norm; a per-row gain 2^(k/4 - 1/2),
  // k uniform in 0..3, spreads the MXFP4 group scales over neighbouring
  // powers of two.  Constants instead of exp2: the bytes must not depend on libm.
  constexpr float kGain[4] = {0.70710678f, 0.84089642f, 1.0f, 1.18920712f};
  constexpr float kInvRmsGain = 1.05098501f;  // 1 / sqrt(mean(kGain^2))
  const uint64_t bits = RandomBits(scale_key_, static_cast<uint64_t>(r));
  return std_ * kInvRmsGain * kGain[bits >> 62];
}

int TensorGenerator::Fp4GroupValues(int64_t r, int64_t c, float* v) const {
  float amax = 0;
  const uint64_t index = static_cast<uint64_t>(r * in_ + c);
  const float row_std = Fp4RowStd(r);
  for (int64_t j = 0; j < kFp4Group; ++j) {
    v[j] = row_std * NormalFromBits(RandomBits(value_key_, index + static_cast<uint64_t>(j)));
    amax = std::max(amax, std::fabs(v[j]));
  }
  // MXFP4 scale: the smallest power of two that maps amax into [-6, 6].
  return CeilLog2(std::max(amax, 1e-30f) / 6.0f);
}

void TensorGenerator::FillFp4(int64_t begin, int64_t end, uint8_t* out) const {
  float v[kFp4Group];
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t c = 0; c < in_; c += kFp4Group) {
      const int e = Fp4GroupValues(r, c, v);
      if (kind_ == checkpoint::WeightSpec::kFp4Scale) {
        *out++ = static_cast<uint8_t>(e + 127);
        continue;
      }
      const float inv_scale = Pow2(-e);
      for (int64_t j = 0; j < kFp4Group; j += 2) {  // low nibble = even element
        *out++ = static_cast<uint8_t>(EncodeE2M1(v[j] * inv_scale) |
                                      (EncodeE2M1(v[j + 1] * inv_scale) << 4));
      }
    }
  }
}

float TensorGenerator::Int8RowScale(int64_t r) const {
  // Per-output-channel symmetric scale: the bound of the distribution
  // (3.46σ) maps to ~127, varied by up to 25 % per row.
  const float u = UniformFromBits(RandomBits(scale_key_, static_cast<uint64_t>(r)));
  return 3.5f * std_ / 127.0f * (1.0f + 0.25f * u);
}

void TensorGenerator::FillInt8(int64_t begin, int64_t end, uint8_t* out) const {
  for (int64_t r = begin; r < end; ++r) {
    const float s = Int8RowScale(r);
    if (kind_ == checkpoint::WeightSpec::kInt8Scale) {
      std::memcpy(out, &s, 4);
      out += 4;
      continue;
    }
    for (int64_t c = 0; c < in_; ++c) {
      const float v =
          std_ * NormalFromBits(RandomBits(value_key_, static_cast<uint64_t>(r * in_ + c)));
      const float q = std::clamp(std::nearbyint(v / s), -127.0f, 127.0f);
      *out++ = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

void TensorGenerator::FillTid2eid(int64_t begin, int64_t end, uint8_t* out) const {
  // Each row: the first k of a seeded Fisher-Yates shuffle of [0, E), so the
  // ids of a row are distinct.
  std::vector<int64_t> perm(static_cast<size_t>(num_experts_));
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t e = 0; e < num_experts_; ++e) perm[static_cast<size_t>(e)] = e;
    for (int64_t j = 0; j < row_elems_; ++j) {
      const uint64_t bits = RandomBits(value_key_, static_cast<uint64_t>(r * row_elems_ + j));
      const uint64_t span = static_cast<uint64_t>(num_experts_ - j);
      const int64_t pick = j + static_cast<int64_t>(((bits >> 32) * span) >> 32);
      std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(pick)]);
      std::memcpy(out, &perm[static_cast<size_t>(j)], 8);
      out += 8;
    }
  }
}

}  // namespace dsv4::tools
