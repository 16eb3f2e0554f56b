#include "generate_driver.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "output_text.h"

namespace dsv4::cli {

namespace {

// Outputs cross from the engine thread to the caller through this queue;
// callbacks only push (the engine contract: cheap, no calls back into it).
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<size_t, engine::GenerationOutput>> events;  // GUARDED_BY(mu)

  void Push(size_t index, const engine::GenerationOutput& out) {
    std::lock_guard<std::mutex> lock(mu);
    events.emplace_back(index, out);
    cv.notify_one();
  }
  std::pair<size_t, engine::GenerationOutput> Pop() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return !events.empty(); });
    auto e = std::move(events.front());
    events.pop_front();
    return e;
  }
};

// What a streamed chat prompt printed last.
enum class Section { kNone, kReasoning, kContent, kToolCall };

struct Tracker {
  PromptResult result;
  std::optional<OutputText> text;                  // plain prompts
  std::unique_ptr<server::ChoiceDecoder> decoder;  // chat prompts
  Section section = Section::kNone;
  engine::RequestId id = 0;
  bool done = false;        // no further token counts (finished or stop string)
  bool final_seen = false;  // the engine's last output arrived
};

std::string FinishName(const engine::GenerationOutput& out, const PromptResult& r,
                       const GenerateJob& job) {
  switch (out.finish) {
    case engine::FinishReason::kStop:
      return !job.config.sampling.ignore_eos && !r.tokens.empty() &&
                     r.tokens.back() == job.eos_token_id
                 ? "eos"
                 : "stop";
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kAbort:
      return "aborted";
    case engine::FinishReason::kError:
      return "error";
    case engine::FinishReason::kNone:
      break;
  }
  return "none";
}

// A chat prompt's deltas, each section under a header (the reasoning, the
// content and every tool call in the order the decoder releases them).
void StreamChat(const server::ChoiceDelta& d, Tracker& t, std::ostream& os) {
  auto open = [&](Section section, const std::string& header) {
    if (t.section == section && section != Section::kToolCall) return;
    if (t.section != Section::kNone) os << "\n";
    os << header;
    t.section = section;
  };
  if (!d.reasoning_content.empty()) {
    open(Section::kReasoning, "reasoning: ");
    os << d.reasoning_content;
  }
  if (!d.content.empty()) {
    open(Section::kContent, "content: ");
    os << d.content;
  }
  for (const server::ToolCallChunk& c : d.tool_calls) {
    if (!c.name.empty()) open(Section::kToolCall, "tool_call: " + c.name + " ");
    os << c.arguments;
  }
  os << std::flush;
}

