// Memory-mapped safetensors reader with strict validation.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "...", "shape": [...], "data_offsets": [b, e]}, ...,
//  "__metadata__": {"k": "v"}}, then the data region.  Offsets are relative to
// the data region.  Every error message names the file and, where there is
// one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace dsv4::checkpoint {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data region
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

// Parses and validates the header of a safetensors image of `file_size`
// bytes whose first bytes are `bytes` (at least min(file_size, 8 + N) of them
// must be present; `available` says how many are).  `file` names the file in
// messages.  Pure function: the libFuzzer target drives it directly.
Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t available,
                                                 uint64_t file_size, const std::string& file);

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // The same over an existing mapping of the whole file (e.g. one made with
  // MappedFile::MapShared from an already opened descriptor).
  static Result<std::unique_ptr<SafetensorsFile>> FromMapping(std::unique_ptr<MappedFile> mapped);

  const std::string& path() const { return file_->path(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // nullptr if the file has no such tensor.
  const TensorView* Find(std::string_view name) const;
  std::vector<std::string> Names() const;
  uint64_t file_size() const { return file_->size(); }
  // The whole mapped file (file_size() bytes; null when empty).
  const uint8_t* mapped_data() const { return file_->data(); }

  // Expert parallelism (docs/scale-out.md "Memory"): unmaps the whole pages
  // inside the byte ranges [begin, end) of the file (merged first, so pages
  // spanning two adjacent ranges go too; partial pages at the edges stay) and
  // drops the views of `forget` from Find and Names.  REQUIRES: nothing reads
  // those bytes again.  Returns the bytes unmapped by this call.
  uint64_t Unmap(std::vector<std::pair<uint64_t, uint64_t>> ranges,
                 const std::vector<std::string>& forget);
  // Drops this process's resident pages among the whole pages inside
  // [begin, end) of the file (madvise MADV_DONTNEED on the read-only file
  // mapping): the bytes stay mapped and readable, faulted in again from the
  // file on a read.  For tensors the model copied at load, whose mapped pages
  // would otherwise count twice in its resident set.  Returns the bytes
  // dropped.
  uint64_t DropResident(uint64_t begin, uint64_t end) const;
  // Bytes of the file still mapped: file_size() less what Unmap released.
  uint64_t mapped_bytes() const { return file_->size() - unmapped_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, TensorView, std::less<>> views_;
  uint64_t unmapped_ = 0;
};

}  // namespace dsv4::checkpoint
