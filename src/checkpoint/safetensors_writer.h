// Streaming safetensors writer and atomic checkpoint-file helpers (used by
// `dsv4 make-tiny` and the converter).
//
// Files are written to "<dir>/.<name>.tmp", fsync'ed and renamed into place
// (then the directory is fsync'ed), so a crash never leaves a half-written
// file under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace dsv4::checkpoint {

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
};

// Non-default layout and publication choices (the prepacked sidecar uses all
// three, docs/prepack.md).
struct SafetensorsWriterOptions {
  // 0: the default layout below.  Else a power of two: tensors in declaration
  // order, each starting at a multiple of `alignment` bytes from the start of
  // the file.  Safetensors forbids holes in the data region, so gaps are
  // filled with zero-filled U8 tensors named "__pad.<k>" (k = 0, 1, ...).
  uint64_t alignment = 0;
  // Temp file "<dir>/.<name>.XXXXXX.tmp" (mkstemps) instead of
  // "<dir>/.<name>.tmp": concurrent writers of one path never share it.
  bool unique_temp = false;
  // Permission bits of the published file; -1 keeps open()'s 0644 & ~umask
  // (a unique temp file gets 0600 from mkstemps, so set it then).
  int mode = -1;
  // Finish() computes the checksum (base/checksum.h) of the data region by
  // reading the temp file back before publishing it; data_checksum() returns
  // it.  Corruption after this point is what a later verification detects.
  bool data_checksum = false;
  // With data_checksum: also store the checksum (16 hex digits) in the
  // header's __metadata__ under this key.  Create() reserves the value and
  // Finish() overwrites it in place, so the header's length never changes.
  std::string checksum_metadata_key;
};

// Usage: Create() with every tensor's name, dtype and shape (this fixes the
// header); then Write() each tensor's bytes, in one or more sequential chunks
// per tensor, tensors in any order; then Finish().  A writer destroyed before
// a successful Finish() removes its temp file.
//
// Layout: the header JSON is space-padded so the data region starts at a
// multiple of 8 bytes, and tensors are laid out by element size, largest
// first (stable otherwise), so every tensor starts at a multiple of its
// element size: mapped views of the file are naturally aligned.  Data goes to
// its final offset with pwrite, so writing order does not constrain layout.
class SafetensorsWriter {
 public:
  // Errors: empty, reserved ("__metadata__") or duplicate names, negative
  // dimensions, byte sizes that overflow, or I/O failures.
  static Result<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, std::vector<SafetensorsTensorInfo> tensors,
      const std::map<std::string, std::string>& metadata = {},
      const SafetensorsWriterOptions& options = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends `nbytes` to tensor `name`, a declared tensor (zero-byte writes
  // are no-ops, so zero-size tensors need no call).  Writing more bytes than
  // the tensor holds is an error.  After any error the writer is failed and
  // Finish() refuses to publish the file.
  Status Write(std::string_view name, const void* data, size_t nbytes);

  // Fails unless every tensor is complete.  Computes the data checksum when
  // asked, runs `before_publish` (if set; an error there publishes nothing),
  // then fsync, rename to the final path, fsync the directory.
  Status Finish(const std::function<Status()>& before_publish = {});

  // The data region's checksum: valid once Finish() has computed it (from
  // inside before_publish on), when options.data_checksum was set.
  uint64_t data_checksum() const { return checksum_; }

  // Bytes of tensor data (sum over tensors, padding included), i.e. what an
  // index's total_size counts.
  uint64_t data_bytes() const { return data_bytes_; }
  // The temp file written until Finish() publishes it.
  const std::string& temp_path() const { return temp_path_; }

 private:
  SafetensorsWriter() = default;
  Status Fail(Status s);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::vector<SafetensorsTensorInfo> tensors_;  // declaration order
  std::map<std::string, size_t, std::less<>> by_name_;
  std::vector<uint64_t> sizes_;    // bytes per tensor
  std::vector<uint64_t> offsets_;  // file offset of each tensor's first byte
  std::vector<uint64_t> written_;  // bytes written per tensor
  std::vector<bool> done_;         // complete (distinguishes zero-byte tensors)
  uint64_t data_bytes_ = 0;
  uint64_t data_start_ = 0;  // file offset of the data region
  bool want_checksum_ = false;
  uint64_t checksum_offset_ = 0;  // file offset of the reserved metadata value; 0 = none
  uint64_t checksum_ = 0;
  bool failed_ = false;
  bool finished_ = false;
};

// One tensor with its bytes, for the one-shot helper below.
struct SafetensorsTensorData {
  std::string name;
  DType dtype;
  Shape shape;
  const void* data = nullptr;  // numel * DTypeSize(dtype) bytes
};

// Writes a whole file in one call (Create + Write each + Finish).
Status WriteSafetensorsFile(const std::string& path,
                            const std::vector<SafetensorsTensorData>& tensors,
                            const std::map<std::string, std::string>& metadata = {});

// Writes <dir>/model.safetensors.index.json atomically:
// {"metadata": {"total_size": N}, "weight_map": {tensor: shard, ...}}.
// Every shard name must pass IsSafeShardName.
Status WriteIndexJson(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                      uint64_t total_size);

// Replaces `path` with `contents` atomically (temp file, fsync, rename, fsync dir).
Status WriteFileAtomic(const std::string& path, std::string_view contents);

}  // namespace dsv4::checkpoint
