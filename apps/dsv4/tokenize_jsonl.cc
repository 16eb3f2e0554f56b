#include "tokenize_jsonl.h"

#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "base/file_util.h"
#include "server/request_parse.h"
#include "server/server_options.h"

namespace dsv4::cli {

namespace {

using Json = server::Json;  // ordered: tool schemas keep their key order, as in the server

// The token files are read with numpy/mmap on little-endian hosts; writing
// the in-memory representation is only correct there.
static_assert(std::endian::native == std::endian::little, "token files are little-endian");

constexpr char kBos[] = "<｜begin▁of▁sentence｜>";
constexpr char kEos[] = "<｜end▁of▁sentence｜>";

Status EncodeText(const Json& line, const text::Tokenizer& tokenizer, std::vector<int32_t>* ids) {
  for (auto it = line.begin(); it != line.end(); ++it) {
    if (it.key() != "text") return InvalidArgument("unknown key '{}' in a text line", it.key());
  }
  const Json& text = line["text"];
  if (!text.is_string()) return InvalidArgument("'text' must be a string");
  const std::string& s = text.get_ref<const std::string&>();
  if (s.empty()) return InvalidArgument("'text' is empty");
  const std::optional<int32_t> bos = tokenizer.TokenId(kBos);
  const std::optional<int32_t> eos = tokenizer.TokenId(kEos);
  if (!bos || !eos) return InvalidArgument("the tokenizer has no BOS/EOS token");
  // A document is a whole sequence, as a conversation is: BOS opens it (the
  // chat encoder starts every conversation with BOS) and EOS ends it, so the
  // model learns where a text stops.
  ids->push_back(*bos);
  const std::vector<int32_t> body = tokenizer.Encode(s);
  ids->insert(ids->end(), body.begin(), body.end());
  ids->push_back(*eos);
  return Status::Ok();
}

Status EncodeChat(const Json& line, const text::Tokenizer& tokenizer, std::vector<int32_t>* ids) {
  for (auto it = line.begin(); it != line.end(); ++it) {
    if (it.key() != "messages" && it.key() != "tools" && it.key() != "thinking") {
      return InvalidArgument("unknown key '{}' in a chat line (expected messages, tools, thinking)",
                             it.key());
    }
  }
  if (line.contains("thinking") && !line["thinking"].is_boolean()) {
    return InvalidArgument("'thinking' must be true or false");
  }
  const Json& messages = line["messages"];
  if (!messages.is_array() || messages.empty() || !messages.back().is_object() ||
      messages.back().value("role", "") != "assistant") {
    return InvalidArgument(
        "'messages' must be a list ending with the assistant's answer (a training conversation "
        "includes what the model must produce)");
  }
  server::ServerOptions options;
  options.max_model_len = std::numeric_limits<int32_t>::max();  // no length limit here
  server::ParsedRequest parsed;
  if (std::optional<server::ApiError> e =
          server::ParseChatRequest(line, tokenizer, options, &parsed)) {
    return InvalidArgument("{}", e->message);
  }
  ids->insert(ids->end(), parsed.prompts[0].begin(), parsed.prompts[0].end());
  return Status::Ok();
}

}  // namespace

Status EncodeTrainingLine(std::string_view line, const text::Tokenizer& tokenizer,
                          std::vector<int32_t>* ids, bool* is_chat) {
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not valid JSON");
  if (!j.is_object()) return InvalidArgument("a line must be a JSON object");
  if (j.contains("text")) {
    *is_chat = false;
    return EncodeText(j, tokenizer, ids);
  }
  if (j.contains("messages")) {
    *is_chat = true;
    return EncodeChat(j, tokenizer, ids);
  }
  return InvalidArgument("a line needs 'text' (a document) or 'messages' (a conversation)");
}

Result<TokenizeStats> TokenizeJsonl(const std::string& input, const std::string& output,
                                    const text::Tokenizer& tokenizer) {
  // A FIFO or device as --input is refused, never waited on; --output must
  // not replace the input (it is renamed over its path at the end).
  if (Status s = CheckRegularFile(input); !s.ok()) return s.WithPrefix("--input");
  if (SameFile(input, output) || SameFile(input, output + ".json")) {
    return InvalidArgument("--output {} would replace --input {}", output, input);
  }
  std::ifstream in(input, std::ios::binary);
  if (!in) return NotFound("cannot open {}", input);
  const std::string tmp = output + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("cannot create {}", tmp);
  TokenizeStats stats;
  const bool narrow = tokenizer.vocab_size() <= 65536;
  stats.dtype = narrow ? "uint16" : "uint32";
  std::string line;
  std::vector<int32_t> ids;
  std::vector<uint16_t> ids16;
  int64_t line_no = 0;
  auto fail = [&](Status s) {
    out.close();
    std::remove(tmp.c_str());
    return s;
  };
  while (std::getline(in, line)) {
    ++line_no;
    ids.clear();
    bool is_chat = false;
    Status s = EncodeTrainingLine(line, tokenizer, &ids, &is_chat);
    if (!s.ok()) return fail(InvalidArgument("{}:{}: {}", input, line_no, s.message()));
    ++(is_chat ? stats.num_chats : stats.num_texts);
    stats.num_tokens += static_cast<int64_t>(ids.size());
    if (narrow) {
      ids16.assign(ids.begin(), ids.end());  // every id < vocab_size <= 65536
      out.write(reinterpret_cast<const char*>(ids16.data()),
                static_cast<std::streamsize>(ids16.size() * sizeof(uint16_t)));
    } else {
      out.write(reinterpret_cast<const char*>(ids.data()),
                static_cast<std::streamsize>(ids.size() * sizeof(int32_t)));
    }
  }
  if (in.bad()) return fail(IoError("read error in {}", input));
  if (line_no == 0) return fail(InvalidArgument("{}: no lines", input));
  out.close();
  if (!out) return fail(IoError("write error in {}", tmp));
  Json sidecar = {{"format", "dsv4-tokens"},
                  {"dtype", stats.dtype},
                  {"vocab_size", tokenizer.vocab_size()},
                  {"num_tokens", stats.num_tokens},
                  {"num_texts", stats.num_texts},
                  {"num_chats", stats.num_chats},
                  {"text_wrapping", "BOS text EOS"}};
  {
    std::ofstream side(output + ".json.tmp", std::ios::trunc);
    side << sidecar.dump(2) << "\n";
    side.close();
    if (!side) return fail(IoError("cannot write {}.json", output));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, output, ec);
  if (ec) return fail(IoError("cannot rename {} to {}: {}", tmp, output, ec.message()));
  std::filesystem::rename(output + ".json.tmp", output + ".json", ec);
  if (ec) return IoError("cannot write {}.json: {}", output, ec.message());
  return stats;
}

}  // namespace dsv4::cli
