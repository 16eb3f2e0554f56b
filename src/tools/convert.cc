// `dsv4 convert` orchestration: output directory rules, the marker and
// --resume (docs/convert.md "Dry run, atomicity, resume", "Marker and fingerprints").
#include "tools/convert.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "base/checksum.h"
#include "base/file_util.h"
#include "base/mapped_file.h"
#include "base/mutex.h"
#include "base/progress.h"
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

// A marker record of one shard: the source shard's size, mtime and SHA-256
// (hashed for free while it is converted) and the output shard's data
// checksum (base/checksum.h, computed before the output is published).
struct ShardRecord {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string sha256;
  std::optional<uint64_t> output_checksum;  // absent in markers of older versions
};

OrderedJson RecordJson(const ShardRecord& r) {
  OrderedJson j = {{"size", r.size}, {"mtime_ns", r.mtime_ns}, {"sha256", r.sha256}};
  if (r.output_checksum) j["output_data_xxh3"] = ChecksumHex(*r.output_checksum);
  return j;
}

bool IsSha256Hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The marker as written by SaveLocked, every field type-checked: a marker is
// a file a user can edit or damage, and nlohmann's get<>() on a wrong type
// throws (an uncaught exception aborts the process).
struct MarkerData {
  std::string config_sha256, index_sha256;
  std::map<std::string, ShardRecord> records;
};

Result<MarkerData> ParseMarker(const std::string& text, const std::string& path, const Plan& plan) {
  const OrderedJson j = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("{}: not a JSON object (a damaged conversion marker)", path);
  }
  auto bad = [&](const std::string& field, const std::string& what) {
    return InvalidArgument(
        "{}: field '{}' {} (a damaged conversion marker; convert into a fresh "
        "directory)",
        path, field, what);
  };
  auto str = [&](const char* key, bool required, std::string* out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return required ? bad(key, "is missing") : Status::Ok();
    if (!it->is_string()) return bad(key, "must be a string");
    *out = it->get<std::string>();
    return Status::Ok();
  };
  std::string format, ignored;
  DSV4_RETURN_IF_ERROR(str("format", true, &format));
  if (format != kConvertMarkerFormat) {
    return InvalidArgument("{}: not a marker of format \"{}\"", path, kConvertMarkerFormat);
  }
  MarkerData m;
  DSV4_RETURN_IF_ERROR(str("input_dir", false, &ignored));
  DSV4_RETURN_IF_ERROR(str("scale_naming", false, &ignored));
  DSV4_RETURN_IF_ERROR(str("source_config_sha256", true, &m.config_sha256));
  DSV4_RETURN_IF_ERROR(str("source_index_sha256", true, &m.index_sha256));
  if (auto it = j.find("complete"); it != j.end() && !it->is_boolean()) {
    return bad("complete", "must be true or false");
  }
  auto shards = j.find("source_shards");
  if (shards == j.end()) return bad("source_shards", "is missing");
  if (!shards->is_object()) return bad("source_shards", "must be an object");
  std::set<std::string> planned;
  for (const ShardPlan& sp : plan.shards) planned.insert(sp.file);
  for (const auto& [file, rec] : shards->items()) {
    const std::string field = "source_shards." + file;
    // Only the source's own shards: a record never names a path to read.
    if (planned.count(file) == 0) return bad(field, "names a shard the source does not have");
    if (!rec.is_object()) return bad(field, "must be an object");
    ShardRecord r;
    auto size = rec.find("size");
    auto mtime = rec.find("mtime_ns");
    auto sha = rec.find("sha256");
    if (size == rec.end() || !size->is_number_unsigned()) {
      return bad(field + ".size", "must be a non-negative integer");
    }
    if (mtime == rec.end() || !mtime->is_number_integer() ||
        (mtime->is_number_unsigned() && mtime->get<uint64_t>() > INT64_MAX)) {
      return bad(field + ".mtime_ns", "must be an integer");
    }
    if (sha == rec.end() || !sha->is_string() || !IsSha256Hex(sha->get<std::string>())) {
      return bad(field + ".sha256", "must be 64 lowercase hex digits");
    }
    r.size = size->get<uint64_t>();
    r.mtime_ns = mtime->get<int64_t>();
    r.sha256 = sha->get<std::string>();
    if (auto out = rec.find("output_data_xxh3"); out != rec.end()) {
      uint64_t v = 0;
      if (!out->is_string() || !ParseChecksumHex(out->get<std::string>(), &v)) {
        return bad(field + ".output_data_xxh3", "must be 16 lowercase hex digits");
      }
      r.output_checksum = v;
    }
    m.records.emplace(file, std::move(r));
  }
  return m;
}

