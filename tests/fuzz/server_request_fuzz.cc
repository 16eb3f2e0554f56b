// OpenAI request bodies (untrusted HTTP input) -> ParsedRequest.  The first
// byte picks the endpoint, the context limit and the input limits (the
// server's defaults or tiny ones); the rest is the body text, parsed as the
// server does (ParseRequestBody).  Parsing must return a request or a
// 400-style error, never crash; the bounded parser must agree with nlohmann's
// (same value, or both reject the text); and an accepted request must respect
// what the engine relies on: at least one non-empty prompt of valid token
// ids, prompt + max_tokens within the context, n and the sampling values
// inside their documented ranges.  Flag bit 3 sends the body through the
// HTTP transport's Content-Encoding decoding first (bits 4-5 pick gzip,
// deflate, "deflate, gzip" or an unknown coding): a 400/413/415 with a
// message, or a decoded body within the byte bound that then goes on as above.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "server/body_decoding.h"
#include "server/request_parse.h"
#include "tests/fuzz/text_fuzz_common.h"

using dsv4::server::Json;
using dsv4::server::ParsedRequest;
using dsv4::text::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const dsv4::text::Tokenizer& tok = dsv4::text::fuzz::V4Tokenizer();
  dsv4::server::ServerOptions options;
  options.max_model_len = (flags & 2) ? 64 : 4096;
  if (flags & 4) {  // tiny limits, so that every limit is crossed often
    dsv4::server::RequestLimits& l = options.limits;
    l.max_json_depth = 6;
    l.max_json_object_members = 6;
    l.max_json_array_elements = 6;
    l.max_messages = 3;
    l.max_tools = 2;
    l.max_stop_strings = 2;
    l.max_stop_bytes = 4;
    l.max_stop_token_ids = 2;
    l.max_choices = 3;
  }
  std::string decoded;
  if (flags & 8) {
    static const char* const kCodings[] = {"gzip", "deflate", "deflate, gzip", "br"};
    const int64_t bound = (flags & 4) ? 4096 : options.max_body_bytes;
    decoded.assign(text);
    const auto d = dsv4::server::DecodeBody(kCodings[(flags >> 4) & 3], bound, &decoded);
    Require(
        d.http_status == 0 || d.http_status == 400 || d.http_status == 413 || d.http_status == 415,
        "decoding error is not 400, 413 or 415");
    if (d.http_status != 0) {
      Require(!d.message.empty(), "decoding error without a message");
      return 0;
    }
    Require(static_cast<int64_t>(decoded.size()) <= bound, "decoded body over the byte bound");
    text = decoded;
  }
  Json body;
  const auto body_err = dsv4::server::ParseRequestBody(text, options, &body);
  const bool syntax_err =
      body_err && body_err->message.rfind("the request body is not valid JSON", 0) == 0;
  // nlohmann's own parse is the reference only where ReadJson found no limit
  // crossed: OrderedJson::parse itself overflows the stack on deep input (a
  // growing ordered_map deep-copies its members), and is quadratic in keys.
  if (!body_err || syntax_err) {
    const Json reference = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (syntax_err) Require(reference.is_discarded(), "ReadJson rejects what nlohmann accepts");
    if (!body_err)
      Require(!reference.is_discarded() && reference == body, "ReadJson's value differs");
  }
  if (body_err) {
    Require(body_err->http_status == 400 && !body_err->message.empty(), "body error not a 400");
    return 0;
  }
  ParsedRequest r;
  const auto err = (flags & 1) ? ParseCompletionRequest(body, tok, options, &r)
                               : ParseChatRequest(body, tok, options, &r);
  if (err) {
    Require(err->http_status >= 400 && err->http_status < 500, "error status is not 4xx");
    Require(!err->message.empty(), "error without a message");
    return 0;
  }
  Require(!r.prompts.empty(), "accepted request without a prompt");
  for (const auto& prompt : r.prompts) {
    Require(!prompt.empty(), "empty prompt accepted");
    Require(static_cast<int64_t>(prompt.size()) + std::max<int64_t>(r.max_tokens, 1) <=
                options.max_model_len,
            "prompt + max_tokens exceed the context");
    for (int32_t id : prompt) {
      Require(id >= 0 && id < tok.vocab_size(), "token id outside the vocabulary accepted");
    }
  }
  Require(r.max_tokens >= 1, "max_tokens < 1 accepted");
  Require(r.n >= 1 && r.n <= 128, "n outside [1, 128]");
  Require(static_cast<int64_t>(r.prompts.size()) * r.n <= options.limits.max_choices,
          "more choices than max_choices");
  Require(static_cast<int64_t>(r.stop.size()) <= options.limits.max_stop_strings &&
              static_cast<int64_t>(r.stop_token_ids.size()) <= options.limits.max_stop_token_ids,
          "stop lists over their limits");
  const dsv4::engine::SamplingParams& s = r.sampling;
  Require(s.temperature >= 0 && s.temperature <= 2, "temperature outside [0, 2]");
  Require(s.top_p > 0 && s.top_p <= 1, "top_p outside (0, 1]");
  Require(s.top_k >= 0, "negative top_k");
  for (const auto& [id, bias] : s.logit_bias) {
    Require(id >= 0 && bias >= -100 && bias <= 100, "logit_bias entry out of range");
  }
  return 0;
}
