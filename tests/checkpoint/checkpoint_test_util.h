// Helpers for the checkpoint tests: a private temp directory, a copy of the
// tiny-a checkpoint, and rewriting its shards/index to inject one fault each.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace dsv4::testing {

inline constexpr const char* kShard1 = "model-00001-of-00003.safetensors";
inline constexpr const char* kShard2 = "model-00002-of-00003.safetensors";
inline constexpr const char* kShard3 = "model-00003-of-00003.safetensors";
inline constexpr const char* kIndex = "model.safetensors.index.json";

std::string TinyADir();

// A fresh directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Copies config.json, the index and the three shards of tiny-a into `dir`.
void CopyTinyA(const std::string& dir);

std::string ReadText(const std::string& path);
void WriteText(const std::string& path, const std::string& text);
std::vector<uint8_t> ReadBytes(const std::string& path);
void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes);

// One tensor with owned bytes.
struct OwnedTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};

std::vector<OwnedTensor> ReadAllTensors(const std::string& safetensors_path);
// Writes with the project's SafetensorsWriter (fails the test on error).
void WriteAllTensors(const std::string& path, const std::vector<OwnedTensor>& tensors);
// Reads `path`, lets `edit` change the tensor list, writes it back.
void EditShard(const std::string& path, const std::function<void(std::vector<OwnedTensor>&)>& edit);
// Reads <dir>/model.safetensors.index.json, lets `edit` change it, writes it back.
void EditIndex(const std::string& dir, const std::function<void(nlohmann::json&)>& edit);

}  // namespace dsv4::testing
