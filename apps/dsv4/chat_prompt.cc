#include "chat_prompt.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

#include "server/choice_decoder.h"

namespace dsv4::cli {

namespace {

using server::Json;

// Groups of fields that are one choice together: a default joins the body
// only when the body holds no member of its group.
const std::vector<std::vector<std::string>>& FieldGroups() {
  static const auto* groups = new std::vector<std::vector<std::string>>{
      {"max_tokens", "max_completion_tokens"},
      {"logprobs", "top_logprobs"},
      {"reasoning_effort", "thinking", "chat_template_kwargs"},
  };
  return *groups;
}

const std::vector<std::string>* GroupOf(const std::string& key) {
  for (const auto& group : FieldGroups()) {
    for (const std::string& k : group) {
      if (k == key) return &group;
    }
  }
  return nullptr;
}

// The server's 400 as one line; the param is added when the message does not
// already name it.
Status ToStatus(const server::ApiError& e) {
  if (e.param.empty() || e.message.find(e.param) != std::string::npos) {
    return InvalidArgument("{}", e.message);
  }
  return InvalidArgument("{} (at '{}')", e.message, e.param);
}

// ParseChatRequest, then the checks only generate needs: fields it cannot
// honour, and a tokenizer that can parse the output (a ChoiceDecoder is
// created once here so a tokenizer without the V4 markers fails before the
// model loads).
Result<server::ParsedRequest> Parse(const Json& body, const text::Tokenizer& tokenizer,
                                    const server::ServerOptions& options) {
  server::ParsedRequest parsed;
  if (auto err = server::ParseChatRequest(body, tokenizer, options, &parsed)) {
    return ToStatus(*err);
  }
  if (parsed.stream) {
    return InvalidArgument(
        "\"stream\": true is not supported here; use --generate-config '{{\"stream\":true}}'");
  }
  if (parsed.n != 1) {
    return InvalidArgument("\"n\" must be 1 in dsv4 generate, got {}", parsed.n);
  }
  DSV4_ASSIGN_OR_RETURN(auto decoder, server::ChoiceDecoder::Create(parsed, tokenizer));
  return parsed;
}

}  // namespace

Json ChatDefaults(const GenerateConfig& config) {
  const GenerateConfig base;
  const engine::SamplingParams& s = config.sampling;
  const engine::SamplingParams& b = base.sampling;
  Json d = Json::object();
  // Always: the server's chat default is the rest of the context, generate's
  // is max_new_tokens' default (256).
  d["max_tokens"] = config.max_new_tokens;
  // A field equal to SamplingParams{} is left out: the parser's defaults
  // (ServerOptions::default_sampling, set to the run's sampling by
  // `generate`) fill it.
  const std::initializer_list<std::pair<const char*, std::pair<float, float>>> floats = {
      {"temperature", {s.temperature, b.temperature}},
      {"top_p", {s.top_p, b.top_p}},
      {"min_p", {s.min_p, b.min_p}},
      {"presence_penalty", {s.presence_penalty, b.presence_penalty}},
      {"frequency_penalty", {s.frequency_penalty, b.frequency_penalty}},
      {"repetition_penalty", {s.repetition_penalty, b.repetition_penalty}},
  };
  for (const auto& [name, values] : floats) {
    if (values.first != values.second) d[name] = values.first;
  }
  if (s.top_k != b.top_k) d["top_k"] = s.top_k;
  if (s.seed) d["seed"] = *s.seed;
  if (s.ignore_eos) d["ignore_eos"] = true;
  if (s.min_tokens > 0) d["min_tokens"] = s.min_tokens;
  if (config.include_stop_str_in_output) d["include_stop_str_in_output"] = true;
  if (s.logprobs >= 0) {
    d["logprobs"] = true;
    d["top_logprobs"] = s.logprobs;
  }
  if (!config.stop.empty()) d["stop"] = config.stop;
  if (!config.stop_token_ids.empty()) d["stop_token_ids"] = config.stop_token_ids;
  if (config.reasoning_effort) d["reasoning_effort"] = *config.reasoning_effort;
  return d;
}

Json WithDefaults(Json body, const Json& defaults) {
  // Judged on the body as given: an added default must not hide its group.
  std::set<std::string> keys;
  for (auto it = body.begin(); it != body.end(); ++it) keys.insert(it.key());
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    bool given = keys.count(it.key()) > 0;
    if (const std::vector<std::string>* group = GroupOf(it.key())) {
      for (const std::string& k : *group) given = given || keys.count(k) > 0;
    }
    if (!given) body[it.key()] = it.value();
  }
  return body;
}

Result<server::ParsedRequest> ChatTextRequest(const std::string& prompt,
                                              const GenerateConfig& config,
                                              const text::Tokenizer& tokenizer,
                                              const server::ServerOptions& options) {
  Json body = ChatDefaults(config);
  body["messages"] = Json::array({Json{{"role", "user"}, {"content", prompt}}});
  return Parse(body, tokenizer, options);
}

Result<server::ParsedRequest> ChatBodyRequest(std::string_view body_text,
                                              const GenerateConfig& config,
                                              const text::Tokenizer& tokenizer,
                                              const server::ServerOptions& options) {
  Json body;
  if (auto err = server::ParseRequestBody(body_text, options, &body)) return ToStatus(*err);
  return Parse(WithDefaults(std::move(body), ChatDefaults(config)), tokenizer, options);
}

Result<server::ParsedRequest> LoadChatRequest(const std::string& path, const GenerateConfig& config,
                                              const text::Tokenizer& tokenizer,
                                              const server::ServerOptions& options) {
  const std::string prefix = "--chat-request " + path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return InvalidArgument("{}: is a directory", prefix);
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument("{}: cannot open: {}", prefix, std::strerror(errno));
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) return InvalidArgument("{}: read failed", prefix);
  const std::string body = std::move(text).str();
  if (static_cast<int64_t>(body.size()) > options.max_body_bytes) {
    return InvalidArgument("{}: {} bytes, over the request limit of {} bytes", prefix, body.size(),
                           options.max_body_bytes);
  }
  auto parsed = ChatBodyRequest(body, config, tokenizer, options);
  if (!parsed.ok()) return parsed.status().WithPrefix(prefix);
  return parsed;
}

}  // namespace dsv4::cli
