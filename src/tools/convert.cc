// `dsv4 convert` orchestration: output directory rules, the marker and
// --resume (serving.md §13.5, docs/convert.md).
#include "tools/convert.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/mapped_file.h"
#include "base/sha256.h"
#include "checkpoint/safetensors_writer.h"
#include "tools/convert_internal.h"

namespace dsv4::tools {

namespace {

namespace fs = std::filesystem;
using convert_internal::OrderedJson;
using convert_internal::Plan;
using convert_internal::ShardPlan;
using convert_internal::Source;

std::string Sha256Hex(const std::string& text) {
  Sha256 h;
  h.Update(text.data(), text.size());
  return h.FinishHex();
}

struct FileStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

Result<FileStat> StatFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return IoError("{}: cannot stat", path);
  return FileStat{static_cast<uint64_t>(st.st_size),
                  int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
}

// The marker: what the output was converted from.  Per source shard it keeps
// size, mtime and the SHA-256 of the whole file (hashed for free while the
// shard is converted); a resume re-hashes a shard only if its size or mtime
// changed (docs/convert.md, "Fingerprints").
class Marker {
 public:
  Marker(std::string path, const Source& src) : path_(std::move(path)) {
    j_["format"] = kConvertMarkerFormat;
    j_["input_dir"] = src.dir;
    j_["source_config_sha256"] = Sha256Hex(src.config_text);
    j_["source_index_sha256"] = Sha256Hex(src.index_text);
    j_["scale_naming"] = ".scale";
    j_["source_shards"] = OrderedJson::object();
    j_["complete"] = false;
  }
  const std::string& path() const { return path_; }
  // Thread-safe (shards finish concurrently); records are written in name
  // order, so the marker does not depend on completion order.
  Status Save() const {
    std::lock_guard<std::mutex> lock(mu_);
    return SaveLocked();
  }
  void SetComplete() { j_["complete"] = true; }
  bool HasShard(const std::string& file) const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_.count(file) != 0;
  }
  Status RecordShard(const std::string& file, const std::string& source_path,
                     const std::string& sha256) {
    DSV4_ASSIGN_OR_RETURN(const FileStat st, StatFile(source_path));
    std::lock_guard<std::mutex> lock(mu_);
    records_[file] = {{"size", st.size}, {"mtime_ns", st.mtime_ns}, {"sha256", sha256}};
    return SaveLocked();
  }
  // Loads an existing marker and checks it against the current source.
  Status LoadAndCheck(const Source& src, int64_t* num_hashed);

 private:
  Status CheckShard(const Source& src, const std::string& file, const OrderedJson& rec,
                    int64_t* num_hashed) const;
  Status SaveLocked() const {
    OrderedJson j = j_;
    for (const auto& [file, rec] : records_) j["source_shards"][file] = rec;
    return WriteFileAtomic(path_, j.dump(2) + "\n");
  }
  std::string path_;
  OrderedJson j_;
  std::map<std::string, OrderedJson> records_;  // source shard -> fingerprint
  mutable std::mutex mu_;
};

Status Marker::LoadAndCheck(const Source& src, int64_t* num_hashed) {
  DSV4_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path_));
  const OrderedJson old = OrderedJson::parse(text, nullptr, false);
  if (old.is_discarded() || !old.is_object() || old.value("format", "") != kConvertMarkerFormat) {
    return InvalidArgument("{}: not a marker of format \"{}\"", path_, kConvertMarkerFormat);
  }
  // input_dir is informational: the source may have moved.
  for (const char* key : {"source_config_sha256", "source_index_sha256"}) {
    if (old.value(key, "") != j_[key]) {
      return FailedPrecondition(
          "{}: {} differs: the source {} changed since this conversion "
          "started; convert into a fresh directory",
          path_, key,
          std::string(key) == "source_config_sha256" ? "config.json"
                                                     : "model.safetensors.index.json");
    }
  }
  if (!old.contains("source_shards") || !old["source_shards"].is_object()) {
    return InvalidArgument("{}: 'source_shards' is missing", path_);
  }
  for (const auto& [file, rec] : old["source_shards"].items()) {
    DSV4_RETURN_IF_ERROR(CheckShard(src, file, rec, num_hashed));
    records_[file] = rec;
  }
  return Status::Ok();
}

