#include "checkpoint/checkpoint.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/file_util.h"
#include "base/logging.h"
#include "base/mapped_file.h"

namespace dsv4::checkpoint {

namespace {

using nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// metadata.total_size: HF writes an integer; tolerate an integral float
// (some exporters emit 1.23e9-style numbers) but nothing else.
Status ParseTotalSize(const json& meta, const std::string& file, std::optional<uint64_t>* out) {
  auto it = meta.find("total_size");
  if (it == meta.end() || it->is_null()) return Status::Ok();
  if (it->is_number_unsigned()) {
    *out = it->get<uint64_t>();
    return Status::Ok();
  }
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (v >= 0 && v < 0x1p63 && std::floor(v) == v) {
      *out = static_cast<uint64_t>(v);
      return Status::Ok();
    }
  }
  return DataLoss("{}: 'metadata.total_size' must be a non-negative integer", file);
}

}  // namespace

bool IsSafeShardName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name) {
    if (c == '/' || c == '\\' || c == '\0') return false;
  }
  return true;
}

Result<CheckpointIndex> ParseCheckpointIndex(const std::string& json_text,
                                             const std::string& file) {
  // A tensor listed twice in weight_map is legal JSON (the last one wins in
  // most parsers) but means the index is broken: detect it while parsing.
  std::string top_key;
  std::set<std::string> seen;
  std::string duplicate;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev != json::parse_event_t::key) return true;
    if (depth == 1) {
      top_key = parsed.get<std::string>();
    } else if (depth == 2 && top_key == "weight_map") {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = std::move(key);
    }
    return true;
  };
  json root = json::parse(json_text, cb, /*allow_exceptions=*/false);
  if (root.is_discarded()) return DataLoss("{}: not valid JSON", file);
  if (!root.is_object()) return DataLoss("{}: top-level JSON value is not an object", file);
  if (!duplicate.empty()) {
    return DataLoss("{}: tensor '{}' is listed twice in 'weight_map'", file, duplicate);
  }
  CheckpointIndex index;
  auto meta = root.find("metadata");
  if (meta != root.end() && !meta->is_null()) {
    if (!meta->is_object()) return DataLoss("{}: 'metadata' is not an object", file);
    DSV4_RETURN_IF_ERROR(ParseTotalSize(*meta, file, &index.total_size));
  }
  auto wm = root.find("weight_map");
  if (wm == root.end() || !wm->is_object()) {
    return DataLoss("{}: missing or non-object 'weight_map'", file);
  }
  if (wm->empty()) return DataLoss("{}: 'weight_map' is empty", file);
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (it.key().empty()) return DataLoss("{}: empty tensor name in 'weight_map'", file);
    if (!it->is_string()) {
      return DataLoss("{}: tensor '{}': shard name is not a string", file, it.key());
    }
    const std::string shard = it->get<std::string>();
    if (!IsSafeShardName(shard)) {
      return DataLoss(
          "{}: tensor '{}': unsafe shard name '{}' (must be a plain file name in "
          "the checkpoint directory)",
          file, it.key(), shard);
    }
    index.weight_map.emplace(it.key(), shard);
  }
  return index;
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  DSV4_RETURN_IF_ERROR(CheckDirectory(dir, "checkpoint directory"));
  const std::string index_path = dir + "/" + kIndexName;
  const std::string single_path = dir + "/" + kSingleName;
  // "Cannot tell" (a symlink loop, no permission) is an error, never "absent".
  DSV4_ASSIGN_OR_RETURN(const bool has_index, PathExists(index_path));
  DSV4_ASSIGN_OR_RETURN(const bool has_single, PathExists(single_path));
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  if (has_index && has_single) {
    return InvalidArgument("{}: both {} and {} exist; keep only one", dir, kSingleName, kIndexName);
  }
  if (!has_index && !has_single) {
    return NotFound("{}: neither {} nor {} exists", dir, kSingleName, kIndexName);
  }
  if (has_single) {
    DSV4_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
    for (const auto& e : file->header().entries) ckpt->where_.emplace(e.name, 0);
    ckpt->shards_.push_back(std::move(file));
    return ckpt;
  }
  DSV4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  DSV4_ASSIGN_OR_RETURN(CheckpointIndex index, ParseCheckpointIndex(text, index_path));
  DSV4_RETURN_IF_ERROR(ckpt->OpenShards(index, index_path));
  return ckpt;
}

