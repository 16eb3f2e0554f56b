#include "server/choice_decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

namespace dsv4::server {

std::string NewToolCallId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

ChoiceDecoder::ChoiceDecoder(const ParsedRequest& request)
    : request_(request), stop_(request.stop, request.include_stop_str_in_output) {}

Result<std::unique_ptr<ChoiceDecoder>> ChoiceDecoder::Create(const ParsedRequest& request,
                                                             const text::Tokenizer& tokenizer) {
  std::unique_ptr<ChoiceDecoder> d(new ChoiceDecoder(request));
  if (request.chat) {
    text::OutputParserOptions po;
    po.thinking_mode = request.thinking_mode;
    po.parse_tool_calls = request.parse_tool_calls;
    po.tool_names = request.tool_names;
    DSV4_ASSIGN_OR_RETURN(text::OutputParser parser, text::OutputParser::Create(tokenizer, po));
    d->parser_.emplace(std::move(parser));
    d->think_end_id_ = *tokenizer.TokenId("</think>");
    d->dsml_id_ = *tokenizer.TokenId("｜DSML｜");
    d->in_reasoning_ = request.thinking_mode == text::ThinkingMode::kThinking;
  } else {
    d->detok_.emplace(tokenizer, request.skip_special_tokens);
  }
  return d;
}

// Reasoning tokens: those generated before </think> (or before a tool block,
// which also ends reasoning) in thinking mode.
void ChoiceDecoder::CountReasoning(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (!in_reasoning_) return;
    if (id == think_end_id_ || id == dsml_id_) {
      in_reasoning_ = false;
      return;
    }
    ++num_reasoning_tokens_;
  }
}

void ChoiceDecoder::AddText(std::string_view text, ChoiceDelta* out, bool searched) {
  std::string kept = searched ? stop_.Push(text) : stop_.PushUnsearched(text);
  content_ += kept;
  out->content += kept;
}

void ChoiceDecoder::AddParserDelta(const text::ParserDelta& d, ChoiceDelta* out, bool searched) {
  if (request_.include_reasoning) {
    reasoning_ += d.reasoning_content;
    out->reasoning_content += d.reasoning_content;
  }
  if (!d.content.empty()) AddText(d.content, out, searched);
  for (const text::ToolCallDelta& t : d.tool_calls) {
    if (!request_.parallel_tool_calls && t.index > 0) continue;
    ToolCallChunk chunk;
    chunk.index = t.index;
    if (!t.name.empty()) {
      calls_.push_back({NewToolCallId(), t.name, ""});
      chunk.id = calls_.back().id;
      chunk.name = t.name;
    }
    if (static_cast<size_t>(t.index) >= calls_.size()) continue;  // no header seen: parser bug
    calls_[t.index].arguments += t.arguments;
    chunk.arguments = t.arguments;
    out->tool_calls.push_back(std::move(chunk));
  }
}

ChoiceDelta ChoiceDecoder::Push(const engine::GenerationOutput& output) {
  ChoiceDelta out;
  if (finished()) return out;
  // min_tokens: the text of the first min_tokens tokens is never searched
  // for stop strings (the sampler keeps stop tokens out of them too).
  const std::span<const int32_t> ids = output.new_tokens;
  const int64_t unsearched = std::clamp<int64_t>(request_.sampling.min_tokens - num_tokens_, 0,
                                                 static_cast<int64_t>(ids.size()));
  const std::span<const int32_t> early = ids.first(static_cast<size_t>(unsearched));
  const std::span<const int32_t> late = ids.subspan(static_cast<size_t>(unsearched));
  num_tokens_ += static_cast<int64_t>(ids.size());
  if (request_.logprobs) {
    out.logprobs = output.logprobs;
    logprobs_.insert(logprobs_.end(), output.logprobs.begin(), output.logprobs.end());
  }
  if (parser_) {
    CountReasoning(ids);
    if (!early.empty()) AddParserDelta(parser_->Feed(early), &out, /*searched=*/false);
    if (!late.empty() && parser_->error().ok()) {
      AddParserDelta(parser_->Feed(late), &out, /*searched=*/true);
    }
    if (!parser_->error().ok()) {
      error_ = parser_->error();
      finish_reason_ = "error";
      needs_abort_ = output.finish == engine::FinishReason::kNone;
      return out;
    }
  } else {
    if (!early.empty()) AddText(detok_->Push(early), &out, /*searched=*/false);
    if (!late.empty()) AddText(detok_->Push(late), &out, /*searched=*/true);
  }
  if (stop_.stopped()) {
    finish_reason_ = "stop";
    needs_abort_ = output.finish == engine::FinishReason::kNone;
    return out;
  }
  if (output.finish != engine::FinishReason::kNone) Finish(output, &out);
  return out;
}

void ChoiceDecoder::Finish(const engine::GenerationOutput& output, ChoiceDelta* out) {
  if (parser_) {
    AddParserDelta(parser_->Finish(), out);
    if (!parser_->error().ok()) error_ = parser_->error();
  } else {
    AddText(detok_->Finish(), out);
  }
  std::string rest = stop_.Finish();
  content_ += rest;
  out->content += rest;
  switch (output.finish) {
    case engine::FinishReason::kStop: {
      finish_reason_ = "stop";
      bool all_complete = !calls_.empty();
      if (parser_) {
        for (const text::ParsedToolCall& c : parser_->result().tool_calls) {
          all_complete = all_complete && c.complete;
        }
      }
      if (all_complete) finish_reason_ = "tool_calls";
      break;
    }
    case engine::FinishReason::kLength:
      finish_reason_ = "length";
      break;
    case engine::FinishReason::kAbort:
      finish_reason_ = "abort";
      break;
    default:
      finish_reason_ = "error";
      if (error_.ok()) error_ = output.error.ok() ? Internal("engine step failed") : output.error;
      break;
  }
  if (!error_.ok()) finish_reason_ = "error";
}

}  // namespace dsv4::server
