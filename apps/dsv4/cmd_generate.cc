// generate: offline generation through the serving engine (serving.md §9.4).
// Every prompt is submitted at once to a local AsyncEngine, so continuous
// batching, chunked prefill and MTP speculation run exactly as in `serve`.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/file_util.h"
#include "checkpoint/model_config.h"
#include "commands.h"
#include "default_model.h"
#include "engine_flags.h"
#include "generate_config.h"
#include "generate_driver.h"
#include "runner/local_engine.h"
#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace dsv4::cli {

bool ParseIdList(const std::string& text, std::vector<int32_t>* ids) {
  ids->clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) return false;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      return false;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX) return false;
    ids->push_back(static_cast<int32_t>(v));
  }
  return !ids->empty();
}

namespace {

constexpr size_t kPrintedTokens = 64;

struct GenerateArgs {
  EngineFlags engine;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::string generate_config;
  bool chat = false;
};

// A usage error: one line on stderr, exit status 2.
int UsageError(const std::string& message) {
  std::cerr << "dsv4 generate: " << message << "\n";
  return 2;
}

std::string JsonString(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/false,
                                nlohmann::json::error_handler_t::replace);
}

// Chat mode: the prompt as one user message, thinking off unless the
// generate config turns it on (docs/sampling.md §5).
Result<std::string> ChatPrompt(const std::string& prompt, const GenerateConfig& config) {
  text::OrderedJson messages = text::OrderedJson::array();
  messages.push_back({{"role", "user"}, {"content", prompt}});
  text::EncodeOptions options;
  options.thinking_mode =
      config.thinking ? text::ThinkingMode::kThinking : text::ThinkingMode::kChat;
  if (config.reasoning_effort) {
    DSV4_ASSIGN_OR_RETURN(text::MappedEffort effort,
                          text::MapOpenAiReasoningEffort(*config.reasoning_effort));
    if (effort.force_chat) options.thinking_mode = text::ThinkingMode::kChat;
    options.reasoning_effort = effort.effort;
  }
  return text::EncodeMessages(messages, options);
}

// Token prompts: --prompt texts first (in order), then --prompt-ids lists.
Result<std::vector<std::vector<int32_t>>> BuildPrompts(const GenerateArgs& args,
                                                       const GenerateConfig& config,
                                                       const text::Tokenizer* tokenizer) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < args.prompts.size(); ++i) {
    std::string prompt_text = args.prompts[i];
    if (args.chat) {
      auto encoded = ChatPrompt(prompt_text, config);
      if (!encoded.ok()) return encoded.status().WithPrefix("--chat");
      prompt_text = *encoded;
    }
    prompts.push_back(tokenizer->Encode(prompt_text));
    if (prompts.back().empty()) return InvalidArgument("--prompt {} encodes to no tokens", i + 1);
  }
  for (const std::string& list : args.prompt_ids) {
    std::vector<int32_t> ids;
    if (!ParseIdList(list, &ids)) {
      return InvalidArgument("--prompt-ids must be a comma-separated list of token ids, got \"{}\"",
                             list);
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

Status CheckCombinations(const GenerateArgs& args, const GenerateConfig& config) {
  const size_t num_prompts = args.prompts.size() + args.prompt_ids.size();
  if (num_prompts == 0) return InvalidArgument("give at least one --prompt or --prompt-ids");
  if (config.stream && num_prompts != 1) {
    return InvalidArgument("\"stream\": true needs exactly one prompt, got {}", num_prompts);
  }
  if (args.chat && !args.prompt_ids.empty()) {
    return InvalidArgument("--chat applies to --prompt text, not to --prompt-ids");
  }
  if (!args.chat && (config.thinking || config.reasoning_effort)) {
    return InvalidArgument("\"thinking\" and \"reasoning_effort\" need --chat");
  }
  return Status::Ok();
}

void PrintTokenIds(const std::vector<int32_t>& tokens) {
  std::cout << "token_ids: [";
  for (size_t i = 0; i < tokens.size() && i < kPrintedTokens; ++i) {
    std::cout << (i ? ", " : "") << tokens[i];
  }
  std::cout << "]";
  if (tokens.size() > kPrintedTokens) std::cout << "... (" << tokens.size() << " tokens)";
  std::cout << "\n";
}

void PrintLogprobs(const std::vector<TokenLogprob>& logprobs) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < logprobs.size() && i < kPrintedTokens; ++i) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, lp] : logprobs[i].top) top.push_back({id, lp});
    list.push_back({{"token", logprobs[i].token}, {"logprob", logprobs[i].logprob}, {"top", top}});
  }
  std::cout << "logprobs: " << list.dump() << (logprobs.size() > kPrintedTokens ? "..." : "")
            << "\n";
}