Status Checkpoint::OpenShards(const CheckpointIndex& index, const std::string& index_path) {
  // Shards in name order, so errors and shard indices are deterministic.
  std::map<std::string, size_t> shard_ids;
  for (const auto& [tensor, shard] : index.weight_map) {
    if (shard_ids.count(shard) != 0) continue;
    const std::string path = dir_ + "/" + shard;
    DSV4_ASSIGN_OR_RETURN(const bool exists, PathExists(path));
    if (!exists) {
      return NotFound("{}: shard '{}' (listed for tensor '{}') does not exist", index_path, shard,
                      tensor);
    }
    shard_ids.emplace(shard, 0);
  }
  for (auto& [shard, id] : shard_ids) {
    DSV4_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir_ + "/" + shard));
    id = shards_.size();
    shards_.push_back(std::move(file));
  }
  // Duplicates first: a tensor in two shards is reported as such, whichever
  // shard the index names.
  uint64_t payload_bytes = 0;
  for (size_t id = 0; id < shards_.size(); ++id) {
    for (const auto& e : shards_[id]->header().entries) {
      payload_bytes += e.end - e.begin;
      auto [it, inserted] = where_.emplace(e.name, id);
      if (!inserted) {
        return DataLoss("{}: tensor '{}' also appears in {}", shards_[id]->path(), e.name,
                        shards_[it->second]->path());
      }
    }
  }
  for (const auto& [shard, id] : shard_ids) {
    for (const auto& e : shards_[id]->header().entries) {
      auto listed = index.weight_map.find(e.name);
      if (listed == index.weight_map.end()) {
        return DataLoss("{}: tensor '{}' is not listed in {}", shards_[id]->path(), e.name,
                        kIndexName);
      }
      if (listed->second != shard) {
        return DataLoss("{}: tensor '{}' is listed in {} under shard '{}'", shards_[id]->path(),
                        e.name, kIndexName, listed->second);
      }
    }
  }
  for (const auto& [tensor, shard] : index.weight_map) {
    if (where_.count(tensor) == 0) {
      return DataLoss("{}: tensor '{}' listed in {} is missing from the shard", dir_ + "/" + shard,
                      tensor, kIndexName);
    }
  }
  if (index.total_size && *index.total_size != payload_bytes) {
    DSV4_LOG_WARN("{}: metadata.total_size is {} but the shards hold {} tensor bytes", index_path,
                  *index.total_size, payload_bytes);
  }
  return Status::Ok();
}

const TensorView* Checkpoint::Find(std::string_view name) const {
  if (overlay_ != nullptr) {
    if (const TensorView* v = overlay_->Find(name)) return v;
  }
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : shards_[it->second]->Find(name);
}

Result<const TensorView*> Checkpoint::Require(std::string_view name, DType dtype,
                                              const Shape& shape) const {
  if (const TensorView* v = overlay_ != nullptr ? overlay_->Find(name) : nullptr) {
    if (v->dtype != dtype || v->shape != shape) {
      return InvalidArgument("{}: tensor '{}': expected {} {}, found {} {}", overlay_->path(), name,
                             DTypeName(dtype), ShapeToString(shape), DTypeName(v->dtype),
                             ShapeToString(v->shape));
    }
    return v;
  }
  auto it = where_.find(name);
  if (it == where_.end())
    return NotFound("{}: tensor '{}' not found in the checkpoint", dir_, name);
  const TensorView* v = shards_[it->second]->Find(name);
  if (v == nullptr) {
    return NotFound("{}: tensor '{}' was unmapped (another rank's routed expert)",
                    shards_[it->second]->path(), name);
  }
  if (v->dtype != dtype || v->shape != shape) {
    return InvalidArgument("{}: tensor '{}': expected {} {}, found {} {}",
                           shards_[it->second]->path(), name, DTypeName(dtype),
                           ShapeToString(shape), DTypeName(v->dtype), ShapeToString(v->shape));
  }
  return v;
}

std::string Checkpoint::FileOf(std::string_view name) const {
  if (overlay_ != nullptr && overlay_->Find(name) != nullptr) return overlay_->path();
  auto it = where_.find(name);
  return it == where_.end() ? std::string() : shards_[it->second]->path();
}

