// libFuzzer target for the checkpoint parsers that read untrusted bytes: the
// safetensors header, model.safetensors.index.json and config.json.  The
// first input byte picks the parser; the rest is the file content.  Besides
// "no crash, no sanitizer report", accepted inputs must satisfy the parsers'
// documented postconditions (checked with __builtin_trap so libFuzzer records
// a crash).

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/weight_spec.h"

namespace {

void Require(bool cond) {
  if (!cond) __builtin_trap();
}

void FuzzSafetensors(const uint8_t* data, size_t size) {
  auto r = dsv4::checkpoint::ParseSafetensorsHeader(data, size, size, "fuzz.safetensors");
  if (!r.ok()) return;
  // Postconditions: tensors tile the data region in offset order, sizes match.
  const auto& h = *r;
  Require(h.data_start >= 8 && h.data_start <= size);
  uint64_t covered = 0;
  for (const auto& e : h.entries) {
    Require(e.begin == covered && e.end >= e.begin);
    Require(e.end - e.begin ==
            static_cast<uint64_t>(dsv4::NumElements(e.shape)) * dsv4::DTypeSize(e.dtype));
    covered = e.end;
  }
  Require(covered == size - h.data_start);
}

void FuzzIndex(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = dsv4::checkpoint::ParseCheckpointIndex(text, "fuzz.index.json");
  if (!r.ok()) return;
  Require(!r->weight_map.empty());
  for (const auto& [tensor, shard] : r->weight_map) {
    Require(!tensor.empty() && dsv4::checkpoint::IsSafeShardName(shard));
  }
}

void FuzzConfig(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = dsv4::checkpoint::ParseModelConfig(text, "fuzz/config.json");
  if (!r.ok()) return;
  const dsv4::checkpoint::ModelConfig& c = *r;
  Require(static_cast<int64_t>(c.compress_ratios.size()) == c.num_layers_with_mtp());
  // The spec generator must accept every validated config; bound the work so
  // a config with millions of experts does not just measure allocation speed.
  const int64_t blocks = c.num_layers_with_mtp();
  if (blocks > 64 || c.n_routed_experts > 64) return;
  std::set<std::string> names;
  for (const auto& s : dsv4::checkpoint::ExpectedWeights(c)) {
    Require(names.insert(s.name).second);
    for (int64_t d : s.shape) Require(d >= 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0:
      FuzzSafetensors(data + 1, size - 1);
      break;
    case 1:
      FuzzIndex(data + 1, size - 1);
      break;
    default:
      FuzzConfig(data + 1, size - 1);
      break;
  }
  return 0;
}
