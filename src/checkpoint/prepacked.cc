#include "checkpoint/prepacked.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/checksum.h"
#include "base/file_util.h"
#include "base/mapped_file.h"
#include "base/progress.h"
#include "base/sha256.h"
#include "base/thread_pool.h"

namespace dsv4::checkpoint {
namespace {

using nlohmann::json;

constexpr uint64_t kWindowBytes = 4ull << 20;
constexpr uint64_t kNumWindows = 64;
constexpr uint64_t kWholeFileBytes = 256ull << 20;
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;  // as the safetensors reader
constexpr char kPadPrefix[] = "__pad.";

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes.data(), bytes.size());
  return h.FinishHex();
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool StartsWith(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Closes a descriptor on every return path.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// --- layout -----------------------------------------------------------------

struct ExpertFormat {
  bool int8 = false;  // W8A8: I8 [out, in] codes, F32 [out] scales
  int64_t inter = 0;
  int64_t dim = 0;
};

// The scale tensor name of an expert or shared-expert linear `p` ("...w1").
std::string ScaleName(const Checkpoint& ckpt, const std::string& p, bool int8) {
  if (int8 && ckpt.Find(p + ".scale") == nullptr && ckpt.Find(p + ".weight_scale") != nullptr) {
    return p + ".weight_scale";
  }
  return p + ".scale";
}

// Checks one source linear of an expert: codes [out, in] (FP4: [out, in/2]),
// scales [out, in/32] E8M0 or [out] / [out, 1] F32.
Status CheckExpertLinear(const Checkpoint& ckpt, const std::string& p, const ExpertFormat& f,
                         int64_t out, int64_t in) {
  if (f.int8) {
    DSV4_RETURN_IF_ERROR(ckpt.Require(p + ".weight", DType::kI8, {out, in}).status());
    const std::string s = ScaleName(ckpt, p, true);
    const TensorView* v = ckpt.Find(s);
    if (v == nullptr) return NotFound("{}: tensor '{}' not found", ckpt.dir(), s);
    if (v->dtype != DType::kF32 || (v->shape != Shape{out} && v->shape != Shape{out, 1})) {
      return InvalidArgument("{}: tensor '{}': expected F32 [{}], found {} {}", ckpt.FileOf(s), s,
                             out, DTypeName(v->dtype), ShapeToString(v->shape));
    }
    return Status::Ok();
  }
  DSV4_RETURN_IF_ERROR(ckpt.Require(p + ".weight", DType::kI8, {out, in / 2}).status());
  return ckpt.Require(p + ".scale", DType::kF8E8M0, {out, in / 32}).status();
}

// Rank-stacked w13 and w2 of the routed experts under `ffn` ("layers.3.ffn").
Status PlanRoutedExperts(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& ffn,
                         int64_t ranks, std::vector<PackedTensor>* plan,
                         std::set<std::string>* consumed) {
  const TensorView* probe = ckpt.Find(ffn + ".experts.0.w1.weight");
  if (probe == nullptr) return Status::Ok();  // no routed experts in this block
  ExpertFormat f;
  f.dim = cfg.hidden_size;
  f.inter = cfg.moe_intermediate_size;
  f.int8 = probe->dtype == DType::kI8 && probe->shape.size() == 2 && probe->dim(1) == f.dim;
  const int64_t e_total = cfg.n_routed_experts;
  const int64_t e_rank = e_total / ranks;
  PackedTensor w13w{ffn + ".experts.w13.weight", DType::kI8, {}, PackedTensor::kConcat, {}, 0};
  PackedTensor w13s{ffn + ".experts.w13.scale", DType::kF8E8M0, {}, PackedTensor::kConcat, {}, 0};
  PackedTensor w2w{ffn + ".experts.w2.weight", DType::kI8, {}, PackedTensor::kConcat, {}, 0};
  PackedTensor w2s{ffn + ".experts.w2.scale", DType::kF8E8M0, {}, PackedTensor::kConcat, {}, 0};
  if (f.int8) {
    w13w.shape = {ranks, e_rank, 2 * f.inter, f.dim};
    w13s = {w13s.name, DType::kF32, {ranks, e_rank, 2 * f.inter}, PackedTensor::kConcat, {}, 0};
    w2w.shape = {ranks, e_rank, f.dim, f.inter};
    w2s = {w2s.name, DType::kF32, {ranks, e_rank, f.dim}, PackedTensor::kConcat, {}, 0};
  } else {
    w13w.shape = {ranks, e_rank, 2 * f.inter, f.dim / 2};
    w13s.shape = {ranks, e_rank, 2 * f.inter, f.dim / 32};
    w2w.shape = {ranks, e_rank, f.dim, f.inter / 2};
    w2s.shape = {ranks, e_rank, f.dim, f.inter / 32};
  }
  for (int64_t e = 0; e < e_total; ++e) {
    const std::string p = ffn + ".experts." + std::to_string(e) + ".";
    DSV4_RETURN_IF_ERROR(CheckExpertLinear(ckpt, p + "w1", f, f.inter, f.dim));
    DSV4_RETURN_IF_ERROR(CheckExpertLinear(ckpt, p + "w3", f, f.inter, f.dim));
    DSV4_RETURN_IF_ERROR(CheckExpertLinear(ckpt, p + "w2", f, f.dim, f.inter));
    for (const char* w : {"w1", "w3"}) {
      w13w.sources.push_back(p + w + ".weight");
      w13s.sources.push_back(ScaleName(ckpt, p + w, f.int8));
    }
    w2w.sources.push_back(p + "w2.weight");
    w2s.sources.push_back(ScaleName(ckpt, p + "w2", f.int8));
  }
  for (PackedTensor* t : {&w13w, &w13s, &w2w, &w2s}) {
    consumed->insert(t->sources.begin(), t->sources.end());
    plan->push_back(std::move(*t));
  }
  return Status::Ok();
}

// The shared expert's w1 and w3 fused into w13 where the scale layout allows:
// INT8 per-channel scales always, FP8 128x128 blocks when shared_inter % 128
// == 0 (a block row must not straddle w1 and w3).  Else nothing is planned and
// the tensors are copied as stored.
void PlanSharedExpert(const Checkpoint& ckpt, const std::string& ffn,
                      std::vector<PackedTensor>* plan, std::set<std::string>* consumed) {
  const std::string p = ffn + ".shared_experts.";
  const TensorView* w1 = ckpt.Find(p + "w1.weight");
  const TensorView* w3 = ckpt.Find(p + "w3.weight");
  if (w1 == nullptr || w3 == nullptr || w1->shape.size() != 2 || w1->shape != w3->shape ||
      w1->dtype != w3->dtype) {
    return;
  }
  const int64_t si = w1->dim(0);
  const int64_t dim = w1->dim(1);
  const bool int8 = w1->dtype == DType::kI8;
  const bool fp8 = w1->dtype == DType::kF8E4M3;
  if (!(int8 || (fp8 && si % 128 == 0 && dim % 128 == 0))) return;
  const std::string s1 = ScaleName(ckpt, p + "w1", int8);
  const std::string s3 = ScaleName(ckpt, p + "w3", int8);
  const TensorView* v1 = ckpt.Find(s1);
  const TensorView* v3 = ckpt.Find(s3);
  const Shape scale_shape = int8 ? Shape{si} : Shape{si / 128, dim / 128};
  const DType scale_dtype = int8 ? DType::kF32 : DType::kF8E8M0;
  auto scale_ok = [&](const TensorView* v) {
    return v != nullptr && v->dtype == scale_dtype &&
           (v->shape == scale_shape || (int8 && v->shape == Shape{si, 1}));
  };
  if (!scale_ok(v1) || !scale_ok(v3)) return;  // the model's loader reports it
  const Shape fused_scale = int8 ? Shape{2 * si} : Shape{2 * si / 128, dim / 128};
  plan->push_back({p + "w13.weight",
                   w1->dtype,
                   {2 * si, dim},
                   PackedTensor::kConcat,
                   {p + "w1.weight", p + "w3.weight"},
                   0});
  plan->push_back({p + "w13.scale", scale_dtype, fused_scale, PackedTensor::kConcat, {s1, s3}, 0});
  consumed->insert({p + "w1.weight", p + "w3.weight", s1, s3});
}

// --- metadata ---------------------------------------------------------------

json ShardsJson(const std::vector<PrepackedSource::Shard>& shards) {
  json a = json::array();
  for (const auto& s : shards) a.push_back({s.name, s.size, s.mtime_ns});
  return a;
}

std::string FormatShard(const PrepackedSource::Shard& s) {
  return fmt::format("size {}, mtime_ns {}", s.size, s.mtime_ns);
}

// What differs between the recorded and the current source, one line.
std::string DescribeChange(const std::map<std::string, std::string>& meta,
                           const PrepackedSource& now) {
  auto get = [&](const char* key) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string() : it->second;
  };
  if (get("source_config_sha256") != now.config_sha256) return "config.json changed";
  if (get("source_weight_map_sha256") != now.weight_map_sha256) return "weight map changed";
  json recorded = json::parse(get("source_shards"), nullptr, /*allow_exceptions=*/false);
  if (!recorded.is_array()) return "fingerprint differs";
  std::map<std::string, PrepackedSource::Shard> old;
  for (const auto& e : recorded) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_number_unsigned() ||
        !e[2].is_number_integer()) {
      return "fingerprint differs";
    }
    old[e[0].get<std::string>()] = {e[0].get<std::string>(), e[1].get<uint64_t>(),
                                    e[2].get<int64_t>()};
  }
  for (const auto& s : now.shards) {
    auto it = old.find(s.name);
    if (it == old.end()) return fmt::format("shard {} is new", s.name);
    if (it->second.size != s.size || it->second.mtime_ns != s.mtime_ns) {
      return fmt::format("shard {} changed ({} -> {})", s.name, FormatShard(it->second),
                         FormatShard(s));
    }
    old.erase(it);
  }
  if (!old.empty()) return fmt::format("shard {} is gone", old.begin()->first);
  return "fingerprint differs";
}