// Chat prompts: every token goes to the server's decoder, which owns stop
// strings, the finish reason and when to abort (a stop string, malformed
// model output).
void HandleChat(engine::AsyncEngine& engine, const GenerateJob& job,
                const engine::GenerationOutput& out, Tracker& t) {
  t.result.tokens.insert(t.result.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
  t.result.logprobs.insert(t.result.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  const server::ChoiceDelta d = t.decoder->Push(out);
  if (job.stream != nullptr) StreamChat(d, t, *job.stream);
  if (!t.decoder->finished()) return;
  t.done = true;
  if (t.decoder->needs_abort()) engine.Abort(t.id);  // its final (kAbort) output still follows
  const std::string& finish = t.decoder->finish_reason();
  t.result.finish = finish == "abort" ? "aborted" : finish;
  t.result.error = t.decoder->error();
}

void Handle(engine::AsyncEngine& engine, const GenerateJob& job,
            const engine::GenerationOutput& out, Tracker& t, GenerateStats* stats) {
  if (out.finish != engine::FinishReason::kNone) t.final_seen = true;
  if (t.done) return;  // tokens after a stop string were never ours
  if (out.num_draft_tokens > 0) {
    ++stats->num_verify_steps;
    stats->num_draft_tokens += out.num_draft_tokens;
    stats->num_accepted_tokens += out.num_accepted_tokens;
  }
  if (t.decoder) return HandleChat(engine, job, out, t);
  for (size_t k = 0; k < out.new_tokens.size(); ++k) {
    t.result.tokens.push_back(out.new_tokens[k]);
    if (k < out.logprobs.size()) t.result.logprobs.push_back(out.logprobs[k]);
    if (t.text && t.text->Push(out.new_tokens[k])) {
      t.result.finish = "stop";
      t.done = true;
      engine.Abort(t.id);  // its final (kAbort) output still follows
      break;
    }
  }
  if (!t.done && out.finish != engine::FinishReason::kNone) {
    t.done = true;
    t.result.finish = FinishName(out, t.result, job);
    t.result.error = out.error;
    if (t.text) t.text->Finish();
  }
  if (job.stream != nullptr && t.text) *job.stream << t.text->TakeDelta() << std::flush;
}

}  // namespace

Result<std::vector<PromptResult>> RunGenerate(engine::AsyncEngine& engine, const GenerateJob& job,
                                              GenerateStats* stats) {
  *stats = GenerateStats{};
  auto channel = std::make_shared<Channel>();
  std::vector<Tracker> trackers(job.prompts.size());
  const auto t0 = std::chrono::steady_clock::now();
  Status submit_error;
  size_t num_submitted = 0;
  for (size_t i = 0; i < job.prompts.size(); ++i) {
    const GeneratePrompt& prompt = job.prompts[i];
    if (prompt.chat && job.tokenizer == nullptr) {
      return InvalidArgument("prompt {}: a chat prompt needs a tokenizer", i + 1);
    }
  }
  for (size_t i = 0; i < job.prompts.size(); ++i) {
    const GeneratePrompt& prompt = job.prompts[i];
    engine::GenerationRequest request;
    request.prompt = prompt.ids;
    if (prompt.chat) {
      auto decoder = server::ChoiceDecoder::Create(*prompt.chat, *job.tokenizer);
      if (!decoder.ok()) {
        submit_error = decoder.status().WithPrefix("prompt " + std::to_string(i + 1));
        break;
      }
      trackers[i].decoder = std::move(*decoder);
      request.max_tokens = prompt.chat->max_tokens;
      request.stop_token_ids = prompt.chat->stop_token_ids;
      request.sampling = prompt.chat->sampling;
    } else {
      if (job.tokenizer != nullptr)
        trackers[i].text.emplace(*job.tokenizer, job.config.stop, job.config.sampling.min_tokens,
                                 job.config.include_stop_str_in_output);
      request.max_tokens = job.config.max_new_tokens;
      request.stop_token_ids = job.config.stop_token_ids;
      request.sampling = job.config.sampling;
    }
    // The callback owns a reference to the channel: it stays valid however
    // late the engine thread runs it.
    auto id = engine.Submit(std::move(request), [channel, i](const engine::GenerationOutput& out) {
      channel->Push(i, out);
    });
    if (!id.ok()) {
      submit_error = id.status().WithPrefix("prompt " + std::to_string(i + 1));
      break;
    }
    trackers[i].id = *id;
    ++num_submitted;
  }
  if (!submit_error.ok()) {
    for (size_t i = 0; i < num_submitted; ++i) engine.Abort(trackers[i].id);
  }
  size_t num_open = num_submitted;
  while (num_open > 0) {
    auto [index, out] = channel->Pop();
    Tracker& t = trackers[index];
    const bool was_final = t.final_seen;
    Handle(engine, job, out, t, stats);
    if (!was_final && t.final_seen) --num_open;
  }
  stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!submit_error.ok()) return submit_error;
  std::vector<PromptResult> results;
  for (Tracker& t : trackers) {
    if (t.text) t.result.text = t.text->text();
    if (t.decoder) {
      t.result.text = job.tokenizer->Decode(t.result.tokens, /*skip_special=*/false);
      t.result.reasoning_content = t.decoder->reasoning_content();
      t.result.content = t.decoder->content();
      t.result.tool_calls = t.decoder->tool_calls();
    }
    stats->num_tokens += static_cast<int64_t>(t.result.tokens.size());
    results.push_back(std::move(t.result));
  }
  return results;
}

}  // namespace dsv4::cli
