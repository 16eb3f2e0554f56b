// Streaming conversion of one shard.  The source is read with pread in one
// sequential pass over the file (header, tensors in data-offset order, any
// gaps), so the SHA-256 fingerprint of the source shard costs no extra read;
// each tensor goes through buffers of about kChunkBytes source bytes, so peak
// memory is a few MB whatever the shard or tensor size (docs/convert.md).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/file_util.h"
#include "base/sha256.h"
#include "tensor/numeric.h"
#include "tools/convert_internal.h"
#include "tools/convert_numerics.h"

namespace dsv4::tools::convert_internal {

namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;  // source bytes per step
constexpr size_t kHashChunk = size_t{8} << 20;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status PreadAll(int fd, uint8_t* dst, size_t size, uint64_t offset, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, dst, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return IoError("{}: read at offset {} failed: {}", path, offset,
                     n == 0 ? "unexpected end of file" : std::strerror(errno));
    }
    dst += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// Reads one file strictly front to back, hashing every byte.
class SequentialReader {
 public:
  SequentialReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status Read(uint8_t* dst, size_t size) {
    DSV4_RETURN_IF_ERROR(PreadAll(fd_, dst, size, pos_, path_));
    hash_.Update(dst, size);
    pos_ += size;
    return Status::Ok();
  }
  // Hashes [pos, offset) without keeping it (gaps, consumed bytes).
  Status SkipTo(uint64_t offset, std::vector<uint8_t>& scratch) {
    while (pos_ < offset) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(offset - pos_, scratch.size()));
      DSV4_RETURN_IF_ERROR(Read(scratch.data(), n));
    }
    return Status::Ok();
  }
  uint64_t pos() const { return pos_; }
  std::string FinishHex() { return hash_.FinishHex(); }

 private:
  int fd_;
  std::string path_;
  uint64_t pos_ = 0;
  Sha256 hash_;
};

// Never blocks: a FIFO in place of a shard is an error (base/file_util.h).
Result<int> OpenRead(const std::string& path) { return OpenRegularFile(path); }

// The whole source scale tensor (small: 1/16384 of an FP8 weight, 1/16 of an
// MXFP4 one), from whatever shard holds it.
Result<std::vector<uint8_t>> ReadScale(const Source& src, const std::string& name) {
  const auto& [shard, entry] = src.where.at(name);
  const SourceShard& s = src.shards[shard];
  DSV4_ASSIGN_OR_RETURN(const int raw, OpenRead(s.path));
  Fd fd(raw);
  std::vector<uint8_t> bytes(entry->end - entry->begin);
  DSV4_RETURN_IF_ERROR(PreadAll(fd.get(), bytes.data(), bytes.size(),
                                s.st->header().data_start + entry->begin, s.path));
  return bytes;
}

struct Buffers {
  std::vector<uint8_t> src;
  std::vector<float> f32;
  std::vector<int8_t> i8;
  std::vector<bf16> b16;
};

Status ConvertWeight(const Source& src, const TensorJob& job, SequentialReader& in,
                     checkpoint::SafetensorsWriter& out, Buffers& buf) {
  const int64_t rows = job.out_shape[0];
  const int64_t cols = job.out_shape[1];
  const int64_t src_row_bytes = job.action == Action::kFp4ToInt8 ? cols / 2 : cols;
  DSV4_ASSIGN_OR_RETURN(const std::vector<uint8_t> scale, ReadScale(src, job.scale_name));
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes) / src_row_bytes);
  std::vector<float> row_scales;  // [rows], INT8 only
  for (int64_t r0 = 0; r0 < rows; r0 += step) {
    const int64_t n = std::min(step, rows - r0);
    const size_t elems = static_cast<size_t>(n * cols);
    buf.src.resize(static_cast<size_t>(n * src_row_bytes));
    buf.f32.resize(elems);
    DSV4_RETURN_IF_ERROR(in.Read(buf.src.data(), buf.src.size()));
    if (job.action == Action::kFp4ToInt8) {
      DequantFp4Rows(buf.src.data(), scale.data() + r0 * (cols / 32), cols, n, buf.f32.data());
    } else {
      DequantFp8Rows(buf.src.data(), scale.data(), cols, r0, r0 + n, buf.f32.data());
    }
    if (job.action == Action::kFp8ToBf16) {
      buf.b16.resize(elems);
      for (size_t i = 0; i < elems; ++i) buf.b16[i] = F32ToBf16(buf.f32[i]);
      DSV4_RETURN_IF_ERROR(out.Write(job.name, buf.b16.data(), elems * sizeof(bf16)));
      continue;
    }
    buf.i8.resize(elems);
    for (int64_t r = 0; r < n; ++r) {
      row_scales.push_back(
          QuantizeRowInt8(buf.f32.data() + r * cols, cols, buf.i8.data() + r * cols));
    }
    DSV4_RETURN_IF_ERROR(out.Write(job.name, buf.i8.data(), elems));
  }
  if (job.action == Action::kFp8ToBf16) return Status::Ok();
  return out.Write(job.scale_name, row_scales.data(), row_scales.size() * sizeof(float));
}