// The marker: what the output was converted from, and what each output
// shard held when it was written.  A resume re-hashes a source shard only if
// its size or mtime changed, and verifies every kept output shard's data
// checksum (docs/convert.md, "Marker and fingerprints").
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
  Status Save() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return SaveLocked();
  }
  void SetComplete() { j_["complete"] = true; }
  std::optional<ShardRecord> Find(const std::string& file) const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = records_.find(file);
    if (it == records_.end()) return std::nullopt;
    return it->second;
  }
  Status RecordShard(const std::string& file, const std::string& source_path,
                     const std::string& sha256, uint64_t output_checksum) EXCLUDES(mu_) {
    DSV4_ASSIGN_OR_RETURN(const FileStat st, StatFile(source_path));
    MutexLock lock(&mu_);
    records_[file] = {st.size, st.mtime_ns, sha256, output_checksum};
    return SaveLocked();
  }
  // Loads an existing marker and checks it against the current source.
  Status LoadAndCheck(const Source& src, const Plan& plan, int64_t* num_hashed) EXCLUDES(mu_);

 private:
  Status CheckShard(const Source& src, const std::string& file, const ShardRecord& rec,
                    int64_t* num_hashed) const;
  Status SaveLocked() const REQUIRES(mu_) {
    OrderedJson j = j_;
    for (const auto& [file, rec] : records_) j["source_shards"][file] = RecordJson(rec);
    return checkpoint::WriteFileAtomic(path_, j.dump(2) + "\n");
  }
  std::string path_;
  OrderedJson j_;     // written only before and after the shard threads run
  mutable Mutex mu_;  // records_ and the marker file
  std::map<std::string, ShardRecord> records_ GUARDED_BY(mu_);  // shard file -> fingerprints
};

Status Marker::LoadAndCheck(const Source& src, const Plan& plan, int64_t* num_hashed) {
  DSV4_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path_));
  DSV4_ASSIGN_OR_RETURN(MarkerData old, ParseMarker(text, path_, plan));
  // input_dir is informational: the source may have moved.
  const std::pair<const char*, const std::string*> hashes[] = {
      {"source_config_sha256", &old.config_sha256}, {"source_index_sha256", &old.index_sha256}};
  for (const auto& [key, value] : hashes) {
    if (*value != j_[key].get<std::string>()) {
      return FailedPrecondition(
          "{}: {} differs: the source {} changed since this conversion "
          "started; convert into a fresh directory",
          path_, key,
          std::string(key) == "source_config_sha256" ? "config.json"
                                                     : "model.safetensors.index.json");
    }
  }
  for (const auto& [file, rec] : old.records) {
    DSV4_RETURN_IF_ERROR(CheckShard(src, file, rec, num_hashed));
    MutexLock lock(&mu_);
    records_[file] = rec;
  }
  return Status::Ok();
}

Status Marker::CheckShard(const Source& src, const std::string& file, const ShardRecord& rec,
                          int64_t* num_hashed) const {
  const std::string path = (fs::path(src.dir) / file).string();
  DSV4_ASSIGN_OR_RETURN(const FileStat st, StatFile(path));
  if (st.size == rec.size && st.mtime_ns == rec.mtime_ns) {
    return Status::Ok();  // unchanged file: no re-hash
  }
  ++*num_hashed;
  DSV4_ASSIGN_OR_RETURN(const std::string sha, convert_internal::HashFile(path));
  if (sha != rec.sha256) {
    return FailedPrecondition(
        "{}: source shard changed since it was converted (sha256 {}, "
        "marker {}); convert into a fresh directory",
        path, sha, rec.sha256);
  }
  return Status::Ok();
}

