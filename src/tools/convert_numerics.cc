#include "tools/convert_numerics.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string>

#include "tensor/numeric.h"

namespace dsv4::tools {

namespace {

constexpr int64_t kFp8Block = 128;
constexpr int64_t kFp4Group = 32;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Parses "<digits>." at the front of `s`; -1 if absent.
int64_t TakeIndex(std::string_view* s) {
  int64_t v = -1;
  const auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc() || p == s->data() + s->size() || *p != '.') return -1;
  s->remove_prefix(static_cast<size_t>(p - s->data()) + 1);
  return v;
}

bool IsExpertModule(std::string_view rest) {
  std::string_view tail;
  if (rest.starts_with("ffn.shared_experts.")) {
    tail = rest.substr(19);
  } else if (rest.starts_with("ffn.experts.")) {
    tail = rest.substr(12);
    if (TakeIndex(&tail) < 0) return false;
  } else {
    return false;
  }
  return tail == "w1" || tail == "w2" || tail == "w3";
}

// Code -> value tables: the converter's inner loops run over every weight of
// the checkpoint, and a table load is much cheaper than decoding a code.
const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = E4M3ToF32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

const std::array<float, 16>& E2M1Table() {
  static const std::array<float, 16> table = [] {
    std::array<float, 16> t{};
    for (int c = 0; c < 16; ++c) t[c] = E2M1ToF32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

void DequantFp8Rows(const uint8_t* codes, const uint8_t* scales, int64_t in, int64_t row_begin,
                    int64_t row_end, float* dst) {
  const std::array<float, 256>& lut = E4M3Table();
  const int64_t scale_cols = CeilDiv(in, kFp8Block);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* s = scales + (r / kFp8Block) * scale_cols;
    const uint8_t* c = codes + (r - row_begin) * in;
    float* d = dst + (r - row_begin) * in;
    for (int64_t b = 0; b < scale_cols; ++b) {
      // Exact: a power-of-two scale times an e4m3 value.
      const float scale = E8M0ToF32(s[b]);
      const int64_t end = std::min(in, (b + 1) * kFp8Block);
      for (int64_t i = b * kFp8Block; i < end; ++i) d[i] = lut[c[i]] * scale;
    }
  }
}

void DequantFp4Rows(const uint8_t* packed, const uint8_t* scales, int64_t in, int64_t rows,
                    float* dst) {
  const std::array<float, 16>& lut = E2M1Table();
  const int64_t groups = in / kFp4Group;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = packed + r * (in / 2);
    const uint8_t* s = scales + r * groups;
    float* d = dst + r * in;
    for (int64_t g = 0; g < CeilDiv(in, kFp4Group); ++g) {
      const float scale = E8M0ToF32(s[g]);
      const int64_t end = std::min(in, (g + 1) * kFp4Group);
      for (int64_t i = g * kFp4Group; i < end; i += 2) {
        d[i] = lut[p[i / 2] & 0xf] * scale;  // low nibble first
        d[i + 1] = lut[p[i / 2] >> 4] * scale;
      }
    }
  }
}

float QuantizeRowInt8(const float* w, int64_t in, int8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < in; ++i) amax = std::max(amax, std::fabs(w[i]));
  const float scale = std::max(amax, 1e-4f) / 127.0f;
  for (int64_t i = 0; i < in; ++i) {
    q[i] = static_cast<int8_t>(std::clamp(std::rint(w[i] / scale), -127.0f, 127.0f));
  }
  return scale;
}

bool IsInt8Module(std::string_view module, const std::vector<int64_t>& compress_ratios,
                  int64_t num_layers) {
  int64_t layer = -1;
  if (module.starts_with("layers.")) {
    module.remove_prefix(7);
    layer = TakeIndex(&module);
    if (layer < 0 || layer >= num_layers) return false;
  } else if (module.starts_with("mtp.")) {
    module.remove_prefix(4);
    const int64_t k = TakeIndex(&module);
    if (k < 0) return false;
    layer = num_layers + k;
    if (module == "e_proj" || module == "h_proj") return true;
  } else {
    return false;
  }
  if (module == "attn.wq_b" || module == "attn.wo_b") return true;
  if (module == "attn.indexer.wq_b") {
    return layer < static_cast<int64_t>(compress_ratios.size()) &&
           compress_ratios[static_cast<size_t>(layer)] == 4;
  }
  return IsExpertModule(module);
}

}  // namespace dsv4::tools
