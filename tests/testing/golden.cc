#include "testing/golden.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

namespace dsv4::testing {

std::string TestDataPath(const std::string& relative) {
  return std::string(DSV4_TEST_DATA_DIR) + "/" + relative;
}

std::unique_ptr<checkpoint::SafetensorsFile> OpenGolden(const std::string& relative) {
  auto r = checkpoint::SafetensorsFile::Open(TestDataPath(relative));
  if (!r.ok()) {
    ADD_FAILURE() << r.status().ToString();
    return nullptr;
  }
  return std::move(r).value();
}

namespace {
const TensorView& Need(const checkpoint::SafetensorsFile& f, const std::string& name,
                       Shape* shape) {
  const TensorView* v = f.Find(name);
  if (v == nullptr) throw std::runtime_error("golden tensor missing: " + name);
  if (shape) *shape = v->shape;
  return *v;
}

template <typename T>
T Load(const void* p, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + i * sizeof(T), sizeof(T));
  return v;
}

double ElementAsDouble(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kF32:
      return Load<float>(v.data, i);
    case DType::kF64:
      return Load<double>(v.data, i);
    case DType::kBF16:
      return Bf16ToF32(bf16{Load<uint16_t>(v.data, i)});
    case DType::kI64:
      return static_cast<double>(Load<int64_t>(v.data, i));
    case DType::kI32:
      return Load<int32_t>(v.data, i);
    case DType::kU8:
      return Load<uint8_t>(v.data, i);
    case DType::kI8:
      return Load<int8_t>(v.data, i);
    default:
      throw std::runtime_error("unsupported golden dtype");
  }
}
}  // namespace

std::vector<float> ReadF32(const checkpoint::SafetensorsFile& f, const std::string& name,
                           Shape* shape) {
  const TensorView& v = Need(f, name, shape);
  std::vector<float> out(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) out[i] = static_cast<float>(ElementAsDouble(v, i));
  return out;
}

std::vector<bf16> ReadBf16(const checkpoint::SafetensorsFile& f, const std::string& name,
                           Shape* shape) {
  const TensorView& v = Need(f, name, shape);
  std::vector<bf16> out(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) {
    if (v.dtype == DType::kBF16) {
      out[i] = bf16{Load<uint16_t>(v.data, i)};
    } else {
      // BF16 stored as F32: the low 16 bits are zero, truncation is exact.
      out[i] =
          bf16{static_cast<uint16_t>(F32ToBits(static_cast<float>(ElementAsDouble(v, i))) >> 16)};
    }
  }
  return out;
}

std::vector<int64_t> ReadI64(const checkpoint::SafetensorsFile& f, const std::string& name,
                             Shape* shape) {
  const TensorView& v = Need(f, name, shape);
  std::vector<int64_t> out(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) out[i] = static_cast<int64_t>(ElementAsDouble(v, i));
  return out;
}

std::vector<uint8_t> ReadU8(const checkpoint::SafetensorsFile& f, const std::string& name,
                            Shape* shape) {
  const TensorView& v = Need(f, name, shape);
  std::vector<uint8_t> out(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) out[i] = static_cast<uint8_t>(ElementAsDouble(v, i));
  return out;
}

int64_t CountUlpDiffs(const std::vector<bf16>& got, const std::vector<bf16>& want, int max_ulp) {
  auto key = [](bf16 v) -> int32_t {
    // Map sign-magnitude to a monotonic integer line; +0 and -0 both map to 0.
    const int32_t mag = v.bits & 0x7fff;
    return (v.bits & 0x8000) ? -mag : mag;
  };
  int64_t n = 0;
  const size_t count = std::min(got.size(), want.size());
  for (size_t i = 0; i < count; ++i) {
    if (std::abs(key(got[i]) - key(want[i])) > max_ulp) ++n;
  }
  return n + static_cast<int64_t>(std::max(got.size(), want.size()) - count);
}

}  // namespace dsv4::testing
