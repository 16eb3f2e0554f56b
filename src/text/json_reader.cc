#include "text/json_reader.h"

#include <fmt/format.h>

#include <unordered_map>
#include <utility>
#include <vector>

#include "text/utf8.h"

namespace dsv4::text {
namespace {

using Object = OrderedJson::object_t;  // a std::vector of (key, value) pairs
using Array = OrderedJson::array_t;

constexpr size_t kNotFound = static_cast<size_t>(-1);
// Objects up to this many members find duplicate keys by a scan (cheaper than
// hashing for the small objects requests are made of); larger ones by an index.
constexpr size_t kIndexFrom = 16;
constexpr size_t kMaxKeyInPath = 64;
constexpr size_t kMaxSyntaxMessage = 300;

// nlohmann's SAX interface (nlohmann/detail/input/json_sax.hpp), building an
// OrderedJson with an explicit stack of open containers.
class BoundedBuilder {
 public:
  BoundedBuilder(const JsonLimits& limits, OrderedJson* out) : limits_(limits), out_(out) {}

  bool null() { return Scalar(OrderedJson(nullptr)); }
  bool boolean(bool v) { return Scalar(OrderedJson(v)); }
  bool number_integer(OrderedJson::number_integer_t v) { return Scalar(OrderedJson(v)); }
  bool number_unsigned(OrderedJson::number_unsigned_t v) { return Scalar(OrderedJson(v)); }
  bool number_float(OrderedJson::number_float_t v, const std::string&) {
    return Scalar(OrderedJson(v));
  }
  bool string(std::string& s) {
    if (s.size() > limits_.max_string_bytes) {
      return Fail(Path(PendingSegment()),
                  fmt::format("JSON string longer than {} bytes", limits_.max_string_bytes));
    }
    return Scalar(OrderedJson(std::move(s)));
  }
  bool binary(OrderedJson::binary_t&) { return false; }  // JSON text has no binary values
  bool start_object(size_t) { return Open(OrderedJson::object()); }
  bool start_array(size_t) { return Open(OrderedJson::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(std::string& k) {
    if (k.size() > limits_.max_string_bytes) {
      return Fail(Path(""),
                  fmt::format("JSON object key longer than {} bytes", limits_.max_string_bytes));
    }
    stack_.back().key = std::move(k);
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    // ex.what() = "[json.exception.parse_error.101] parse error at line 1, column 2: ...;
    // last read: '<the bad token>'": drop the prefix; the token is client text, so
    // keep the message short and valid UTF-8.
    std::string what = ex.what();
    if (const size_t p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
    if (what.size() > kMaxSyntaxMessage) {
      what.resize(kMaxSyntaxMessage);
      what.resize(what.size() - IncompleteUtf8Suffix(what));
      what += "...";
    }
    error_ = JsonReadError{false, "", fmt::format("byte {}: {}", position, SanitizeUtf8(what))};
    return false;
  }

  std::optional<JsonReadError> TakeError() { return std::move(error_); }

 private:
  struct Frame {
    OrderedJson* value;  // the open object or array (a slot in its parent, or *out_)
    std::string key;     // object: the key of the value being read
    // Object members, moved into *value when the object closes.  Not in the
    // ordered_map directly: its element, pair<const string, json>, cannot be
    // moved without a throwing copy of the key, so a growing ordered_map
    // copies its members, each a recursive deep copy of the value (a deep
    // member followed by a sibling key overflowed the stack that way).
    std::vector<std::pair<std::string, OrderedJson>> members;
    // object with >= kIndexFrom members: key -> position
    std::unordered_map<std::string, size_t> index;
    std::string segment;  // how the parent names it (".key" or "[i]"), for paths
  };

  bool Scalar(OrderedJson&& v) { return Insert(std::move(v)) != nullptr; }

  bool Open(OrderedJson&& container) {
    if (stack_.size() >= limits_.max_depth) {
      return Fail(Path(PendingSegment()),
                  fmt::format("JSON nested deeper than {} levels", limits_.max_depth));
    }
    // Frame i (i >= 1) holds path segment i; only the first kJsonPathSegments
    // are ever printed.
    std::string segment = stack_.size() <= kJsonPathSegments ? PendingSegment() : "";
    OrderedJson* slot = Insert(std::move(container));
    if (slot == nullptr) return false;
    stack_.push_back(Frame{slot, {}, {}, {}, std::move(segment)});
    return true;
  }

  bool Close() {
    Frame& f = stack_.back();
    if (f.value->is_object()) {
      Object& o = f.value->get_ref<Object&>();
      o.reserve(f.members.size());  // no reallocation below: nothing is copied
      for (auto& [k, v] : f.members) o.emplace_back(std::move(k), std::move(v));
    }
    stack_.pop_back();
    return true;
  }

  // Adds v where the parser is: the root, the next array element, or the
  // member for the pending key.  Null when a limit stops it.
  OrderedJson* Insert(OrderedJson&& v) {
    if (stack_.empty()) {
      *out_ = std::move(v);
      return out_;
    }
    Frame& f = stack_.back();
    if (f.value->is_array()) {
      Array& a = f.value->get_ref<Array&>();
      if (a.size() >= limits_.max_array_elements) {
        Fail(Path(""),
             fmt::format("JSON array with more than {} elements", limits_.max_array_elements));
        return nullptr;
      }
      a.push_back(std::move(v));
      return &a.back();
    }
    // Appended without ordered_map's insert, which searches linearly for the
    // key first (what made OrderedJson::parse quadratic).
    auto& m = f.members;
    if (const size_t pos = Find(f); pos != kNotFound) {
      // A duplicate key keeps its first position and takes the last value.
      m[pos].second = std::move(v);
      return &m[pos].second;
    }
    if (m.size() >= limits_.max_object_members) {
      Fail(Path(""),
           fmt::format("JSON object with more than {} members", limits_.max_object_members));
      return nullptr;
    }
    m.emplace_back(std::move(f.key), std::move(v));
    if (m.size() == kIndexFrom) {
      for (size_t i = 0; i < m.size(); ++i) f.index.emplace(m[i].first, i);
    } else if (m.size() > kIndexFrom) {
      f.index.emplace(m.back().first, m.size() - 1);
    }
    return &m.back().second;
  }

  static size_t Find(const Frame& f) {
    if (!f.index.empty()) {
      const auto it = f.index.find(f.key);
      return it == f.index.end() ? kNotFound : it->second;
    }
    for (size_t i = 0; i < f.members.size(); ++i) {
      if (f.members[i].first == f.key) return i;
    }
    return kNotFound;
  }

  // The segment of the value the parser is about to add.
  std::string PendingSegment() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    if (f.value->is_array()) return fmt::format("[{}]", f.value->size());
    if (f.key.size() <= kMaxKeyInPath) return "." + f.key;
    std::string k = f.key.substr(0, kMaxKeyInPath);
    k.resize(k.size() - IncompleteUtf8Suffix(k));
    return "." + k + "...";
  }

  // The path of the open container, plus `pending` below it.
  std::string Path(const std::string& pending) const {
    std::string p;
    size_t n = 0;
    bool truncated = false;
    for (size_t i = 1; i < stack_.size() && !truncated; ++i, ++n) {
      if (n == kJsonPathSegments) {
        truncated = true;
      } else {
        p += stack_[i].segment;
      }
    }
    if (!pending.empty() && !truncated) {
      if (n == kJsonPathSegments) {
        truncated = true;
      } else {
        p += pending;
      }
    }
    if (truncated) p += "...";
    if (!p.empty() && p[0] == '.') p.erase(0, 1);
    return SanitizeUtf8(p);
  }

  bool Fail(std::string path, std::string message) {
    error_ = JsonReadError{true, std::move(path), std::move(message)};
    return false;
  }

  const JsonLimits& limits_;
  OrderedJson* out_;
  std::vector<Frame> stack_;
  std::optional<JsonReadError> error_;
};

}  // namespace

std::optional<JsonReadError> ReadJson(std::string_view text, const JsonLimits& limits,
                                      OrderedJson* out) {
  *out = nullptr;
  BoundedBuilder builder(limits, out);
  const bool ok = OrderedJson::sax_parse(text.data(), text.data() + text.size(), &builder);
  if (ok) return std::nullopt;
  *out = nullptr;
  std::optional<JsonReadError> error = builder.TakeError();
  if (!error) error = JsonReadError{false, "", "invalid JSON"};
  return error;
}

std::string JoinJsonPath(std::string_view base, std::string_view tail) {
  if (tail.empty()) return std::string(base);
  if (base.empty()) return std::string(tail);
  std::string p(base);
  if (tail[0] != '[') p += '.';
  p += tail;
  return p;
}

}  // namespace dsv4::text