// Why `meta` does not describe a sidecar for `now`; empty if it does.
std::string StaleReason(const std::map<std::string, std::string>& meta,
                        const PrepackedSource& now) {
  auto get = [&](const char* key) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string("(none)") : it->second;
  };
  if (get("format") != kPrepackedFormat) {
    return fmt::format("format '{}', expected '{}'", get("format"), kPrepackedFormat);
  }
  if (get("layout_version") != std::to_string(kPrepackedLayoutVersion)) {
    return fmt::format("layout version {}, this engine reads {}", get("layout_version"),
                       kPrepackedLayoutVersion);
  }
  if (get("isa_family") != kPrepackedIsaFamily) {
    return fmt::format("built for kernel family '{}', this engine uses '{}'", get("isa_family"),
                       kPrepackedIsaFamily);
  }
  if (get("ranks") != std::to_string(now.ranks)) {
    return fmt::format("built for {} ranks, engine runs {}", get("ranks"), now.ranks);
  }
  if (get("fingerprint") != now.Fingerprint()) return DescribeChange(meta, now);
  if (meta.count(kPrepackedChecksumKey) == 0) {
    return "no data checksum (written by an older dsv4 prepack); rebuild it with "
           "`dsv4 prepack --force`";
  }
  return "";
}

// --- open -------------------------------------------------------------------