// A finished output shard must hold exactly the planned tensors.  Returns
// the checksum of its data region (base/checksum.h).
Result<uint64_t> CheckExistingShard(const std::string& path, const ShardPlan& shard) {
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::SafetensorsFile> f,
                        checkpoint::SafetensorsFile::Open(path));
  if (f->header().entries.size() != shard.outputs.size()) {
    return FailedPrecondition(
        "{}: existing shard holds {} tensors, expected {}; refusing to "
        "overwrite it",
        path, f->header().entries.size(), shard.outputs.size());
  }
  for (const checkpoint::SafetensorsTensorInfo& t : shard.outputs) {
    const TensorView* v = f->Find(t.name);
    if (v == nullptr || v->dtype != t.dtype || v->shape != t.shape) {
      return FailedPrecondition(
          "{}: existing shard: tensor '{}' is not {} {}; refusing to "
          "overwrite it",
          path, t.name, DTypeName(t.dtype), ShapeToString(t.shape));
    }
  }
  // pread, not the mapping: the bytes never count toward this process's RSS.
  DSV4_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  const uint64_t start = f->header().data_start;
  Result<uint64_t> sum = ChecksumOfFile(fd, start, f->file_size() - start, path);
  ::close(fd);
  return sum;
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
  // error_code overloads throughout: a symlink loop or a vanished entry is a
  // message, never an uncaught filesystem_error.
  std::vector<fs::path> files;
  std::error_code ec;
  fs::directory_iterator it(in_dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && IsAuxiliary(it->path())) files.push_back(it->path());
  }
  if (ec) return IoError("{}: cannot list: {}", in_dir, ec.message());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const fs::path dst = fs::path(out_dir) / p.filename();
    DSV4_ASSIGN_OR_RETURN(const bool exists, PathExists(dst.string()));
    if (exists) continue;
    DSV4_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(p.string()));
    DSV4_RETURN_IF_ERROR(checkpoint::WriteFileAtomic(dst.string(), text));
  }
  return Status::Ok();
}

