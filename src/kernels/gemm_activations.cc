// The block-scaled GEMMs' activations in the forms their kernels read
// (ActivationForm, gemm_driver.h): FP8 codes decoded to FP32 or to BF16
// block-major (scales folded in where they fold exactly), FP4 kernels'
// integer-plane records or scaled BF16; one row at a time, since the GEMM's
// tasks prepare the rows a row block at a time (RowBlockPreparation).  The
// scalar builders here are the references for the SIMD ones in cpu/.
#include <array>
#include <bit>
#include <cstring>

#include "kernels/gemm_driver.h"

namespace dsv4::kernels {

namespace {

// Decoded activation codes: e4m3 value · `factor` for each code byte.
std::array<float, 256> E4M3Table(float factor) {
  std::array<float, 256> t;
  for (int c = 0; c < 256; ++c) t[c] = E4M3ToF32(static_cast<uint8_t>(c)) * factor;
  return t;
}

// FP8 GEMM activations, one row: each e4m3 code's value ×2^8, which
// compensates the kernels' FP16 route for the weights (gemm_cpu.h).
void DecodeFp8Row(const uint8_t* codes, int64_t in, float* x) {
  static const std::array<float, 256> kTable = E4M3Table(256.0f);
  for (int64_t i = 0; i < in; ++i) x[i] = kTable[codes[i]];
}

// e4m3 values as integers: code -> value·2^9 (448·2^9 < 2^18); NaN codes
// (0x7f, 0xff) -> 0, flagged separately.
std::array<int32_t, 256> E4M3IntTable() {
  std::array<int32_t, 256> t;
  for (int c = 0; c < 256; ++c) {
    const float v = E4M3ToF32(static_cast<uint8_t>(c));
    t[c] = (c & 0x7f) == 0x7f ? 0 : static_cast<int32_t>(v * 512.0f);
  }
  return t;
}

// One record (cpu::Fp4GemmArgs in gemm_cpu.h) from a block's 128 codes:
// three signed byte planes of the codes' integer values a = p0 + 2^8·p1 +
// 2^16·p2 (p0, p1 signed bytes; a - p0 is a multiple of 2^8, so the
// arithmetic shifts below divide exactly), each plane the block's even
// elements, then its odd ones; the 32-block offsets 12·Σa; the NaN
// flag; and, when every a is a multiple of 8, the planes of a/8 (plane 2
// zero) with the 2-plane flag and unit.  The reference for the AVX-512
// builder (cpu/fp4_records_avx512.cc: the same bytes, ~3x faster), and the
// builder where the ISA has none: simple loops over the output positions,
// 4.3 µs per 1,024 elements here (6.1 with per-element plane writes through
// divisions before).
void BuildFp4Record(const uint8_t* codes, const int32_t* int_of, uint8_t* rec) {
  int32_t a[128];
  int32_t nan = 0, low_bits = 0;
  for (int64_t e = 0; e < 128; ++e) {
    a[e] = int_of[codes[e]];
    nan |= (codes[e] & 0x7f) == 0x7f ? 1 : 0;
    low_bits |= a[e];
  }
  const int32_t shift = (low_bits & 7) == 0 ? 3 : 0;  // exact: a >> 3 == a / 8
  int32_t offset[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < 128; ++e) {
    a[e] >>= shift;
    offset[e / 32] += a[e];
  }
  for (int32_t& o : offset) o *= 12;
  auto* planes0 = reinterpret_cast<int8_t*>(rec);
  const auto put = [planes0](int64_t at, int32_t v) {
    const auto b0 = static_cast<int8_t>(v);
    const int32_t r1 = (v - b0) >> 8;
    const auto b1 = static_cast<int8_t>(r1);
    planes0[at] = b0;
    planes0[128 + at] = b1;
    planes0[256 + at] = static_cast<int8_t>((r1 - b1) >> 8);
  };
  for (int64_t i = 0; i < 64; ++i) put(i, a[2 * i]);           // even elements
  for (int64_t i = 0; i < 64; ++i) put(64 + i, a[2 * i + 1]);  // odd ones
  const int32_t planes = shift == 0 ? 3 : 2;
  const float unit = shift == 0 ? 0x1p-10f : 0x1p-7f;
  std::memcpy(rec + cpu::kFp4OffsetAt, offset, sizeof offset);
  std::memcpy(rec + cpu::kFp4NanAt, &nan, sizeof nan);
  std::memcpy(rec + cpu::kFp4PlanesAt, &planes, sizeof planes);
  std::memcpy(rec + cpu::kFp4UnitAt, &unit, sizeof unit);
}

// Points a BF16 dot kernel's args (cpu::Fp8GemmArgs, cpu::Fp4GemmArgs) at
// BF16 activations in `buffer`, in the cpu::DotActivationLayout that
// PrepareActivationRow writes.
template <typename Args>
void SetDotActivations(float* buffer, Args* args) {
  const cpu::DotActivationLayout l(args->m, args->w.in);
  args->xh = reinterpret_cast<bf16*>(buffer);
  args->ldx = l.ldx;
  args->ldkb = l.ldkb;
  args->ldrb = l.ldrb;
}

}  // namespace

void PrepareActivationRow(ActivationForm form, const uint8_t* x_codes, const float* x_scales,
                          int64_t m, int64_t in, float* out, int64_t r) {
  switch (form) {
    case ActivationForm::kFp8Fma:
      return DecodeFp8Row(x_codes + r * in, in, out + r * in);
    case ActivationForm::kFp8Dot:
    case ActivationForm::kFp8DotScaled: {
      const cpu::GemmKernels* simd = SimdKernels();
      const auto decode = simd != nullptr && simd->fp8_dot_activations != nullptr
                              ? simd->fp8_dot_activations
                              : &cpu::Fp8DotActivationsScalar;
      const float* scales =
          form == ActivationForm::kFp8DotScaled ? x_scales + r * (in / 128) : nullptr;
      const cpu::DotActivationLayout l(m, in);
      return decode(x_codes + r * in, scales, in, l.rows, r % cpu::kRowBlock,
                    reinterpret_cast<bf16*>(out) + l.BlockOffset(r));
    }
    case ActivationForm::kFp4: {
      const cpu::GemmKernels* simd = SimdKernels();
      const auto build = simd != nullptr && simd->fp4_records != nullptr
                             ? simd->fp4_records
                             : &cpu::BuildFp4RecordsScalar;
      return build(x_codes + r * in, in,
                   reinterpret_cast<uint8_t*>(out) + r * (in / 128) * cpu::kFp4RecordBytes);
    }
    case ActivationForm::kFp4Dot: {
      const cpu::GemmKernels* simd = SimdKernels();
      const auto decode = simd != nullptr && simd->fp4_dot_activations != nullptr
                              ? simd->fp4_dot_activations
                              : &cpu::Fp4DotActivationsScalar;
      const cpu::DotActivationLayout l(m, in);
      return decode(x_codes + r * in, x_scales + r * (in / 128), in, l.rows, r % cpu::kRowBlock,
                    reinterpret_cast<bf16*>(out) + l.BlockOffset(r));
    }
  }
}

ActivationForm SetFp4Activations(bool dot, float* buffer, cpu::Fp4GemmArgs* args) {
  if (dot) {
    SetDotActivations(buffer, args);
    return ActivationForm::kFp4Dot;
  }
  args->x = reinterpret_cast<const uint8_t*>(buffer);  // records
  return ActivationForm::kFp4;
}

// Whether the [m, w.in/128] activation scales fold exactly into the BF16
// dot kernel's values against w (cpu::kFp8FoldMinScale): powers of two in
// the range, and no product with one of w's scales above 2^127.  act_quant's
// always do, short of activations near the BF16 maximum.  Scales up to 1
// cannot reach 2^127 with any E8M0 weight scale (at most 2^127), so the
// weight's scales are read only when some activation scale exceeds 1.
bool cpu::Fp8ScalesFold(const float* x_scales, int64_t m, const Fp8Weight& w) {
  int max_exponent = -127;
  for (int64_t i = 0; i < m * (w.in / 128); ++i) {
    const float s = x_scales[i];
    if (!(s >= cpu::kFp8FoldMinScale && s <= cpu::kFp8FoldMaxScale) ||
        (std::bit_cast<uint32_t>(s) & 0x7fffff) != 0) {
      return false;
    }
    max_exponent = std::max(max_exponent, static_cast<int>(std::bit_cast<uint32_t>(s) >> 23) - 127);
  }
  if (max_exponent <= 0) return true;
  const int64_t num_scales = CeilDiv(w.out, 128) * (w.in / 128);
  for (int64_t i = 0; i < num_scales; ++i) {
    const int e = w.scales[i];  // 2^(e - 127); 255 is NaN, NaN either way
    if (e != 255 && e - 127 + max_exponent > 127) return false;
  }
  return true;
}

ActivationForm Fp8ActivationForm(bool dot, const float* x_scales, int64_t m, const Fp8Weight& w) {
  if (!dot) return ActivationForm::kFp8Fma;
  return cpu::Fp8ScalesFold(x_scales, m, w) ? ActivationForm::kFp8DotScaled
                                            : ActivationForm::kFp8Dot;
}

void SetFp8Activations(ActivationForm form, float* buffer, cpu::Fp8GemmArgs* args) {
  if (form == ActivationForm::kFp8Fma) {
    args->x = buffer;
    return;
  }
  SetDotActivations(buffer, args);
  args->x_scaled = form == ActivationForm::kFp8DotScaled;
}

// FP4 GEMM activations, one row: one record per 128-element block (in/128
// records at rec).
void cpu::BuildFp4RecordsScalar(const uint8_t* codes, int64_t in, uint8_t* rec) {
  static const std::array<int32_t, 256> kInt = E4M3IntTable();
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    BuildFp4Record(codes + kb * 128, kInt.data(), rec + kb * cpu::kFp4RecordBytes);
  }
}

