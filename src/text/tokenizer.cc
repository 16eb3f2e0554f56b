#include "text/tokenizer.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/file_util.h"
#include "text/bpe.h"
#include "text/byte_level.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace dsv4::text {
namespace {

using nlohmann::json;

constexpr uint8_t kKnown = 1, kSpecial = 2, kAdded = 4;

// Never blocks on a FIFO; names a symlink loop (base/file_util.h).
Result<std::string> ReadFile(const std::string& path) {
  Result<std::string> text = ReadRegularFile(path);
  if (!text.ok()) return text.status().WithPrefix("tokenizer");
  return text;
}

Result<json> ParseJson(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("tokenizer: {} is not valid JSON", what);
  return j;
}

bool IsNullOrEmptySequence(const json& j) {
  if (j.is_null()) return true;
  return j.is_object() && j.value("type", "") == "Sequence" && j.contains("normalizers") &&
         j["normalizers"].is_array() && j["normalizers"].empty();
}

// Escapes a literal for PCRE2 (Split with {"String": ...}).
std::string QuoteRegex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Status ParseSplit(const json& step, std::vector<std::string>& patterns) {
  if (step.value("behavior", "") != "Isolated" || step.value("invert", false)) {
    return InvalidArgument(
        "tokenizer: pre_tokenizer Split supports only behavior=Isolated, invert=false");
  }
  const json& p = step.value("pattern", json());
  if (p.contains("Regex") && p["Regex"].is_string()) {
    patterns.push_back(p["Regex"].get<std::string>());
  } else if (p.contains("String") && p["String"].is_string()) {
    patterns.push_back(QuoteRegex(p["String"].get<std::string>()));
  } else {
    return InvalidArgument("tokenizer: pre_tokenizer Split has no Regex/String pattern");
  }
  return Status::Ok();
}

Status ParseByteLevelStep(const json& step) {
  if (step.value("add_prefix_space", false) || step.value("use_regex", true)) {
    return InvalidArgument(
        "tokenizer: pre_tokenizer ByteLevel supports only add_prefix_space=false, "
        "use_regex=false");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ParsePreTokenizer(const json& pre) {
  std::vector<std::string> patterns;
  std::vector<json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    for (const json& s : pre.value("pretokenizers", json::array())) steps.push_back(s);
  } else if (pre.is_object()) {
    steps.push_back(pre);
  } else {
    return InvalidArgument("tokenizer: missing pre_tokenizer (byte-level BPE needs ByteLevel)");
  }
  bool byte_level = false;
  for (const json& s : steps) {
    const std::string type = s.value("type", "");
    if (byte_level)
      return InvalidArgument("tokenizer: pre_tokenizer ByteLevel must be the last step");
    if (type == "Split") {
      DSV4_RETURN_IF_ERROR(ParseSplit(s, patterns));
    } else if (type == "ByteLevel") {
      DSV4_RETURN_IF_ERROR(ParseByteLevelStep(s));
      byte_level = true;
    } else {
      return InvalidArgument("tokenizer: unsupported pre_tokenizer step '{}'", type);
    }
  }
  return patterns;
}

Status CheckModel(const json& model) {
  if (model.value("type", "") != "BPE") return InvalidArgument("tokenizer: model.type must be BPE");
  auto is_unset = [&](const char* k) { return !model.contains(k) || model[k].is_null(); };
  if (!is_unset("dropout") && model["dropout"].get<double>() != 0.0) {
    return InvalidArgument("tokenizer: BPE dropout is not supported");
  }
  if (!is_unset("unk_token") || !is_unset("continuing_subword_prefix") ||
      !is_unset("end_of_word_suffix") || model.value("byte_fallback", false)) {
    return InvalidArgument(
        "tokenizer: BPE unk_token / continuing_subword_prefix / "
        "end_of_word_suffix / byte_fallback are not supported");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") ||
      !model["merges"].is_array()) {
    return InvalidArgument("tokenizer: model needs a vocab object and a merges array");
  }
  return Status::Ok();
}

struct Vocab {
  std::vector<std::string> token_bytes;   // [num_base] BPE-reachable entries, raw bytes
  std::vector<std::string> decode_bytes;  // [num_base] what each base id decodes to
  StringIdMap spelling_to_id;             // keys are views into the parsed JSON
};

Result<Vocab> ParseVocab(const json& vocab_json) {
  const ByteLevelMap byte_map;
  Vocab v;
  std::vector<std::pair<std::string_view, int32_t>> spellings;
  spellings.reserve(vocab_json.size());
  for (const auto& [spelling, id_json] : vocab_json.items()) {
    if (!id_json.is_number_integer())
      return InvalidArgument("tokenizer: vocab id of '{}' not an integer", spelling);
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > (1 << 24)) return InvalidArgument("tokenizer: vocab id {} out of range", id);
    if (spelling.empty()) return InvalidArgument("tokenizer: empty vocab entry (id {})", id);
    spellings.emplace_back(spelling, static_cast<int32_t>(id));  // JSON keys are unique
    if (v.decode_bytes.size() <= static_cast<size_t>(id)) v.decode_bytes.resize(id + 1);
    if (!v.decode_bytes[id].empty())
      return InvalidArgument("tokenizer: vocab id {} used twice", id);
    auto bytes = byte_map.ToBytes(spelling);
    if (bytes) {
      if (v.token_bytes.size() <= static_cast<size_t>(id)) v.token_bytes.resize(id + 1);
      v.token_bytes[id] = *bytes;
      v.decode_bytes[id] = std::move(*bytes);
    } else {
      // Outside the byte alphabet (e.g. "<｜begin▁of▁sentence｜>" at ids 0-2):
      // BPE can never produce it; it decodes to its own UTF-8 bytes.
      v.decode_bytes[id] = spelling;
    }
  }
  v.token_bytes.resize(v.decode_bytes.size());
  v.spelling_to_id.Build(spellings);
  return v;
}

Result<std::vector<BpeModel::Merge>> ParseMerges(const json& merges_json, const Vocab& vocab) {
  std::vector<BpeModel::Merge> merges;
  merges.reserve(merges_json.size());
  std::string joined;
  for (const json& m : merges_json) {
    std::string_view a, b;
    if (m.is_string()) {
      const std::string_view s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
        return InvalidArgument("tokenizer: merge '{}' is not two tokens", s);
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      return InvalidArgument("tokenizer: malformed merge entry");
    }
    joined.assign(a);
    joined.append(b);
    const int32_t ia = vocab.spelling_to_id.Find(a), ib = vocab.spelling_to_id.Find(b);
    const int32_t im = vocab.spelling_to_id.Find(joined);
    if (ia < 0 || ib < 0 || im < 0) {
      return InvalidArgument("tokenizer: merge '{} {}' uses a token missing from the vocab", a, b);
    }
    merges.push_back({ia, ib, im});
  }
  return merges;
}

Result<AddedToken> ParseAddedToken(const json& t) {
  if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
      !t.contains("content") || !t["content"].is_string()) {
    return InvalidArgument("tokenizer: added token needs integer id and string content");
  }
  AddedToken a;
  a.id = t["id"].get<int32_t>();
  a.content = t["content"].get<std::string>();
  a.special = t.value("special", false);
  a.normalized = t.value("normalized", !a.special);
  a.lstrip = t.value("lstrip", false);
  a.rstrip = t.value("rstrip", false);
  a.single_word = t.value("single_word", false);
  if (a.id < 0 || a.id > (1 << 24))
    return InvalidArgument("tokenizer: added token id {} out of range", a.id);
  return a;
}

