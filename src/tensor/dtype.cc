#include "tensor/dtype.h"

namespace dsv4 {

namespace {
struct Entry {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr Entry kTable[] = {
    {DType::kBF16, "BF16", 2}, {DType::kF16, "F16", 2},        {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},   {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI8, "I8", 1},     {DType::kU8, "U8", 1},          {DType::kI16, "I16", 2},
    {DType::kI32, "I32", 4},   {DType::kI64, "I64", 8},        {DType::kBool, "BOOL", 1},
};
}  // namespace

size_t DTypeSize(DType t) {
  for (const auto& e : kTable) {
    if (e.type == t) return e.size;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  for (const auto& e : kTable) {
    if (e.type == t) return e.name;
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& e : kTable) {
    if (e.name == name) return e.type;
  }
  return std::nullopt;
}

}  // namespace dsv4
