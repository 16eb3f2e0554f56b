// Deterministic random tensor contents for `dsv4 make-tiny`.
//
// Every element is a pure function of (seed, tensor name, element index): a
// counter-based generator (the SplitMix64 finalizer over a per-tensor key and
// the index) feeds integer-only distributions, so the bytes do not depend on
// the libstdc++/libm version, the thread count, or the order tensors are
// written in, and any row range of a tensor can be produced on its own.
//
// Values are scaled like a trained model's (statistics of golden tiny-a, see
// docs/tools.md): linears ~ gain/sqrt(in), norms ~ 1, mHC parameters sized so
// the mixes are O(1); so a forward pass keeps activations in range.  Quantized
// weights are genuine e4m3/e2m1 codes (round to nearest even, saturating) with
// power-of-two E8M0 block scales.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "checkpoint/weight_spec.h"

namespace dsv4::tools {

// Random bits number `index` of the stream `key`.
inline uint64_t RandomBits(uint64_t key, uint64_t index) {
  uint64_t z = key + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stream key of `name` under `seed` (FNV-1a of the name, mixed with the seed).
uint64_t StreamKey(uint64_t seed, std::string_view name);

// Approximately N(0, 1): the Irwin-Hall sum of four 16-bit uniforms, centred
// and scaled with exact integer arithmetic and one FP32 multiply.  Bounded to
// +-3.46, which keeps quantized weights off the saturation limits.
float NormalFromBits(uint64_t bits);
// Uniform in [0, 1), 24 bits.
float UniformFromBits(uint64_t bits);

// Quantizers of the checkpoint formats: clamp to the largest finite value,
// round to nearest even, keep the sign (tiny negatives give -0 codes).
uint8_t EncodeE4M3(float x);  // float8_e4m3fn code
uint8_t EncodeE2M1(float x);  // e2m1 code in the low 4 bits

// Produces the stored bytes of one tensor, any row range at a time.  A "row"
// is one index of the stored dim 0 (a rank-1 tensor is a single row).
// Thread-safe: FillRows may run concurrently on disjoint ranges.
class TensorGenerator {
 public:
  TensorGenerator(const checkpoint::WeightSpec& spec, const checkpoint::ModelConfig& cfg,
                  uint64_t seed);

  int64_t num_rows() const { return num_rows_; }
  size_t row_bytes() const { return row_bytes_; }
  // Writes rows [begin, end) to out[(end - begin) * row_bytes()].
  void FillRows(int64_t begin, int64_t end, uint8_t* out) const;

 private:
  enum class Rule { kNormal, kUniform, kFp8, kFp4, kInt8, kTid2eid };

  void FillFloats(int64_t begin, int64_t end, uint8_t* out) const;
  void FillFp8Weight(int64_t begin, int64_t end, uint8_t* out) const;
  void FillFp8Scale(int64_t begin, int64_t end, uint8_t* out) const;
  void FillFp4(int64_t begin, int64_t end, uint8_t* out) const;
  void FillInt8(int64_t begin, int64_t end, uint8_t* out) const;
  void FillTid2eid(int64_t begin, int64_t end, uint8_t* out) const;

  // E8M0 exponent of the FP8 block (block_row, block_col).
  int Fp8BlockExponent(int64_t block_row, int64_t block_col) const;
  // E8M0 exponent of the 32 FP4 values of row r starting at column c, whose
  // values (before scaling) are written to v[32].
  int Fp4GroupValues(int64_t r, int64_t c, float* v) const;
  float Fp4RowStd(int64_t r) const;
  float Int8RowScale(int64_t r) const;

  checkpoint::WeightSpec::Kind kind_;
  Rule rule_ = Rule::kNormal;
  int64_t num_rows_ = 1;
  int64_t row_elems_ = 1;  // stored elements per row
  size_t row_bytes_ = 0;
  int64_t in_ = 1;          // logical input width of a linear
  int64_t scale_cols_ = 1;  // FP8 blocks per row of blocks
  float mean_ = 0;          // kNormal: mean + std * N; kUniform: mean + std * U
  float std_ = 1;
  int fp8_base_exponent_ = 0;
  int64_t num_experts_ = 1;
  uint64_t value_key_ = 0;  // element values
  uint64_t scale_key_ = 0;  // block exponents (shared by a weight and its scale)
};

}  // namespace dsv4::tools
