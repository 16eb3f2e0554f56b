// Test helpers: open golden safetensors from tests/data and read tensors as
// FP32 / BF16 / integer vectors with shape checks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "tensor/numeric.h"

namespace dsv4::testing {

// Absolute path of a file under tests/data.
std::string TestDataPath(const std::string& relative);

// Opens tests/data/<relative>; fails the test (ADD_FAILURE) and returns null on error.
std::unique_ptr<checkpoint::SafetensorsFile> OpenGolden(const std::string& relative);

// Tensor contents converted to the requested element type.  FP32-stored BF16
// values convert exactly.  Aborts the test with a message if the tensor is missing.
std::vector<float> ReadF32(const checkpoint::SafetensorsFile& f, const std::string& name,
                           Shape* shape = nullptr);
std::vector<bf16> ReadBf16(const checkpoint::SafetensorsFile& f, const std::string& name,
                           Shape* shape = nullptr);
std::vector<int64_t> ReadI64(const checkpoint::SafetensorsFile& f, const std::string& name,
                             Shape* shape = nullptr);
std::vector<uint8_t> ReadU8(const checkpoint::SafetensorsFile& f, const std::string& name,
                            Shape* shape = nullptr);

// Counts BF16 elements whose bit patterns differ by more than max_ulp ulps
// (treating +0/-0 as equal).
int64_t CountUlpDiffs(const std::vector<bf16>& got, const std::vector<bf16>& want, int max_ulp);

}  // namespace dsv4::testing
