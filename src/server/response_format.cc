#include "server/response_format.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

namespace dsv4::server {
namespace {

std::string TokenText(const text::Tokenizer& tok, int32_t id) {
  return tok.Decode(std::span<const int32_t>(&id, 1));
}

Json Bytes(const text::Tokenizer& tok, int32_t id) {
  Json b = Json::array();
  for (unsigned char c : tok.TokenBytes(id)) b.push_back(static_cast<int>(c));
  return b;
}

Json Base(const ResponseHeader& h, const char* object) {
  return Json{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

Json ToolCallJson(const ToolCallResult& c) {
  return Json{{"id", c.id},
              {"type", "function"},
              {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string SseEvent(const Json& j) { return "data: " + Dump(j) + "\n\n"; }

ResponseHeader NewHeader(bool chat, const std::string& model) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  ResponseHeader h;
  h.id = fmt::format("{}-{:016x}", chat ? "chatcmpl" : "cmpl", rng());
  h.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  h.model = model;
  return h;
}

Json UsageJson(const Generation& gen) {
  Json u{{"prompt_tokens", gen.prompt_tokens()},
         {"completion_tokens", gen.completion_tokens()},
         {"total_tokens", gen.prompt_tokens() + gen.completion_tokens()},
         {"prompt_tokens_details", Json{{"cached_tokens", gen.cached_tokens()}}}};
  if (gen.request().chat) {
    u["completion_tokens_details"] = Json{{"reasoning_tokens", gen.reasoning_tokens()}};
  }
  return u;
}

Json ChatLogprobs(const std::vector<engine::TokenLogprob>& lps, const text::Tokenizer& tok) {
  Json content = Json::array();
  for (const engine::TokenLogprob& lp : lps) {
    Json top = Json::array();
    for (const auto& [id, v] : lp.top) {
      top.push_back(Json{{"token", TokenText(tok, id)}, {"logprob", v}, {"bytes", Bytes(tok, id)}});
    }
    content.push_back(Json{{"token", TokenText(tok, lp.token)},
                           {"logprob", lp.logprob},
                           {"bytes", Bytes(tok, lp.token)},
                           {"top_logprobs", std::move(top)}});
  }
  return Json{{"content", std::move(content)}};
}

Json CompletionLogprobs(const std::vector<engine::TokenLogprob>& lps, const text::Tokenizer& tok,
                        size_t* offset) {
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(),
       offsets = Json::array();
  for (const engine::TokenLogprob& lp : lps) {
    const std::string t = TokenText(tok, lp.token);
    tokens.push_back(t);
    values.push_back(lp.logprob);
    Json top = Json::object();
    for (const auto& [id, v] : lp.top) top[TokenText(tok, id)] = v;
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += t.size();
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(values)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

Json ChatResponse(const ResponseHeader& h, const Generation& gen, const text::Tokenizer& tok) {
  Json resp = Base(h, "chat.completion");
  Json choices = Json::array();
  for (int i = 0; i < gen.num_choices(); ++i) {
    const ChoiceDecoder& d = gen.choice(i);
    Json msg{{"role", "assistant"}};
    const bool has_calls = !d.tool_calls().empty();
    msg["content"] = has_calls && d.content().empty() ? Json(nullptr) : Json(d.content());
    msg["reasoning_content"] =
        d.reasoning_content().empty() ? Json(nullptr) : Json(d.reasoning_content());
    if (has_calls) {
      Json calls = Json::array();
      for (const ToolCallResult& c : d.tool_calls()) calls.push_back(ToolCallJson(c));
      msg["tool_calls"] = std::move(calls);
    }
    choices.push_back(
        Json{{"index", i},
             {"message", std::move(msg)},
             {"logprobs", gen.request().logprobs ? ChatLogprobs(d.logprobs(), tok) : Json(nullptr)},
             {"finish_reason", d.finish_reason()}});
  }
  resp["choices"] = std::move(choices);
  resp["usage"] = UsageJson(gen);
  return resp;
}

Json CompletionResponse(const ResponseHeader& h, const Generation& gen,
                        const text::Tokenizer& tok) {
  Json resp = Base(h, "text_completion");
  Json choices = Json::array();
  for (int i = 0; i < gen.num_choices(); ++i) {
    const ChoiceDecoder& d = gen.choice(i);
    size_t offset = 0;
    std::string text = d.content();
    if (gen.request().echo) {
      const int prompt_index = i / gen.request().n;
      text =
          tok.Decode(gen.request().prompts[prompt_index], gen.request().skip_special_tokens) + text;
    }
    choices.push_back(
        Json{{"index", i},
             {"text", std::move(text)},
             {"logprobs", gen.request().logprobs ? CompletionLogprobs(d.logprobs(), tok, &offset)
                                                 : Json(nullptr)},
             {"finish_reason", d.finish_reason()}});
  }
  resp["choices"] = std::move(choices);
  resp["usage"] = UsageJson(gen);
  return resp;
}

Json ChatRoleChunk(const ResponseHeader& h, int index) {
  Json c = Base(h, "chat.completion.chunk");
  c["choices"] = Json::array({Json{{"index", index},
                                   {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
  return c;
}

Json ChatDeltaChunk(const ResponseHeader& h, int index, const ChoiceDelta& d,
                    const text::Tokenizer& tok) {
  if (d.empty()) return nullptr;
  Json delta = Json::object();
  if (!d.reasoning_content.empty()) delta["reasoning_content"] = d.reasoning_content;
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallChunk& t : d.tool_calls) {
      Json call{{"index", t.index}};
      Json fn = Json::object();
      if (!t.id.empty()) {
        call["id"] = t.id;
        call["type"] = "function";
        fn["name"] = t.name;
      }
      fn["arguments"] = t.arguments;
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    delta["tool_calls"] = std::move(calls);
  }
  Json c = Base(h, "chat.completion.chunk");
  c["choices"] = Json::array(
      {Json{{"index", index},
            {"delta", std::move(delta)},
            {"logprobs", d.logprobs.empty() ? Json(nullptr) : ChatLogprobs(d.logprobs, tok)},
            {"finish_reason", nullptr}}});
  return c;
}

Json ChatFinishChunk(const ResponseHeader& h, int index, const std::string& finish_reason) {
  Json c = Base(h, "chat.completion.chunk");
  c["choices"] = Json::array({Json{{"index", index},
                                   {"delta", Json::object()},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish_reason}}});
  return c;
}

Json CompletionChunk(const ResponseHeader& h, int index, const ChoiceDelta& d,
                     const std::string& finish_reason, const text::Tokenizer& tok, size_t* offset) {
  Json c = Base(h, "text_completion");
  c["choices"] = Json::array(
      {Json{{"index", index},
            {"text", d.content},
            {"logprobs",
             d.logprobs.empty() ? Json(nullptr) : CompletionLogprobs(d.logprobs, tok, offset)},
            {"finish_reason", finish_reason.empty() ? Json(nullptr) : Json(finish_reason)}}});
  return c;
}

Json UsageChunk(const ResponseHeader& h, bool chat, const Generation& gen) {
  Json c = Base(h, chat ? "chat.completion.chunk" : "text_completion");
  c["choices"] = Json::array();
  c["usage"] = UsageJson(gen);
  return c;
}

}  // namespace dsv4::server