Status CopyTensor(const TensorJob& job, uint64_t size, SequentialReader& in,
                  checkpoint::SafetensorsWriter& out, Buffers& buf) {
  buf.src.resize(kChunkBytes);
  for (uint64_t done = 0; done < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, size - done));
    DSV4_RETURN_IF_ERROR(in.Read(buf.src.data(), n));
    DSV4_RETURN_IF_ERROR(out.Write(job.name, buf.src.data(), n));
    done += n;
  }
  return Status::Ok();
}

}  // namespace

Status ConvertShard(const Source& src, const ShardPlan& shard, const std::string& out_dir,
                    const ShardDigestsFn& before_publish) {
  const size_t index =
      static_cast<size_t>(std::find_if(src.shards.begin(), src.shards.end(),
                                       [&](const SourceShard& s) { return s.file == shard.file; }) -
                          src.shards.begin());
  const SourceShard& s = src.shards.at(index);
  DSV4_ASSIGN_OR_RETURN(const int raw, OpenRead(s.path));
  Fd fd(raw);
  SequentialReader in(fd.get(), s.path);
  checkpoint::SafetensorsWriterOptions wo;
  wo.data_checksum = true;  // recorded in the marker, verified by --resume
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::SafetensorsWriter> out,
                        checkpoint::SafetensorsWriter::Create(
                            out_dir + "/" + shard.file, shard.outputs, {{"format", "pt"}}, wo));
  Buffers buf;
  std::vector<uint8_t> scratch(kChunkBytes);
  const uint64_t data_start = s.st->header().data_start;
  for (const TensorJob& job : shard.jobs) {
    const checkpoint::SafetensorsEntry& e = *src.where.at(job.name).second;
    DSV4_RETURN_IF_ERROR(in.SkipTo(data_start + e.begin, scratch));
    switch (job.action) {
      case Action::kDropScale:
        DSV4_RETURN_IF_ERROR(in.SkipTo(data_start + e.end, scratch));
        break;
      case Action::kCopy:
        DSV4_RETURN_IF_ERROR(CopyTensor(job, e.end - e.begin, in, *out, buf));
        break;
      default:
        DSV4_RETURN_IF_ERROR(ConvertWeight(src, job, in, *out, buf));
        break;
    }
  }
  DSV4_RETURN_IF_ERROR(in.SkipTo(s.st->file_size(), scratch));  // trailing bytes, if any
  const std::string sha = in.FinishHex();
  return out->Finish([&] { return before_publish(sha, out->data_checksum()); });
}

Result<std::string> HashFile(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(const int raw, OpenRead(path));
  Fd fd(raw);
  Sha256 hash;
  std::vector<uint8_t> chunk(kHashChunk);
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("{}: read failed: {}", path, std::strerror(errno));
    if (n == 0) break;
    hash.Update(chunk.data(), static_cast<size_t>(n));
  }
  return hash.FinishHex();
}

}  // namespace dsv4::tools::convert_internal