void PrintResults(const std::vector<PromptResult>& results, const GenerateJob& job,
                  const GenerateStats& stats, int32_t num_speculative_tokens) {
  for (size_t i = 0; i < results.size(); ++i) {
    const PromptResult& r = results[i];
    std::cout << "-- prompt " << i + 1 << "/" << results.size() << " --\n";
    if (job.tokenizer != nullptr) std::cout << "text: " << JsonString(r.text) << "\n";
    PrintTokenIds(r.tokens);
    if (job.config.sampling.logprobs >= 0) PrintLogprobs(r.logprobs);
    std::cout << "finish_reason: " << r.finish;
    if (!r.error.ok()) std::cout << " (" << r.error.message() << ")";
    std::cout << "\n";
  }
  const double rate = stats.seconds > 0 ? static_cast<double>(stats.num_tokens) / stats.seconds : 0;
  std::cout << fmt::format("[generate] {} tokens in {:.2f}s ({:.1f} tok/s)\n", stats.num_tokens,
                           stats.seconds, rate);
  if (num_speculative_tokens > 0) {
    const double steps = static_cast<double>(std::max<int64_t>(stats.num_verify_steps, 1));
    const double drafts = static_cast<double>(std::max<int64_t>(stats.num_draft_tokens, 1));
    std::cout << fmt::format(
        "[generate] mtp K={}: {} drafts ({} draft tokens), {} accepted ({:.1f}%), "
        "mean accepted length {:.2f}\n",
        num_speculative_tokens, stats.num_verify_steps, stats.num_draft_tokens,
        stats.num_accepted_tokens, 100.0 * static_cast<double>(stats.num_accepted_tokens) / drafts,
        1.0 + static_cast<double>(stats.num_accepted_tokens) / steps);
  }
}

int RunGenerateCommand(GenerateArgs& args) {
  Status s = ResolveEngineFlags(&args.engine);
  if (!s.ok()) return UsageError(s.message());
  GenerateConfig config;
  if (!args.generate_config.empty()) {
    auto parsed = ParseGenerateConfig(args.generate_config);
    if (!parsed.ok()) return UsageError("--generate-config: " + parsed.status().message());
    config = std::move(*parsed);
  }
  s = CheckCombinations(args, config);
  if (!s.ok()) return UsageError(s.message());
  auto model = ResolveModel(args.engine.options.model_dir);
  if (!model.ok()) return UsageError(model.status().message());
  args.engine.options.model_dir = model->dir;

  const EngineOptions& options = args.engine.options;
  const std::string tokenizer_path = options.model_dir + "/tokenizer.json";
  std::unique_ptr<text::Tokenizer> tokenizer;
  // "Cannot tell" (a symlink loop, no permission) is an error, not "absent".
  auto has_tokenizer = PathExists(tokenizer_path);
  if (!has_tokenizer.ok()) return UsageError(has_tokenizer.status().message());
  if (*has_tokenizer) {
    auto loaded = text::Tokenizer::Load(tokenizer_path);
    if (!loaded.ok()) return UsageError(loaded.status().message());
    tokenizer = std::move(*loaded);
  } else if (!args.prompts.empty() || !config.stop.empty()) {
    return UsageError("no tokenizer.json in " + options.model_dir +
                      ": --prompt and \"stop\" need one (use --prompt-ids)");
  }
  auto prompts = BuildPrompts(args, config, tokenizer.get());
  if (!prompts.ok()) return UsageError(prompts.status().message());
  auto model_config = LoadModelConfig(options.model_dir);
  if (!model_config.ok()) return UsageError(model_config.status().message());
  // The engine refuses these too, but only after loading the weights.
  for (size_t i = 0; i < prompts->size(); ++i) {
    const auto len = static_cast<int64_t>((*prompts)[i].size());
    if (len + config.max_new_tokens > options.max_model_len) {
      return UsageError(
          fmt::format("prompt {} ({} tokens) + max_new_tokens ({}) exceeds --max-model-len {}",
                      i + 1, len, config.max_new_tokens, options.max_model_len));
    }
  }

  LogModel(*model);
  auto engine = CreateLocalEngine(options);
  if (!engine.ok()) {
    std::cerr << "dsv4 generate: " << engine.status().message() << "\n";
    return engine.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  GenerateJob job;
  job.prompts = std::move(*prompts);
  job.config = config;
  job.tokenizer = tokenizer.get();
  job.eos_token_id = static_cast<int32_t>(model_config->eos_token_id);
  job.stream = config.stream ? &std::cout : nullptr;
  GenerateStats stats;
  auto results = RunGenerate(**engine, job, &stats);
  (*engine)->Shutdown();
  if (!results.ok()) return UsageError(results.status().message());
  if (config.stream) std::cout << "\n";
  PrintResults(*results, job, stats, options.num_speculative_tokens);
  // A failed request (e.g. non-finite logits from a corrupt checkpoint) is
  // a failed run: one line per such prompt on stderr, naming the step.
  int rc = 0;
  for (size_t i = 0; i < results->size(); ++i) {
    if ((*results)[i].error.ok()) continue;
    std::cerr << "dsv4 generate: prompt " << i + 1 << ": " << (*results)[i].error.message() << "\n";
    rc = 1;
  }
  return rc;
}

}  // namespace

void RegisterGenerate(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Offline generation through the serving engine (continuous batching, MTP)");
  AddEngineFlags(cmd, &args->engine);
  cmd->add_option("--prompt", args->prompts, "Prompt text (repeatable; needs tokenizer.json)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, e.g. 1,2,3 (repeatable)");
  cmd->add_option("--generate-config", args->generate_config,
                  R"(Sampling and stopping as JSON, e.g. {"max_new_tokens":32,"temperature":0.7})");
  cmd->add_flag("--chat", args->chat,
                "Apply the chat encoding to each --prompt as one user message (thinking off)");
  cmd->callback([args, exit_code] { *exit_code = RunGenerateCommand(*args); });
}

}  // namespace dsv4::cli