// FP8 GEMM activations for the BF16 dot kernel, row r of m: each code's
// value in BF16 (exact; times the block's power-of-two scale where scales
// is given, exact too), block-major (block kb of row r at (kb·m + r)·128):
// the kernel's register tiles read one block of several rows at a time,
// which in rows `in` elements apart (8 KB on Flash) would all fall in the
// same L1 sets.
void cpu::Fp8DotActivationsScalar(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                  int64_t r, bf16* xh) {
  static const std::array<bf16, 256> kTable = [] {
    std::array<bf16, 256> t;
    for (int c = 0; c < 256; ++c) t[c] = F32ToBf16(E4M3ToF32(static_cast<uint8_t>(c)));
    return t;
  }();
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    bf16* block = xh + (kb * m + r) * 128;
    for (int64_t i = 0; i < 128; ++i) {
      const bf16 v = kTable[codes[kb * 128 + i]];
      block[i] = scales == nullptr ? v : F32ToBf16(Bf16ToF32(v) * scales[kb]);
    }
  }
}

// FP4 BF16 dot activations, row r of m: the FP8 dot kernel's values (the
// codes' BF16, so a NaN code keeps the sign and payload the SIMD decode
// gives it) times the block's scale, rounded to BF16; each 8 stored as K 0,
// 4, 1, 5, 2, 6, 3, 7 (the kernel pairs a chunk's weights K j and j + 4).
void cpu::Fp4DotActivationsScalar(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                  int64_t r, bf16* xh) {
  Fp8DotActivationsScalar(codes, nullptr, in, m, r, xh);
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    bf16* block = xh + (kb * m + r) * 128;
    for (int64_t g = 0; g < 128; g += 8) {
      bf16 v[8];
      for (int64_t i = 0; i < 8; ++i) v[i] = F32ToBf16(Bf16ToF32(block[g + i]) * scales[kb]);
      for (int64_t j = 0; j < 4; ++j) {
        block[g + 2 * j] = v[j];
        block[g + 2 * j + 1] = v[4 + j];
      }
    }
  }
}

}  // namespace dsv4::kernels