namespace {

// "<layer>.experts.<rest>": the layer, and the expert id of a per-expert
// tensor (-1 for the sidecar's stacked w13/w2).  False for any other name.
bool ParseRoutedExpert(const std::string& name, std::string* layer, int64_t* expert) {
  const size_t at = name.find(".experts.");
  if (at == std::string::npos) return false;
  const char* rest = name.c_str() + at + 9;
  *layer = name.substr(0, at);
  if (std::isdigit(static_cast<unsigned char>(*rest)) != 0) {
    *expert = std::atoll(rest);
    return true;
  }
  *expert = -1;
  return std::strncmp(rest, "w13.", 4) == 0 || std::strncmp(rest, "w2.", 3) == 0;
}

uint64_t OffsetIn(const SafetensorsFile& file, const TensorView& v) {
  return static_cast<uint64_t>(static_cast<const uint8_t*>(v.data) - file.mapped_data());
}

}  // namespace

int64_t Checkpoint::RoutedExpertBytes(int64_t first, int64_t last, int64_t num_experts) const {
  std::set<std::string> stacked;
  int64_t bytes = 0;
  std::string layer;
  int64_t e = 0;
  if (overlay_ != nullptr) {
    for (const std::string& name : overlay_->Names()) {
      if (!ParseRoutedExpert(name, &layer, &e) || e >= 0) continue;
      stacked.insert(layer);
      const auto n = static_cast<int64_t>(overlay_->Find(name)->nbytes());
      bytes += n / num_experts * (last - first);
    }
  }
  for (const auto& shard : shards_) {
    for (const std::string& name : shard->Names()) {
      if (!ParseRoutedExpert(name, &layer, &e) || e < first || e >= last) continue;
      if (stacked.count(layer) == 0) bytes += static_cast<int64_t>(shard->Find(name)->nbytes());
    }
  }
  return bytes;
}

int64_t Checkpoint::UnmapRoutedExpertsOutside(int64_t first, int64_t last, int64_t num_experts) {
  std::set<std::string> stacked;
  int64_t released = 0;
  std::string layer;
  int64_t e = 0;
  if (overlay_ != nullptr) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const std::string& name : overlay_->Names()) {
      if (!ParseRoutedExpert(name, &layer, &e) || e >= 0) continue;
      stacked.insert(layer);
      const TensorView& v = *overlay_->Find(name);
      const uint64_t at = OffsetIn(*overlay_, v);
      const uint64_t per = v.nbytes() / static_cast<uint64_t>(num_experts);
      ranges.emplace_back(at, at + per * static_cast<uint64_t>(first));
      ranges.emplace_back(at + per * static_cast<uint64_t>(last), at + v.nbytes());
    }
    released += static_cast<int64_t>(overlay_->Unmap(std::move(ranges), {}));
  }
  for (const auto& shard : shards_) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::vector<std::string> forget;
    for (const std::string& name : shard->Names()) {
      if (!ParseRoutedExpert(name, &layer, &e) || e < 0) continue;
      if (e >= first && e < last && stacked.count(layer) == 0) continue;
      const TensorView& v = *shard->Find(name);
      const uint64_t at = OffsetIn(*shard, v);
      ranges.emplace_back(at, at + v.nbytes());
      forget.push_back(name);
    }
    released += static_cast<int64_t>(shard->Unmap(std::move(ranges), forget));
  }
  return released;
}

int64_t Checkpoint::DropResidentPages(std::string_view name) const {
  const SafetensorsFile* file = nullptr;
  if (overlay_ != nullptr && overlay_->Find(name) != nullptr) {
    file = overlay_.get();
  } else if (auto it = where_.find(name); it != where_.end()) {
    file = shards_[it->second].get();
  }
  if (file == nullptr) return 0;
  const TensorView& v = *file->Find(name);
  const uint64_t at = OffsetIn(*file, v);
  const auto begin = reinterpret_cast<uintptr_t>(v.data);
  dropped_.emplace_back(begin, begin + v.nbytes());
  return static_cast<int64_t>(file->DropResident(at, at + v.nbytes()));
}

std::vector<std::pair<uintptr_t, uintptr_t>> Checkpoint::DroppedRanges() const { return dropped_; }

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, id] : where_) names.push_back(name);
  return names;
}

}  // namespace dsv4::checkpoint