PrepackedDecision Decide(PrepackedOutcome outcome, const std::string& path, std::string reason) {
  PrepackedDecision d;
  d.outcome = outcome;
  d.path = path;
  d.reason = std::move(reason);
  return d;
}

Status PreadAll(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return IoError("{}", r == 0 ? "unexpected end of file" : std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

// The sampled resident fraction of `mapped` (mincore over ResidencyWindows).
Result<double> SampleResidency(const MappedFile& mapped) {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t resident = 0;
  uint64_t total = 0;
  std::vector<unsigned char> vec;
  for (const auto& [offset, length] : ResidencyWindows(mapped.size(), page)) {
    const uint64_t pages = (length + page - 1) / page;
    vec.assign(pages, 0);
    void* addr = const_cast<uint8_t*>(mapped.data() + offset);
    if (::mincore(addr, length, vec.data()) != 0) {
      return IoError("{}: mincore failed: {}", mapped.path(), std::strerror(errno));
    }
    for (unsigned char v : vec) resident += v & 1;
    total += pages;
  }
  return total == 0 ? 1.0 : static_cast<double>(resident) / static_cast<double>(total);
}

// The header JSON read with pread (tolerant: no data-region checks yet).
Result<json> ReadHeaderJson(int fd, uint64_t file_size) {
  if (file_size < 8) return DataLoss("{} bytes, shorter than the header length", file_size);
  uint8_t len[8];
  DSV4_RETURN_IF_ERROR(PreadAll(fd, len, 8, 0));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || n > file_size - 8) return DataLoss("header length {} is invalid", n);
  std::string text(n, '\0');
  DSV4_RETURN_IF_ERROR(PreadAll(fd, text.data(), n, 8));
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return DataLoss("header is not a JSON object");
  return root;
}

// Strict checks of an opened sidecar against the plan (fingerprint matched).
Status CheckAgainstPlan(const SafetensorsFile& file, const std::vector<PackedTensor>& plan) {
  const std::string& path = file.path();
  for (const PackedTensor& t : plan) {
    const TensorView* v = file.Find(t.name);
    if (v == nullptr) return DataLoss("{}: tensor '{}' is missing", path, t.name);
    if (v->dtype != t.dtype || v->shape != t.shape) {
      return DataLoss("{}: tensor '{}': expected {} {}, found {} {}", path, t.name,
                      DTypeName(t.dtype), ShapeToString(t.shape), DTypeName(v->dtype),
                      ShapeToString(v->shape));
    }
    if (reinterpret_cast<uintptr_t>(v->data) % kPrepackedAlignment != 0) {
      return DataLoss("{}: tensor '{}' is not {}-byte aligned", path, t.name, kPrepackedAlignment);
    }
  }
  for (const auto& e : file.header().entries) {
    if (StartsWith(e.name, kPadPrefix) &&
        (e.dtype != DType::kU8 || e.shape.size() != 1 || e.end - e.begin >= kPrepackedAlignment)) {
      return DataLoss("{}: padding tensor '{}' is malformed", path, e.name);
    }
  }
  return Status::Ok();
}

// Header names (padding excluded) against the plan's; a one-line difference
// or empty.
std::string NameDifference(const json& header, const std::vector<PackedTensor>& plan) {
  std::set<std::string> expected;
  for (const PackedTensor& t : plan) expected.insert(t.name);
  std::vector<std::string> unexpected;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__" || StartsWith(it.key(), kPadPrefix)) continue;
    if (expected.erase(it.key()) == 0) unexpected.push_back(it.key());
  }
  if (expected.empty() && unexpected.empty()) return "";
  return fmt::format("{} expected tensors missing{}{}, {} unexpected{}{}", expected.size(),
                     expected.empty() ? "" : " (e.g. ",
                     expected.empty() ? "" : *expected.begin() + ")", unexpected.size(),
                     unexpected.empty() ? "" : " (e.g. ",
                     unexpected.empty() ? "" : unexpected.front() + ")");
}

}  // namespace