Status Marker::CheckShard(const Source& src, const std::string& file, const OrderedJson& rec,
                          int64_t* num_hashed) const {
  const std::string path = (fs::path(src.dir) / file).string();
  if (!rec.is_object() || !rec.contains("sha256") || !rec.contains("size") ||
      !rec.contains("mtime_ns")) {
    return InvalidArgument("{}: malformed record for source shard '{}'", path_, file);
  }
  DSV4_ASSIGN_OR_RETURN(const FileStat st, StatFile(path));
  if (st.size == rec["size"].get<uint64_t>() && st.mtime_ns == rec["mtime_ns"].get<int64_t>()) {
    return Status::Ok();  // unchanged file: no re-hash
  }
  ++*num_hashed;
  DSV4_ASSIGN_OR_RETURN(const std::string sha, convert_internal::HashFile(path));
  if (sha != rec["sha256"].get<std::string>()) {
    return FailedPrecondition(
        "{}: source shard changed since it was converted (sha256 {}, "
        "marker {}); convert into a fresh directory",
        path, sha, rec["sha256"].get<std::string>());
  }
  return Status::Ok();
}

// A finished output shard must hold exactly the planned tensors.
Status CheckExistingShard(const std::string& path, const ShardPlan& shard) {
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
  if (f->header().entries.size() != shard.outputs.size()) {
    return FailedPrecondition(
        "{}: existing shard holds {} tensors, expected {}; refusing to "
        "overwrite it",
        path, f->header().entries.size(), shard.outputs.size());
  }
  for (const SafetensorsTensorInfo& t : shard.outputs) {
    const TensorView* v = f->Find(t.name);
    if (v == nullptr || v->dtype != t.dtype || v->shape != t.shape) {
      return FailedPrecondition(
          "{}: existing shard: tensor '{}' is not {} {}; refusing to "
          "overwrite it",
          path, t.name, DTypeName(t.dtype), ShapeToString(t.shape));
    }
  }
  return Status::Ok();
}

bool IsAuxiliary(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.empty() || name[0] == '.' || name == "config.json" ||
      name == "model.safetensors.index.json") {
    return false;
  }
  const std::string ext = p.extension().string();
  return ext == ".json" || ext == ".py" || ext == ".jinja" || ext == ".model";
}

Status CopyAuxiliaryFiles(const std::string& in_dir, const std::string& out_dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(in_dir)) {
    if (e.is_regular_file() && IsAuxiliary(e.path())) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const fs::path dst = fs::path(out_dir) / p.filename();
    if (fs::exists(dst)) continue;
    DSV4_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(p.string()));
    DSV4_RETURN_IF_ERROR(WriteFileAtomic(dst.string(), text));
  }
  return Status::Ok();
}

Status CheckDirs(const ConvertOptions& o, bool* out_exists) {
  std::error_code ec;
  if (o.input_dir.empty() || o.output_dir.empty()) {
    return InvalidArgument("--input-dir and --output-dir are required");
  }
  if (fs::exists(o.output_dir, ec) && fs::equivalent(o.input_dir, o.output_dir, ec)) {
    return InvalidArgument("--output-dir must differ from --input-dir ({})", o.input_dir);
  }
  if (fs::weakly_canonical(o.input_dir, ec) == fs::weakly_canonical(o.output_dir, ec)) {
    return InvalidArgument("--output-dir must differ from --input-dir ({})", o.input_dir);
  }
  *out_exists = fs::exists(o.output_dir, ec);
  if (*out_exists && !fs::is_directory(o.output_dir, ec)) {
    return InvalidArgument("{}: output exists and is not a directory", o.output_dir);
  }
  return Status::Ok();
}

void Log(const ConvertOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

// Converts or resumes shard i.  Thread-safe: the marker locks, counters are
// atomic, log lines are whole.
struct ShardCounters {
  std::atomic<int64_t> converted{0}, resumed{0}, hashed{0};
};

Status ProcessShard(const ConvertOptions& o, const Source& src, const Plan& plan, size_t i,
                    Marker& marker, ShardCounters& counters, std::mutex& log_mu) {
  const ShardPlan& shard = plan.shards[i];
  const std::string out_path = (fs::path(o.output_dir) / shard.file).string();
  const std::string src_path = (fs::path(o.input_dir) / shard.file).string();
  const std::string tag = fmt::format("[{:02d}/{:02d}] ", i + 1, plan.shards.size());
  auto log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu);
    Log(o, line);
  };
  std::string sha;
  if (fs::exists(out_path)) {
    DSV4_RETURN_IF_ERROR(CheckExistingShard(out_path, shard));
    log(tag + "resume: " + shard.file);
    ++counters.resumed;
    if (marker.HasShard(shard.file)) return Status::Ok();
    // Killed between the rename and the marker update: fingerprint now.
    ++counters.hashed;
    DSV4_ASSIGN_OR_RETURN(sha, convert_internal::HashFile(src_path));
  } else {
    log(tag + "convert: " + shard.file);
    DSV4_ASSIGN_OR_RETURN(sha, convert_internal::ConvertShard(src, shard, o.output_dir));
    ++counters.converted;
  }
  return marker.RecordShard(shard.file, src_path, sha);
}

