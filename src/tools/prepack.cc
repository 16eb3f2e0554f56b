#include "tools/prepack.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "base/file_util.h"
#include "base/progress.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "checkpoint/prepacked.h"
#include "checkpoint/safetensors_writer.h"

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;

constexpr size_t kChunkBytes = 32u << 20;  // copy granularity (bounds the RSS)

// Drops this process's mappings of the pages under [p, p + n) of a read-only
// file mapping: the page cache keeps them, our RSS does not.
void DropPages(const void* p, size_t n) {
  if (n == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advisory
}

Status CopyBytes(const TensorView& v, const std::string& name, checkpoint::SafetensorsWriter& w) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  for (size_t done = 0; done < v.nbytes();) {
    const size_t n = std::min(kChunkBytes, v.nbytes() - done);
    DSV4_RETURN_IF_ERROR(w.Write(name, p + done, n));
    DropPages(p + done, n);
    done += n;
  }
  return Status::Ok();
}

// tid2eid: I64 -> I32 with the loader's checks (ids in [0, max_id), distinct
// per row), so a sidecar never holds a table the checkpoint path would reject.
Status WriteNarrowedIds(const checkpoint::Checkpoint& ckpt, const checkpoint::PackedTensor& t,
                        checkpoint::SafetensorsWriter& w) {
  const TensorView& v = *ckpt.Find(t.sources[0]);
  const int64_t rows = t.shape[0];
  const int64_t cols = t.shape[1];
  const auto* bytes = static_cast<const uint8_t*>(v.data);
  std::vector<int32_t> out(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      int64_t id;
      std::memcpy(&id, bytes + (r * cols + c) * 8, 8);
      if (id < 0 || id >= t.max_id) {
        return DataLoss("{}: tensor {} row {} holds id {} outside [0, {})",
                        ckpt.FileOf(t.sources[0]), t.sources[0], r, id, t.max_id);
      }
      if (std::find(out.begin(), out.begin() + c, id) != out.begin() + c) {
        return DataLoss("{}: tensor {} row {} repeats id {}", ckpt.FileOf(t.sources[0]),
                        t.sources[0], r, id);
      }
      out[static_cast<size_t>(c)] = static_cast<int32_t>(id);
    }
    DSV4_RETURN_IF_ERROR(w.Write(t.name, out.data(), out.size() * sizeof(int32_t)));
  }
  DropPages(v.data, v.nbytes());
  return Status::Ok();
}

Status WriteTensor(const checkpoint::Checkpoint& ckpt, const checkpoint::PackedTensor& t,
                   checkpoint::SafetensorsWriter& w) {
  switch (t.kind) {
    case checkpoint::PackedTensor::kI64ToI32:
      return WriteNarrowedIds(ckpt, t, w);
    case checkpoint::PackedTensor::kConcat:
      break;
  }
  for (const std::string& src : t.sources) {
    DSV4_RETURN_IF_ERROR(CopyBytes(*ckpt.Find(src), t.name, w));
  }
  return Status::Ok();
}

// The files the checkpoint is read from: what the output must never be.
std::vector<std::string> InputFiles(const checkpoint::Checkpoint& ckpt, const std::string& dir) {
  std::vector<std::string> files = {dir + "/config.json", dir + "/model.safetensors.index.json"};
  for (const auto& shard : ckpt.shards()) files.push_back(shard->path());
  return files;
}

uint64_t PackedBytes(const checkpoint::PackedTensor& t) {
  return static_cast<uint64_t>(NumElements(t.shape)) * DTypeSize(t.dtype);
}

// --output must not name an input (by path or by inode: a hard link, a
// symlink, "dir/./shard"), and --force replaces only an earlier sidecar,
// never another file (a checkpoint shard, tokenizer.json).
Status CheckOutput(const std::string& path, const checkpoint::Checkpoint& ckpt,
                   const PrepackOptions& o) {
  std::error_code ec;
  const fs::path canon_out = fs::weakly_canonical(path, ec);
  for (const std::string& in : InputFiles(ckpt, o.model_dir)) {
    std::error_code in_ec;
    const fs::path canon_in = fs::weakly_canonical(in, in_ec);
    if (SameFile(path, in) || (!ec && !in_ec && canon_out == canon_in)) {
      return InvalidArgument(
          "--output {} is the checkpoint's own file {}; refusing to overwrite an input", path, in);
    }
  }
  DSV4_ASSIGN_OR_RETURN(const bool exists, PathExists(path));
  if (!exists) return Status::Ok();
  if (!o.force) return InvalidArgument("{} already exists (pass --force to replace it)", path);
  if (!checkpoint::IsPrepackedSidecarFile(path)) {
    return InvalidArgument(
        "{} exists and is not a prepacked sidecar (no '{}' format in its header); --force "
        "replaces only a sidecar, remove this file yourself if it is a damaged one",
        path, checkpoint::kPrepackedFormat);
  }
  return Status::Ok();
}

