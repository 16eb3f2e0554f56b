#include "checkpoint/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace dsv4::checkpoint {

namespace {

using nlohmann::json;

// Real checkpoints have headers of a few MB; anything beyond this is corrupt.
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

Status ParseEntry(const std::string& file, const std::string& name, const json& v,
                  SafetensorsEntry* out) {
  auto err = [&](const std::string& what) {
    return DataLoss("{}: tensor '{}': {}", file, name, what);
  };
  if (!v.is_object()) return err("header entry is not an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      return err("unknown header field '" + it.key() + "'");
    }
  }
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return err("missing or non-string 'dtype'");
  auto parsed = ParseDType(dt->get<std::string>());
  if (!parsed) return err("unsupported dtype '" + dt->get<std::string>() + "'");
  out->dtype = *parsed;
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return err("missing or non-array 'shape'");
  out->shape.clear();
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) return err("shape has a non-integer or negative dimension");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > (1ull << 40)) return err("shape dimension too large");
    if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim / 8) {
      return err("shape overflows");
    }
    numel *= dim;
    out->shape.push_back(static_cast<int64_t>(dim));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return err("'data_offsets' must be two non-negative integers");
  }
  out->begin = (*off)[0].get<uint64_t>();
  out->end = (*off)[1].get<uint64_t>();
  if (out->end < out->begin) return err("data_offsets end before begin");
  const uint64_t expect = numel * DTypeSize(out->dtype);
  if (out->end - out->begin != expect) {
    return err("byte size " + std::to_string(out->end - out->begin) + " does not match " +
               std::string(DTypeName(out->dtype)) + " x " + ShapeToString(out->shape) + " = " +
               std::to_string(expect) + " bytes");
  }
  out->name = name;
  return Status::Ok();
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t available,
                                                 uint64_t file_size, const std::string& file) {
  if (file_size < 8 || available < 8) {
    return DataLoss("{}: truncated: {} bytes, shorter than the 8-byte header length", file,
                    file_size);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes) return DataLoss("{}: header length {} is implausible", file, n);
  if (n > file_size - 8) {
    return DataLoss("{}: header length {} exceeds the file size {}", file, n, file_size);
  }
  if (available < 8 + n) return DataLoss("{}: header not fully available", file);
  const char* text = reinterpret_cast<const char*>(bytes + 8);

  // Duplicate keys are legal JSON but ambiguous here: detect them at depth 1.
  std::set<std::string> seen;
  std::string duplicate;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1) {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = std::move(key);
    }
    return true;
  };
  json root = json::parse(text, text + n, cb, /*allow_exceptions=*/false);
  if (root.is_discarded()) return DataLoss("{}: header is not valid JSON", file);
  if (!root.is_object()) return DataLoss("{}: header JSON is not an object", file);
  if (!duplicate.empty())
    return DataLoss("{}: tensor '{}' appears twice in the header", file, duplicate);

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_null()) continue;
      if (!it->is_object()) return DataLoss("{}: __metadata__ is not an object", file);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return DataLoss("{}: __metadata__ value '{}' is not a string", file, m.key());
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    if (it.key().empty()) return DataLoss("{}: empty tensor name", file);
    SafetensorsEntry e;
    DSV4_RETURN_IF_ERROR(ParseEntry(file, it.key(), *it, &e));
    if (e.end > data_size) {
      return DataLoss(
          "{}: tensor '{}': data_offsets [{}, {}] outside the data region of {} bytes "
          "(file truncated?)",
          file, e.name, e.begin, e.end, data_size);
    }
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Like the reference safetensors library, require the tensors to tile the
  // data region exactly: no overlap (zero-size tensors may share an offset),
  // no gap, no trailing bytes.  Anything else is a truncated or spliced file.
  uint64_t covered = 0;
  for (size_t i = 0; i < h.entries.size(); ++i) {
    const auto& cur = h.entries[i];
    if (cur.begin < covered) {
      return DataLoss("{}: tensor '{}' overlaps tensor '{}'", file, cur.name,
                      h.entries[i - 1].name);
    }
    if (cur.begin > covered) {
      return DataLoss(
          "{}: tensor '{}' starts at byte {} of the data region, leaving a gap after "
          "byte {}",
          file, cur.name, cur.begin, covered);
    }
    covered = cur.end;
  }
  if (covered != data_size) {
    return DataLoss("{}: data region is {} bytes but the tensors cover {} (trailing bytes)", file,
                    data_size, covered);
  }
  return h;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  return FromMapping(std::move(mapped));
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromMapping(
    std::unique_ptr<MappedFile> mapped) {
  DSV4_ASSIGN_OR_RETURN(auto header, ParseSafetensorsHeader(mapped->data(), mapped->size(),
                                                            mapped->size(), mapped->path()));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->file_ = std::move(mapped);
  f->header_ = std::move(header);
  const uint8_t* base = f->file_->data() + f->header_.data_start;
  for (const auto& e : f->header_.entries) {
    TensorView v;
    v.dtype = e.dtype;
    v.shape = e.shape;
    v.data = base + e.begin;
    f->views_.emplace(e.name, std::move(v));
  }
  return f;
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(views_.size());
  for (const auto& [k, v] : views_) names.push_back(k);
  return names;
}

uint64_t SafetensorsFile::Unmap(std::vector<std::pair<uint64_t, uint64_t>> ranges,
                                const std::vector<std::string>& forget) {
  for (const std::string& name : forget) views_.erase(name);
  if (file_->data() == nullptr) return 0;
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& [b, e] : ranges) {
    if (b >= e) continue;
    if (!merged.empty() && b <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, e);
    } else {
      merged.emplace_back(b, e);
    }
  }
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<uintptr_t>(file_->data());  // page-aligned (mmap)
  uint64_t released = 0;
  for (const auto& [b, e] : merged) {
    const uint64_t first = (b + page - 1) / page * page;
    const uint64_t last = std::min<uint64_t>(e, file_->size()) / page * page;
    if (first >= last) continue;
    // Not munmap: the kernel could place a later mapping (a thread's stack)
    // in the hole, and MappedFile's destructor unmaps the whole original
    // range.  An inaccessible anonymous reservation replaces the file pages
    // in place instead: they leave the process (no file page, no resident
    // byte), the addresses stay ours, and a stray read faults as before.
    void* at = reinterpret_cast<void*>(base + first);
    if (::mmap(at, last - first, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
               -1, 0) == at) {
      released += last - first;
    }
  }
  unmapped_ += released;
  return released;
}

uint64_t SafetensorsFile::DropResident(uint64_t begin, uint64_t end) const {
  if (file_->data() == nullptr) return 0;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<uintptr_t>(file_->data());  // page-aligned (mmap)
  const uint64_t first = (begin + page - 1) / page * page;
  const uint64_t last = std::min<uint64_t>(end, file_->size()) / page * page;
  if (first >= last) return 0;
  // Only the mapping goes: the file stays the pages' source (no anonymous
  // memory was ever written here), so a later read sees the same bytes.
  if (::madvise(reinterpret_cast<void*>(base + first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

}  // namespace dsv4::checkpoint
