#include "generate_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace dsv4::cli {

namespace {

constexpr size_t kPrintedTokens = 64;

// One line whatever the text.
std::string JsonString(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/false,
                                nlohmann::json::error_handler_t::replace);
}

// Tool-call arguments as the server returns them, on one line: a newline can
// only be whitespace between JSON tokens (strings escape theirs), so a space
// in its place keeps the text the same JSON.
std::string OneLine(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return s;
}

void PrintTokenIds(std::ostream& os, const std::vector<int32_t>& tokens) {
  os << "token_ids: [";
  for (size_t i = 0; i < tokens.size() && i < kPrintedTokens; ++i) {
    os << (i ? ", " : "") << tokens[i];
  }
  os << "]";
  if (tokens.size() > kPrintedTokens) os << "... (" << tokens.size() << " tokens)";
  os << "\n";
}

void PrintLogprobs(std::ostream& os, const std::vector<engine::TokenLogprob>& logprobs) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < logprobs.size() && i < kPrintedTokens; ++i) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, lp] : logprobs[i].top) top.push_back({id, lp});
    list.push_back({{"token", logprobs[i].token}, {"logprob", logprobs[i].logprob}, {"top", top}});
  }
  os << "logprobs: " << list.dump() << (logprobs.size() > kPrintedTokens ? "..." : "") << "\n";
}

// The message as the server would return it: reasoning (thinking mode),
// content, tool calls (when the request offered tools), and on malformed
// output the raw text with its markers, to show what did not parse.
void PrintChat(std::ostream& os, const PromptResult& r, const server::ParsedRequest& request) {
  if (request.thinking_mode == text::ThinkingMode::kThinking || !r.reasoning_content.empty()) {
    os << "reasoning: " << JsonString(r.reasoning_content) << "\n";
  }
  os << "content: " << JsonString(r.content) << "\n";
  if (!request.tool_names.empty() || !r.tool_calls.empty()) {
    os << "tool_calls: " << r.tool_calls.size() << "\n";
    for (const server::ToolCallResult& c : r.tool_calls) {
      os << "  " << c.name << " " << OneLine(c.arguments) << "\n";
    }
  }
  if (r.finish == "error") os << "text: " << JsonString(r.text) << "\n";
}

}  // namespace

void PrintResults(std::ostream& os, const std::vector<PromptResult>& results,
                  const GenerateJob& job, const GenerateStats& stats,
                  int32_t num_speculative_tokens) {
  for (size_t i = 0; i < results.size(); ++i) {
    const PromptResult& r = results[i];
    const GeneratePrompt& prompt = job.prompts[i];
    os << "-- prompt " << i + 1 << "/" << results.size();
    if (!prompt.label.empty()) os << " (" << prompt.label << ")";
    os << " --\n";
    if (prompt.chat) {
      PrintChat(os, r, *prompt.chat);
    } else if (job.tokenizer != nullptr) {
      os << "text: " << JsonString(r.text) << "\n";
    }
    PrintTokenIds(os, r.tokens);
    const int32_t logprobs =
        prompt.chat ? prompt.chat->sampling.logprobs : job.config.sampling.logprobs;
    if (logprobs >= 0) PrintLogprobs(os, r.logprobs);
    os << "finish_reason: " << r.finish;
    if (!r.error.ok()) os << " (" << r.error.message() << ")";
    os << "\n";
  }
  const double rate = stats.seconds > 0 ? static_cast<double>(stats.num_tokens) / stats.seconds : 0;
  os << fmt::format("[generate] {} tokens in {:.2f}s ({:.1f} tok/s)\n", stats.num_tokens,
                    stats.seconds, rate);
  if (num_speculative_tokens > 0) {
    const double steps = static_cast<double>(std::max<int64_t>(stats.num_verify_steps, 1));
    const double drafts = static_cast<double>(std::max<int64_t>(stats.num_draft_tokens, 1));
    os << fmt::format(
        "[generate] mtp K={}: {} drafts ({} draft tokens), {} accepted ({:.1f}%), "
        "mean accepted length {:.2f}\n",
        num_speculative_tokens, stats.num_verify_steps, stats.num_draft_tokens,
        stats.num_accepted_tokens, 100.0 * static_cast<double>(stats.num_accepted_tokens) / drafts,
        1.0 + static_cast<double>(stats.num_accepted_tokens) / steps);
  }
}

}  // namespace dsv4::cli