Result<std::vector<AddedToken>> ParseOverlay(const json& o) {
  std::vector<AddedToken> out;
  if (o.contains("added_tokens")) {
    for (const json& t : o["added_tokens"]) {
      DSV4_ASSIGN_OR_RETURN(AddedToken a, ParseAddedToken(t));
      out.push_back(std::move(a));
    }
    return out;
  }
  if (!o.contains("confirmed_v4") || !o["confirmed_v4"].is_object()) {
    return InvalidArgument("tokenizer overlay: expected 'added_tokens' or 'confirmed_v4'");
  }
  std::vector<int64_t> special_ids;
  if (o.contains("confirmed_special_flag")) {
    special_ids = o["confirmed_special_flag"].value("true", std::vector<int64_t>{});
  }
  for (const auto& [content, id] : o["confirmed_v4"].items()) {
    if (!id.is_number_integer())
      return InvalidArgument("tokenizer overlay: id of '{}' not an integer", content);
    AddedToken a;
    a.id = id.get<int32_t>();
    a.content = content;
    a.special = std::find(special_ids.begin(), special_ids.end(), a.id) != special_ids.end();
    // Special tokens are matched on raw text in HF (normalized=false); the
    // others are normalized=true, which is the same here (no normalizer).
    a.normalized = !a.special;
    out.push_back(std::move(a));
  }
  return out;
}

