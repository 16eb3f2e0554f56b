// The W8A8 converter's numerics (docs/convert.md "What is converted (same rules
// as the reference)"), row-wise so the converter can stream a tensor through a
// small buffer.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace dsv4::tools {

// FP8 e4m3 rows [row_begin, row_end) of a weight [out, in] with one E8M0
// scale per 128x128 block (scales [ceil(out/128), ceil(in/128)]) to FP32:
// code value x block scale, the scale expanded over both dimensions and
// cropped to the weight (partial edge blocks).  `codes` points at row
// row_begin; dst [row_end - row_begin, in].
void DequantFp8Rows(const uint8_t* codes, const uint8_t* scales, int64_t in, int64_t row_begin,
                    int64_t row_end, float* dst);

// MXFP4 rows: packed [rows, in/2] bytes, low nibble first, through the e2m1
// table, times the row's E8M0 scale of each 32-column group (scales [rows,
// in/32], both pointing at the first row).  dst [rows, in].
void DequantFp4Rows(const uint8_t* packed, const uint8_t* scales, int64_t in, int64_t rows,
                    float* dst);

// Symmetric per-row INT8: amax = max(max|w|, 1e-4), scale = amax / 127,
// q = clamp(rint(w / scale), -127, 127) (round half to even, like torch.round).
// Returns the scale.
float QuantizeRowInt8(const float* w, int64_t in, int8_t* q);

// Whether the converter stores weight module `module` (e.g. "layers.2.attn.
// indexer.wq_b", no ".weight") as INT8 (the docs/convert.md selection); `compress_ratios`
// holds the main layers then the MTP layers, `num_layers` main layers.
bool IsInt8Module(std::string_view module, const std::vector<int64_t>& compress_ratios,
                  int64_t num_layers);

}  // namespace dsv4::tools