std::string PrepackedFileName(int64_t ranks) {
  return fmt::format("{}-r{}.safetensors", kPrepackedFormat, ranks);
}

Result<std::vector<PackedTensor>> PlanPrepackedLayout(const Checkpoint& ckpt,
                                                      const ModelConfig& cfg, int64_t ranks) {
  if (ranks < 1 || cfg.n_routed_experts % ranks != 0) {
    return InvalidArgument("{} ranks cannot split {} routed experts evenly", ranks,
                           cfg.n_routed_experts);
  }
  std::vector<PackedTensor> plan;
  std::set<std::string> consumed = {"embed.weight", "head.weight"};
  for (int64_t b = 0; b < cfg.num_layers_with_mtp(); ++b) {
    const std::string blk = b < cfg.num_hidden_layers
                                ? fmt::format("layers.{}", b)
                                : fmt::format("mtp.{}", b - cfg.num_hidden_layers);
    DSV4_RETURN_IF_ERROR(PlanRoutedExperts(ckpt, cfg, blk + ".ffn", ranks, &plan, &consumed));
    PlanSharedExpert(ckpt, blk + ".ffn", &plan, &consumed);
    const std::string tid = blk + ".ffn.gate.tid2eid";
    const TensorView* t = ckpt.Find(tid);
    if (t != nullptr && t->dtype == DType::kI64) {
      plan.push_back(
          {tid, DType::kI32, t->shape, PackedTensor::kI64ToI32, {tid}, cfg.n_routed_experts});
      consumed.insert(tid);
    }
  }
  for (const std::string& name : ckpt.Names()) {
    if (consumed.count(name) != 0) continue;
    const TensorView* v = ckpt.Find(name);
    plan.push_back({name, v->dtype, v->shape, PackedTensor::kConcat, {name}, 0});
  }
  // Name order keeps each block's tensors together in the file.
  std::sort(plan.begin(), plan.end(),
            [](const PackedTensor& a, const PackedTensor& b) { return a.name < b.name; });
  return plan;
}