// Shards are independent (each output shard depends only on source bytes),
// so up to o.num_threads run at once; each streams through its own small
// buffers.  After the first error no new shard is started.
Status RunShards(const ConvertOptions& o, const Source& src, const Plan& plan, Marker& marker,
                 ConvertSummary* sum) {
  const size_t n = plan.shards.size();
  const size_t num_threads = std::clamp<size_t>(static_cast<size_t>(o.num_threads), 1, n);
  ShardCounters counters;
  std::mutex mu;  // guards first_error and the log
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  Status first_error;
  auto worker = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      Status s = ProcessShard(o, src, plan, i, marker, counters, mu);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed.exchange(true)) first_error = s;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < num_threads; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  sum->shards_converted = counters.converted;
  sum->shards_resumed = counters.resumed;
  sum->source_shards_hashed += counters.hashed;
  return first_error;
}

}  // namespace

Result<ConvertSummary> ConvertToW8a8(const ConvertOptions& o) {
  bool out_exists = false;
  DSV4_RETURN_IF_ERROR(CheckDirs(o, &out_exists));
  DSV4_ASSIGN_OR_RETURN(Source src, convert_internal::LoadSource(o.input_dir));
  DSV4_ASSIGN_OR_RETURN(Plan plan, convert_internal::BuildPlan(src));
  ConvertSummary sum;
  sum.num_shards = static_cast<int64_t>(plan.shards.size());
  sum.num_int8 = plan.num_int8;
  sum.num_bf16 = plan.num_bf16;
  sum.num_copied = plan.num_copied;
  sum.total_size = plan.total_size;
  if (o.dry_run) {
    Log(o, "Input: " + o.input_dir);
    Log(o, "Output: " + o.output_dir);
    Log(o, "Shards: " + std::to_string(sum.num_shards));
    Log(o, "Serving INT8 weights: " + std::to_string(sum.num_int8));
    Log(o, "BF16 fallback weights: " + std::to_string(sum.num_bf16));
    Log(o, "Copied tensors: " + std::to_string(sum.num_copied));
    Log(o, "Output bytes (total_size): " + std::to_string(sum.total_size));
    return sum;
  }
  const std::string marker_path = (fs::path(o.output_dir) / kConvertMarkerName).string();
  Marker marker(marker_path, src);
  const bool non_empty = out_exists && !fs::is_empty(o.output_dir);
  if (non_empty && !o.resume) {
    return FailedPrecondition(
        "{}: output directory exists and is not empty; pass --resume to "
        "continue an interrupted conversion",
        o.output_dir);
  }
  if (non_empty) {
    if (!fs::exists(marker_path)) {
      return FailedPrecondition(
          "{}: no conversion marker {}; --resume continues only a "
          "conversion started by dsv4 convert",
          o.output_dir, kConvertMarkerName);
    }
    DSV4_RETURN_IF_ERROR(marker.LoadAndCheck(src, &sum.source_shards_hashed));
  } else {
    std::error_code ec;
    fs::create_directories(o.output_dir, ec);
    if (ec) return IoError("{}: cannot create: {}", o.output_dir, ec.message());
  }
  DSV4_RETURN_IF_ERROR(marker.Save());

  DSV4_RETURN_IF_ERROR(RunShards(o, src, plan, marker, &sum));
  DSV4_RETURN_IF_ERROR(WriteFileAtomic((fs::path(o.output_dir) / "config.json").string(),
                                       convert_internal::OutputConfigText(src)));
  DSV4_RETURN_IF_ERROR(WriteIndexJson(o.output_dir, plan.weight_map, plan.total_size));
  DSV4_RETURN_IF_ERROR(CopyAuxiliaryFiles(o.input_dir, o.output_dir));
  marker.SetComplete();
  DSV4_RETURN_IF_ERROR(marker.Save());
  Log(o, "Conversion complete: " + o.output_dir);
  return sum;
}

}  // namespace dsv4::tools