// Applies the overlay: a token replaces any table entry with its id or content.
std::vector<AddedToken> MergeAddedTokens(const std::vector<AddedToken>& base,
                                         const std::vector<AddedToken>& overlay) {
  std::map<int32_t, AddedToken> by_id;
  for (const AddedToken& t : base) by_id[t.id] = t;
  for (const AddedToken& t : overlay) {
    for (auto it = by_id.begin(); it != by_id.end();) {
      it = (it->second.content == t.content && it->first != t.id) ? by_id.erase(it) : std::next(it);
    }
    by_id[t.id] = t;
  }
  std::vector<AddedToken> out;
  for (auto& [id, t] : by_id) out.push_back(std::move(t));
  return out;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path,
                                                   const std::string& overlay_path) {
  DSV4_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::string overlay;
  if (!overlay_path.empty()) {
    DSV4_ASSIGN_OR_RETURN(overlay, ReadFile(overlay_path));
  }
  auto tok = FromJson(text, overlay);
  if (!tok.ok()) return tok.status().WithPrefix(path);
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                       std::string_view overlay_json) {
  DSV4_ASSIGN_OR_RETURN(json j, ParseJson(tokenizer_json, "tokenizer.json"));
  if (!j.is_object()) return InvalidArgument("tokenizer: top level must be an object");
  if (!IsNullOrEmptySequence(j.value("normalizer", json()))) {
    return InvalidArgument("tokenizer: normalizers are not supported (DeepSeek uses none)");
  }
  const json decoder = j.value("decoder", json());
  if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel") {
    return InvalidArgument("tokenizer: decoder must be ByteLevel");
  }
  DSV4_ASSIGN_OR_RETURN(std::vector<std::string> patterns,
                        ParsePreTokenizer(j.value("pre_tokenizer", json())));
  static const json kNoModel = json::object();
  const json& model = j.contains("model") ? j["model"] : kNoModel;  // no copy of the vocab
  DSV4_RETURN_IF_ERROR(CheckModel(model));

  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  DSV4_ASSIGN_OR_RETURN(tok->splitter_, RegexSplitter::Create(patterns));

  // Base vocabulary: byte-level spellings -> raw bytes.
  DSV4_ASSIGN_OR_RETURN(Vocab vocab, ParseVocab(model["vocab"]));
  DSV4_ASSIGN_OR_RETURN(std::vector<BpeModel::Merge> merges, ParseMerges(model["merges"], vocab));
  std::vector<std::string>& token_bytes = vocab.token_bytes;
  std::vector<std::string>& decode_bytes = vocab.decode_bytes;
  const size_t num_base = decode_bytes.size();
  DSV4_ASSIGN_OR_RETURN(tok->bpe_,
                        BpeModel::Create(token_bytes, merges, model.value("ignore_merges", false)));

  // Added tokens (+ overlay).
  const ByteLevelMap byte_map;
  std::vector<AddedToken> added;
  for (const json& t : j.value("added_tokens", json::array())) {
    DSV4_ASSIGN_OR_RETURN(AddedToken a, ParseAddedToken(t));
    added.push_back(std::move(a));
  }
  if (!overlay_json.empty()) {
    DSV4_ASSIGN_OR_RETURN(json o, ParseJson(overlay_json, "added-token overlay"));
    DSV4_ASSIGN_OR_RETURN(std::vector<AddedToken> extra, ParseOverlay(o));
    added = MergeAddedTokens(added, extra);
  }
  DSV4_ASSIGN_OR_RETURN(tok->added_, AddedTokenMatcher::Create(added));

  // The id table.
  size_t size = num_base;
  for (const AddedToken& t : added) size = std::max(size, static_cast<size_t>(t.id) + 1);
  tok->id_bytes_.assign(size, std::string());
  tok->id_flags_.assign(size, 0);
  for (size_t id = 0; id < num_base; ++id) {
    if (decode_bytes[id].empty()) continue;
    tok->id_bytes_[id] = decode_bytes[id];
    tok->id_flags_[id] = kKnown;
  }
  for (const AddedToken& t : added) {
    // HF's ByteLevel decoder maps a token through the byte alphabet when every
    // character is in it, else keeps its UTF-8 bytes (e.g. <｜User｜>).
    auto bytes = byte_map.ToBytes(t.content);
    tok->id_bytes_[t.id] = bytes ? *bytes : t.content;
    tok->id_flags_[t.id] = kKnown | kAdded | (t.special ? kSpecial : 0);
  }
  tok->added_tokens_ = std::move(added);
  return tok;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  added_->Split(text, segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      EncodeText(text.substr(s.begin, s.end - s.begin), out);
    }
  }
  return out;
}

void Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>& out) const {
  splitter_->Split(text, [&](std::string_view piece) { bpe_->EncodePiece(piece, out); });
}

std::string Tokenizer::DecodeBytes(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (!IsKnown(id) || (skip_special && IsSpecial(id))) continue;
    out += id_bytes_[id];
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  return SanitizeUtf8(DecodeBytes(ids, skip_special));
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.content == token) return t.id;
  }
  const ByteLevelMap byte_map;
  auto bytes = byte_map.ToBytes(token);
  if (!bytes) return std::nullopt;
  const int32_t id = bpe_->Find(*bytes);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string& Tokenizer::TokenBytes(int32_t id) const {
  static const std::string kEmpty;
  return IsKnown(id) ? id_bytes_[id] : kEmpty;
}

bool Tokenizer::IsKnown(int32_t id) const {
  return id >= 0 && id < vocab_size() && (id_flags_[id] & kKnown);
}
bool Tokenizer::IsSpecial(int32_t id) const { return IsKnown(id) && (id_flags_[id] & kSpecial); }
bool Tokenizer::IsAdded(int32_t id) const { return IsKnown(id) && (id_flags_[id] & kAdded); }
int32_t Tokenizer::num_base_tokens() const { return bpe_->num_ids(); }

}  // namespace dsv4::text