Status CheckDirs(const ConvertOptions& o, bool* out_exists) {
  std::error_code ec;
  if (o.input_dir.empty() || o.output_dir.empty()) {
    return InvalidArgument("--input-dir and --output are required");
  }
  DSV4_RETURN_IF_ERROR(CheckDirectory(o.input_dir, "--input-dir"));
  // A symlink loop (or no permission) is an error here, not "absent".
  DSV4_ASSIGN_OR_RETURN(*out_exists, PathExists(o.output_dir));
  if (*out_exists) DSV4_RETURN_IF_ERROR(CheckDirectory(o.output_dir, "--output"));
  if (SameFile(o.input_dir, o.output_dir)) {
    return InvalidArgument("--output must differ from --input-dir ({})", o.input_dir);
  }
  const fs::path in = fs::weakly_canonical(o.input_dir, ec);
  const fs::path out = fs::weakly_canonical(o.output_dir, ec);
  if (!ec && in == out) {
    return InvalidArgument("--output must differ from --input-dir ({})", o.input_dir);
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

// Output tensor bytes of one shard (what the progress line counts).
int64_t ShardBytes(const ShardPlan& shard) {
  int64_t bytes = 0;
  for (const checkpoint::SafetensorsTensorInfo& t : shard.outputs) {
    bytes += NumElements(t.shape) * static_cast<int64_t>(DTypeSize(t.dtype));
  }
  return bytes;
}

Status ProcessShard(const ConvertOptions& o, const Source& src, const Plan& plan, size_t i,
                    Marker& marker, ShardCounters& counters, Mutex& log_mu, Progress* progress) {
  const ShardPlan& shard = plan.shards[i];
  const std::string out_path = (fs::path(o.output_dir) / shard.file).string();
  const std::string src_path = (fs::path(o.input_dir) / shard.file).string();
  const std::string tag = fmt::format("[{:02d}/{:02d}] ", i + 1, plan.shards.size());
  auto log = [&](const std::string& line) {
    MutexLock lock(&log_mu);
    if (progress != nullptr) progress->ClearLine();  // the line goes above the live one
    Log(o, line);
  };
  DSV4_ASSIGN_OR_RETURN(const bool exists, PathExists(out_path));
  if (!exists) {
    log(tag + "convert: " + shard.file);
    // The record (source SHA-256, output checksum) is saved before the
    // shard's rename: a published shard always has one to be checked against.
    DSV4_RETURN_IF_ERROR(convert_internal::ConvertShard(
        src, shard, o.output_dir, [&](const std::string& sha, uint64_t output_checksum) {
          return marker.RecordShard(shard.file, src_path, sha, output_checksum);
        }));
    ++counters.converted;
    return Status::Ok();
  }
  DSV4_ASSIGN_OR_RETURN(const uint64_t checksum, CheckExistingShard(out_path, shard));
  const std::optional<ShardRecord> rec = marker.Find(shard.file);
  if (rec && rec->output_checksum && *rec->output_checksum != checksum) {
    return FailedPrecondition(
        "{}: output shard changed after it was written (data checksum {}, marker {}); delete it "
        "and run --resume again to convert it anew",
        out_path, ChecksumHex(checksum), ChecksumHex(*rec->output_checksum));
  }
  log(tag + "resume: " + shard.file);
  ++counters.resumed;
  if (rec && rec->output_checksum) return Status::Ok();
  // A marker of an older version (no output checksum) or, before that, one
  // killed between the rename and the marker update: record what is there.
  std::string sha = rec ? rec->sha256 : std::string();
  if (!rec) {
    ++counters.hashed;
    DSV4_ASSIGN_OR_RETURN(sha, convert_internal::HashFile(src_path));
  }
  log(tag + "recorded the output checksum of " + shard.file + " (the marker had none)");
  return marker.RecordShard(shard.file, src_path, sha, checksum);
}

// Shards are independent (each output shard depends only on source bytes),
// so up to o.num_threads run at once; each streams through its own small
// buffers.  After the first error no new shard is started.
Status RunShards(const ConvertOptions& o, const Source& src, const Plan& plan, Marker& marker,
                 ConvertSummary* sum) {
  const size_t n = plan.shards.size();
  const size_t num_threads = std::clamp<size_t>(static_cast<size_t>(o.num_threads), 1, n);
  ShardCounters counters;
  Mutex mu;  // guards first_error (a local: the analysis checks only members) and the log
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  Status first_error;
  // Shard by shard (a Flash shard is a few GiB): percentage, rate and ETA
  // over the output bytes, on stderr (base/progress.h).
  std::optional<Progress> progress;
  if (o.progress) {
    progress.emplace("convert", static_cast<int64_t>(plan.total_size), ProgressUnit::kBytes);
  }
  auto worker = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      Status s =
          ProcessShard(o, src, plan, i, marker, counters, mu, progress ? &*progress : nullptr);
      if (s.ok() && progress) progress->Add(ShardBytes(plan.shards[i]));
      if (!s.ok()) {
        MutexLock lock(&mu);
        if (!failed.exchange(true)) first_error = s;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < num_threads; ++t) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // fewer threads, same output: shards are claimed, not assigned
    }
  }
  worker();
  for (std::thread& t : threads) t.join();
  if (progress) {
    progress->Finish();
    if (first_error.ok()) Log(o, progress->Summary());
  }
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
  std::error_code ec;
  const bool non_empty = out_exists && !fs::is_empty(o.output_dir, ec);
  if (ec) return IoError("{}: cannot list: {}", o.output_dir, ec.message());
  if (non_empty && !o.resume) {
    return FailedPrecondition(
        "{}: output directory exists and is not empty; pass --resume to "
        "continue an interrupted conversion",
        o.output_dir);
  }
  if (non_empty) {
    DSV4_ASSIGN_OR_RETURN(const bool has_marker, PathExists(marker_path));
    if (!has_marker) {
      return FailedPrecondition(
          "{}: no conversion marker {}; --resume continues only a "
          "conversion started by dsv4 convert",
          o.output_dir, kConvertMarkerName);
    }
    DSV4_RETURN_IF_ERROR(marker.LoadAndCheck(src, plan, &sum.source_shards_hashed));
  } else {
    fs::create_directories(o.output_dir, ec);
    if (ec) return IoError("{}: cannot create: {}", o.output_dir, ec.message());
  }
  DSV4_RETURN_IF_ERROR(marker.Save());

  DSV4_RETURN_IF_ERROR(RunShards(o, src, plan, marker, &sum));
  DSV4_RETURN_IF_ERROR(checkpoint::WriteFileAtomic(
      (fs::path(o.output_dir) / "config.json").string(), convert_internal::OutputConfigText(src)));
  DSV4_RETURN_IF_ERROR(checkpoint::WriteIndexJson(o.output_dir, plan.weight_map, plan.total_size));
  DSV4_RETURN_IF_ERROR(CopyAuxiliaryFiles(o.input_dir, o.output_dir));
  marker.SetComplete();
  DSV4_RETURN_IF_ERROR(marker.Save());
  Log(o, "Conversion complete: " + o.output_dir);
  return sum;
}

}  // namespace dsv4::tools
