// Internals of `dsv4 convert` shared by convert.cc (source validation,
// planning, output config) and convert_shard.cc (streaming shard conversion,
// marker).  Not a public API.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "tensor/tensor.h"

namespace dsv4::tools::convert_internal {

using OrderedJson = nlohmann::ordered_json;

struct SourceShard {
  std::string file;  // plain name inside the input dir
  std::string path;
  std::unique_ptr<checkpoint::SafetensorsFile> st;  // header only is touched (data read with pread)
};

struct Source {
  std::string dir;
  std::string config_text, index_text;
  OrderedJson config_json;
  checkpoint::ModelConfig cfg;
  checkpoint::CheckpointIndex index;
  std::vector<SourceShard> shards;
  // tensor name -> (shard position, header entry)
  std::map<std::string, std::pair<size_t, const checkpoint::SafetensorsEntry*>> where;
};

enum class Action {
  kCopy,       // bytes unchanged
  kFp8ToInt8,  // FP8 block-scaled -> INT8 per row (+ F32 scale)
  kFp4ToInt8,  // MXFP4 -> INT8 per row (+ F32 scale)
  kFp8ToBf16,  // FP8 block-scaled -> BF16
  kDropScale,  // a source scale consumed by its weight (hashed, not written)
};

// What happens to one source tensor of a shard.
struct TensorJob {
  std::string name;  // source tensor (and output weight) name
  Action action = Action::kCopy;
  DType out_dtype = DType::kBF16;
  Shape out_shape;         // output weight shape ([out, in] for conversions)
  std::string scale_name;  // source scale for conversions; output scale for INT8
};

struct ShardPlan {
  std::string file;
  std::vector<TensorJob> jobs;                             // in source data-offset order
  std::vector<checkpoint::SafetensorsTensorInfo> outputs;  // output header tensors
};

struct Plan {
  std::vector<ShardPlan> shards;
  std::map<std::string, std::string> weight_map;  // output tensor -> shard file
  uint64_t total_size = 0;
  int64_t num_int8 = 0, num_bf16 = 0, num_copied = 0;
};

Result<Source> LoadSource(const std::string& dir);
Result<Plan> BuildPlan(const Source& src);
// config.json of the output: the source's, with quantization_config replaced
// by the compressed-tensors block and its ignore list (docs/convert.md "What is
// converted (same rules as the reference)").
std::string OutputConfigText(const Source& src);

// Streams one shard: reads the source shard sequentially (pread, bounded
// buffers), converts, writes <out_dir>/<file> atomically.  Before the
// output is renamed into place, `before_publish` receives the SHA-256 of the
// whole source shard file (computed on the way) and the output's data
// checksum (base/checksum.h); an error from it publishes nothing.
using ShardDigestsFn =
    std::function<Status(const std::string& source_sha256, uint64_t output_checksum)>;
Status ConvertShard(const Source& src, const ShardPlan& shard, const std::string& out_dir,
                    const ShardDigestsFn& before_publish);
// SHA-256 of a whole file, read in 8 MiB chunks.
Result<std::string> HashFile(const std::string& path);

}  // namespace dsv4::tools::convert_internal
