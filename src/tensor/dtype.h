// Element types of checkpoints and activations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
  kBF16,
  kF16,
  kF32,
  kF64,
  kF8E4M3,  // float8_e4m3fn: FP8 weights and activation codes
  kF8E8M0,  // float8_e8m0fnu: power-of-two block scales
  kI8,      // also packed FP4 e2m1 pairs (low nibble = even element)
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
size_t DTypeSize(DType t);
// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType t);
// Parses a safetensors dtype string; nullopt if unknown.
std::optional<DType> ParseDType(std::string_view name);

}  // namespace dsv4