// The sidecar is written whole before it is published: refuse up front when
// the output's file system cannot hold it (its tensors plus one alignment
// pad each), instead of failing mid-write with a full disk.
Status CheckFreeSpace(const std::string& path, const std::vector<checkpoint::PackedTensor>& plan) {
  uint64_t need = 0;
  for (const checkpoint::PackedTensor& t : plan)
    need += PackedBytes(t) + checkpoint::kPrepackedAlignment;
  const std::string dir =
      fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : std::string(".");
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return Status::Ok();  // the write reports it
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < need) {
    return ResourceExhausted("{}: the sidecar needs {:.2f} GiB but {} has {:.2f} GiB free", path,
                             static_cast<double>(need) / (1ull << 30), dir,
                             static_cast<double>(free_bytes) / (1ull << 30));
  }
  return Status::Ok();
}

}  // namespace

Result<PrepackSummary> Prepack(const PrepackOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  DSV4_ASSIGN_OR_RETURN(checkpoint::ModelConfig cfg,
                        checkpoint::LoadModelConfig(options.model_dir));
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::Checkpoint> ckpt,
                        checkpoint::Checkpoint::Open(options.model_dir));
  const std::string path = options.output.empty() ? options.model_dir + "/" +
                                                        checkpoint::PrepackedFileName(options.ranks)
                                                  : options.output;
  DSV4_RETURN_IF_ERROR(CheckOutput(path, *ckpt, options));
  struct stat st;
  // Fingerprint first: what the sidecar claims to derive from is what was
  // there when packing started (and is checked again before publishing).
  DSV4_ASSIGN_OR_RETURN(checkpoint::PrepackedSource source,
                        checkpoint::DescribePrepackedSource(*ckpt, options.ranks));
  DSV4_ASSIGN_OR_RETURN(std::vector<checkpoint::PackedTensor> plan,
                        checkpoint::PlanPrepackedLayout(*ckpt, cfg, options.ranks));
  std::vector<checkpoint::SafetensorsTensorInfo> infos;
  for (const checkpoint::PackedTensor& t : plan) infos.push_back({t.name, t.dtype, t.shape});
  DSV4_RETURN_IF_ERROR(CheckFreeSpace(path, plan));
  checkpoint::SafetensorsWriterOptions wo;
  wo.alignment = checkpoint::kPrepackedAlignment;
  wo.unique_temp = true;
  wo.data_checksum = true;  // verified by every load (docs/prepack.md)
  wo.checksum_metadata_key = checkpoint::kPrepackedChecksumKey;
  if (::stat(ckpt->shards().front()->path().c_str(), &st) == 0) wo.mode = st.st_mode & 0666;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::SafetensorsWriter> writer,
                        checkpoint::SafetensorsWriter::Create(
                            path, infos, checkpoint::PrepackedMetadata(source), wo));
  // Progress over the bytes written (base/progress.h: a live line on a
  // terminal, a plain line every 10 s otherwise); the caller prints the summary.
  uint64_t total_bytes = 0;
  for (const checkpoint::PackedTensor& t : plan) total_bytes += PackedBytes(t);
  std::optional<Progress> progress;
  if (options.progress) {
    progress.emplace("prepack", static_cast<int64_t>(total_bytes), ProgressUnit::kBytes);
  }
  for (const checkpoint::PackedTensor& t : plan) {
    DSV4_RETURN_IF_ERROR(WriteTensor(*ckpt, t, *writer));
    if (progress) progress->Add(static_cast<int64_t>(PackedBytes(t)));
  }
  if (progress) progress->Finish();
  DSV4_ASSIGN_OR_RETURN(checkpoint::PrepackedSource after,
                        checkpoint::DescribePrepackedSource(*ckpt, options.ranks));
  if (after.Fingerprint() != source.Fingerprint()) {
    return FailedPrecondition(
        "{}: the checkpoint changed while packing; nothing was written (run prepack again)",
        options.model_dir);
  }
  DSV4_RETURN_IF_ERROR(writer->Finish());
  PrepackSummary summary;
  summary.path = path;
  summary.num_tensors = static_cast<int64_t>(plan.size());
  if (::stat(path.c_str(), &st) == 0) summary.bytes = static_cast<uint64_t>(st.st_size);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace dsv4::tools