std::string PrepackedSource::Fingerprint() const {
  json j = {{"format", kPrepackedFormat},        {"layout_version", kPrepackedLayoutVersion},
            {"isa_family", kPrepackedIsaFamily}, {"ranks", ranks},
            {"config_sha256", config_sha256},    {"weight_map_sha256", weight_map_sha256},
            {"shards", ShardsJson(shards)}};
  return Sha256Hex(j.dump());  // std::map keys: sorted; dump(): no spaces
}

Result<PrepackedSource> DescribePrepackedSource(const Checkpoint& ckpt, int64_t ranks) {
  PrepackedSource src;
  src.ranks = ranks;
  DSV4_ASSIGN_OR_RETURN(std::string config, ReadFileToString(ckpt.dir() + "/config.json"));
  src.config_sha256 = Sha256Hex(config);
  // From the shards themselves (not Find/FileOf, which an overlay answers).
  std::map<std::string, std::string> weight_map;
  for (const auto& shard : ckpt.shards()) {
    const std::string file = BaseName(shard->path());
    for (const auto& e : shard->header().entries) weight_map[e.name] = file;
    struct stat st;
    if (::stat(shard->path().c_str(), &st) != 0) {
      return IoError("{}: cannot stat: {}", shard->path(), std::strerror(errno));
    }
    src.shards.push_back({file, static_cast<uint64_t>(st.st_size),
                          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                              static_cast<int64_t>(st.st_mtim.tv_nsec)});
  }
  std::sort(src.shards.begin(), src.shards.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  json wm = json::array();
  for (const auto& [name, file] : weight_map) wm.push_back({name, file});
  src.weight_map_sha256 = Sha256Hex(wm.dump());
  return src;
}

std::map<std::string, std::string> PrepackedMetadata(const PrepackedSource& source) {
  return {{"format", kPrepackedFormat},
          {"layout_version", std::to_string(kPrepackedLayoutVersion)},
          {"isa_family", kPrepackedIsaFamily},
          {"ranks", std::to_string(source.ranks)},
          {"fingerprint", source.Fingerprint()},
          {"source_config_sha256", source.config_sha256},
          {"source_weight_map_sha256", source.weight_map_sha256},
          {"source_shards", ShardsJson(source.shards).dump()},
          {"writer", "dsv4 prepack"}};
}

const char* PrepackedOutcomeName(PrepackedOutcome outcome) {
  switch (outcome) {
    case PrepackedOutcome::kUsed:
      return "used";
    case PrepackedOutcome::kDisabled:
      return "disabled";
    case PrepackedOutcome::kMissing:
      return "missing";
    case PrepackedOutcome::kCold:
      return "cold";
    case PrepackedOutcome::kStale:
      return "stale";
    case PrepackedOutcome::kMismatch:
      return "mismatched";
    case PrepackedOutcome::kUnreadable:
      return "unreadable";
  }
  return "?";
}

bool IsPrepackedSidecarFile(const std::string& path) {
  Result<int> opened = OpenRegularFile(path);
  if (!opened.ok()) return false;
  ScopedFd fd(*opened);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return false;
  Result<json> header = ReadHeaderJson(fd.get(), static_cast<uint64_t>(st.st_size));
  if (!header.ok()) return false;
  auto m = header->find("__metadata__");
  if (m == header->end() || !m->is_object()) return false;
  auto f = m->find("format");
  return f != m->end() && f->is_string() && f->get<std::string>() == kPrepackedFormat;
}

int64_t PrepackedFileRanks(const std::string& path) {
  Result<int> opened = OpenRegularFile(path);
  if (!opened.ok()) return 0;
  ScopedFd fd(*opened);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return 0;
  Result<json> header = ReadHeaderJson(fd.get(), static_cast<uint64_t>(st.st_size));
  if (!header.ok()) return 0;
  auto m = header->find("__metadata__");
  if (m == header->end() || !m->is_object()) return 0;
  auto r = m->find("ranks");
  if (r == m->end() || !r->is_string()) return 0;
  const std::string text = r->get<std::string>();
  if (text.empty() || text.size() > 6 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return std::stoll(text);
}

std::vector<std::pair<uint64_t, uint64_t>> ResidencyWindows(uint64_t file_size,
                                                            uint64_t page_size) {
  std::vector<std::pair<uint64_t, uint64_t>> w;
  if (file_size == 0) return w;
  if (file_size <= kWholeFileBytes) {
    w.emplace_back(0, file_size);
    return w;
  }
  const uint64_t last = (file_size - kWindowBytes) / page_size * page_size;
  for (uint64_t i = 0; i < kNumWindows; ++i) {
    const uint64_t start = last * i / (kNumWindows - 1) / page_size * page_size;
    w.emplace_back(start, std::min(kWindowBytes, file_size - start));
  }
  return w;
}

Result<PrepackedDecision> OpenPrepacked(const std::string& path, const Checkpoint& ckpt,
                                        const ModelConfig& cfg,
                                        const PrepackedOpenOptions& options) {
  using O = PrepackedOutcome;
  // One descriptor throughout: the sidecar is published by rename, and
  // reopening by name could check one inode and map another.
  // Never blocks: a FIFO or device at the path is unreadable, not waited on.
  Result<int> opened = OpenRegularFile(path);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNotFound) {
      return Decide(O::kMissing, path, "no such file");
    }
    return Decide(O::kUnreadable, path, opened.status().message());
  }
  ScopedFd fd(*opened);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Decide(O::kUnreadable, path, "cannot stat");
  const auto size = static_cast<uint64_t>(st.st_size);
  Result<std::unique_ptr<MappedFile>> mapped = MappedFile::MapShared(fd.get(), size, path);
  if (!mapped.ok()) return Decide(O::kUnreadable, path, mapped.status().message());
  Result<double> residency = SampleResidency(**mapped);
  if (!residency.ok()) return Decide(O::kUnreadable, path, residency.status().message());
  if (*residency < options.min_residency) {
    PrepackedDecision d =
        Decide(O::kCold, path,
               fmt::format("sampled page-cache residency {:.1f}%; requires {:.1f}%",
                           100 * *residency, 100 * options.min_residency));
    d.residency = *residency;
    return d;
  }
  Result<json> header = ReadHeaderJson(fd.get(), size);
  if (!header.ok()) return Decide(O::kUnreadable, path, header.status().message());
  std::map<std::string, std::string> meta;
  auto m = header->find("__metadata__");
  if (m != header->end() && m->is_object()) {
    for (auto it = m->begin(); it != m->end(); ++it) {
      if (it->is_string()) meta[it.key()] = it->get<std::string>();
    }
  }
  DSV4_ASSIGN_OR_RETURN(PrepackedSource source, DescribePrepackedSource(ckpt, options.ranks));
  if (std::string why = StaleReason(meta, source); !why.empty()) {
    return Decide(O::kStale, path, why);
  }
  DSV4_ASSIGN_OR_RETURN(std::vector<PackedTensor> plan,
                        PlanPrepackedLayout(ckpt, cfg, options.ranks));
  if (std::string diff = NameDifference(*header, plan); !diff.empty()) {
    return Decide(O::kMismatch, path, diff);
  }
  // From here the file claims to be exactly our sidecar: defects are errors.
  Result<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::FromMapping(std::move(*mapped));
  if (!file.ok()) {
    return DataLoss(
        "prepacked sidecar matches the checkpoint's fingerprint but is corrupt ({}); delete it "
        "or rebuild it with `dsv4 prepack --force`",
        file.status().message());
  }
  Status s = CheckAgainstPlan(**file, plan);
  if (!s.ok()) {
    return DataLoss(
        "prepacked sidecar matches the checkpoint's fingerprint but is corrupt ({}); delete it "
        "or rebuild it with `dsv4 prepack --force`",
        s.message());
  }
  // The data region against the checksum recorded at write time: corruption
  // after `dsv4 prepack` (a stray write, a damaged copy) is an error, never
  // weights used as is.  The file is hot (checked above), so this reads the
  // page cache on every CPU; docs/prepack.md has the cost.
  uint64_t recorded = 0;
  if (!ParseChecksumHex(meta[kPrepackedChecksumKey], &recorded)) {
    return DataLoss(
        "prepacked sidecar {}: metadata '{}' is not 16 hex digits; delete it or rebuild it with "
        "`dsv4 prepack --force`",
        path, kPrepackedChecksumKey);
  }
  const SafetensorsFile& f = **file;
  const uint64_t start = f.header().data_start;
  const auto t0 = std::chrono::steady_clock::now();
  // pread on the descriptor, not the mapping: faulting 1.7 GiB in page by
  // page took 1.2 s on the bench sidecar, reading it 0.2 s (docs/prepack.md).
  // The longest step of a load with a sidecar (the whole file is read):
  // a progress line while it runs (base/progress.h; quiet when short).
  Progress progress("verify " + path.substr(path.find_last_of('/') + 1),
                    static_cast<int64_t>(f.file_size() - start), ProgressUnit::kBytes);
  DSV4_ASSIGN_OR_RETURN(const uint64_t actual,
                        ChecksumOfFile(fd.get(), start, f.file_size() - start, path,
                                       options.verify_threads > 0 ? options.verify_threads
                                                                  : ThreadPool::DefaultThreads(),
                                       &progress));
  progress.Finish();
  if (actual != recorded) {
    return DataLoss(
        "prepacked sidecar {}: data changed after it was written (checksum {}, recorded {}); "
        "delete it or rebuild it with `dsv4 prepack --force`",
        path, ChecksumHex(actual), ChecksumHex(recorded));
  }
  PrepackedDecision d = Decide(O::kUsed, path, "");
  d.residency = *residency;
  d.verify_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  d.file = std::move(*file);
  return d;
}

}  // namespace dsv4::checkpoint
