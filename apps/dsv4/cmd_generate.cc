// generate: offline generation through the serving engine (docs/sampling.md §5).
// Every prompt is submitted at once to a local AsyncEngine, so continuous
// batching, chunked prefill and MTP speculation run exactly as in `serve`.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/file_util.h"
#include "base/logging.h"
#include "chat_prompt.h"
#include "checkpoint/model_config.h"
#include "commands.h"
#include "default_model.h"
#include "engine_flags.h"
#include "generate_config.h"
#include "generate_driver.h"
#include "generate_output.h"
#include "generation_defaults.h"
#include "launch/engine_setup.h"
#include "profile/profile.h"
#include "residency.h"
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

// The flat sampling flags (generate_config.h SamplingFlags); each overrides
// the --generate-config field of the same name.
void AddSamplingFlags(CLI::App* cmd, SamplingFlags* f) {
  const std::string group = "Sampling (override --generate-config)";
  cmd->add_option("--temperature", f->temperature, "0 = greedy")->group(group);
  cmd->add_option("--top-p", f->top_p, "Nucleus mass in (0, 1]")->group(group);
  cmd->add_option("--top-k", f->top_k, "Most likely tokens kept (0 or -1 = all)")->group(group);
  cmd->add_option("--min-p", f->min_p, "Drop tokens below min-p x the top probability")
      ->group(group);
  cmd->add_option("--presence-penalty", f->presence_penalty, "In [-2, 2]")->group(group);
  cmd->add_option("--frequency-penalty", f->frequency_penalty, "In [-2, 2]")->group(group);
  cmd->add_option("--repetition-penalty", f->repetition_penalty, "> 0 (1 = off)")->group(group);
  cmd->add_option("--seed", f->seed, "Random seed of every prompt's stream")->group(group);
  cmd->add_option("--max-tokens", f->max_tokens, "Output tokens at most (max_new_tokens)")
      ->group(group);
  cmd->add_option("--min-tokens", f->min_tokens, "Output tokens before any stop token or string")
      ->group(group);
  cmd->add_option("--logprobs", f->logprobs, "Top logprobs per output token, 0..20")->group(group);
  cmd->add_option("--stop", f->stop, "Stop string (repeatable)")->group(group);
  cmd->add_option("--stop-token-ids", f->stop_token_ids, "Stop token ids (repeatable)")
      ->delimiter(',')
      ->group(group);
  cmd->add_flag("--ignore-eos", f->ignore_eos, "Do not stop at EOS")->group(group);
  cmd->add_flag("--include-stop-str-in-output", f->include_stop_str_in_output,
                "Keep a matched stop string at the end of the text")
      ->group(group);
}

struct GenerateArgs {
  EngineFlags engine;
  ProfileFlagArgs profile;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::vector<std::string> chat_requests;
  std::string generate_config;
  std::string generation_config = "auto";
  SamplingFlags sampling;
  ResidencyFlags residency;
  bool chat = false;
  bool thinking = false;
};

// A usage error: one line on stderr, exit status 2.
int UsageError(const std::string& message) {
  std::cerr << "dsv4 generate: " << message << "\n";
  return 2;
}

// How chat prompts are parsed: as `dsv4 serve` would with this model and
// --max-model-len, and --thinking as its --default-thinking.
server::ServerOptions ChatParseOptions(const GenerateArgs& args, const GenerateConfig& config) {
  server::ServerOptions options;
  options.served_model_name = ModelName(args.engine.options.model_dir);
  options.max_model_len = args.engine.options.max_model_len;
  options.default_thinking = args.thinking || config.thinking;
  // The chat parser fills what a request file leaves out from the run's
  // settings (generation_config.json < --generate-config < flags).
  options.default_sampling = config.sampling;
  return options;
}

// Prompts: --prompt texts first (in order), then --prompt-ids lists, then
// --chat-request files.
Result<std::vector<GeneratePrompt>> BuildPrompts(const GenerateArgs& args,
                                                 const GenerateConfig& config,
                                                 const text::Tokenizer* tokenizer) {
  const server::ServerOptions chat_options = ChatParseOptions(args, config);
  std::vector<GeneratePrompt> prompts;
  for (size_t i = 0; i < args.prompts.size(); ++i) {
    GeneratePrompt p;
    if (args.chat) {
      auto parsed = ChatTextRequest(args.prompts[i], config, *tokenizer, chat_options);
      if (!parsed.ok()) return parsed.status().WithPrefix(fmt::format("--chat prompt {}", i + 1));
      p.ids = parsed->prompts.at(0);
      p.chat = std::move(*parsed);
      p.label = "chat";
    } else {
      p.ids = tokenizer->Encode(args.prompts[i]);
      if (p.ids.empty()) return InvalidArgument("--prompt {} encodes to no tokens", i + 1);
    }
    prompts.push_back(std::move(p));
  }
  for (const std::string& list : args.prompt_ids) {
    GeneratePrompt p;
    if (!ParseIdList(list, &p.ids)) {
      return InvalidArgument("--prompt-ids must be a comma-separated list of token ids, got \"{}\"",
                             list);
    }
    prompts.push_back(std::move(p));
  }
  for (const std::string& path : args.chat_requests) {
    DSV4_ASSIGN_OR_RETURN(server::ParsedRequest parsed,
                          LoadChatRequest(path, config, *tokenizer, chat_options));
    GeneratePrompt p;
    p.ids = parsed.prompts.at(0);
    p.chat = std::move(parsed);
    p.label = path;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

Status CheckCombinations(const GenerateArgs& args, const GenerateConfig& config) {
  const size_t num_prompts =
      args.prompts.size() + args.prompt_ids.size() + args.chat_requests.size();
  if (num_prompts == 0) {
    return InvalidArgument("give at least one --prompt, --prompt-ids or --chat-request");
  }
  if (config.stream && num_prompts != 1) {
    return InvalidArgument("\"stream\": true needs exactly one prompt, got {}", num_prompts);
  }
  if (args.chat && !args.prompt_ids.empty()) {
    return InvalidArgument("--chat applies to --prompt text, not to --prompt-ids");
  }
  const bool any_chat = (args.chat && !args.prompts.empty()) || !args.chat_requests.empty();
  if (!any_chat && (args.thinking || config.thinking || config.reasoning_effort)) {
    return InvalidArgument(
        "--thinking, \"thinking\" and \"reasoning_effort\" need --chat or --chat-request");
  }
  return Status::Ok();
}

int RunGenerateCommand(GenerateArgs& args) {
  Status s = ResolveEngineFlags(&args.engine);
  if (!s.ok()) return UsageError(s.message());
  const Result<profile::ProfileFlags> profile_flags = ResolveProfileFlags(args.profile);
  if (!profile_flags.ok()) return UsageError(profile_flags.status().message());
  auto model = ResolveModel(args.engine.options.model_dir);
  if (!model.ok()) return UsageError(model.status().message());
  args.engine.options.model_dir = model->dir;
  // One precedence rule (docs/sampling.md §5): dsv4's defaults <
  // generation_config.json (--generation-config) < --generate-config JSON <
  // the flat flags.
  auto defaults = LoadGenerationDefaults(args.generation_config, model->dir);
  if (!defaults.ok()) return UsageError(defaults.status().message());
  GenerateConfig config;
  config.sampling = defaults->sampling;
  if (defaults->max_new_tokens > 0) config.max_new_tokens = defaults->max_new_tokens;
  if (!args.generate_config.empty()) {
    auto parsed = ParseGenerateConfig(args.generate_config, config);
    if (!parsed.ok()) return UsageError("--generate-config: " + parsed.status().message());
    config = std::move(*parsed);
  }
  s = ApplySamplingFlags(args.sampling, &config);
  if (!s.ok()) return UsageError(s.message());
  s = CheckCombinations(args, config);
  if (!s.ok()) return UsageError(s.message());

  const launch::EngineOptions& options = args.engine.options;
  const std::string tokenizer_path = options.model_dir + "/tokenizer.json";
  std::unique_ptr<text::Tokenizer> tokenizer;
  // "Cannot tell" (a symlink loop, no permission) is an error, not "absent".
  auto has_tokenizer = PathExists(tokenizer_path);
  if (!has_tokenizer.ok()) return UsageError(has_tokenizer.status().message());
  if (*has_tokenizer) {
    auto loaded = text::Tokenizer::Load(tokenizer_path);
    if (!loaded.ok()) return UsageError(loaded.status().message());
    tokenizer = std::move(*loaded);
  } else if (!args.prompts.empty() || !args.chat_requests.empty() || !config.stop.empty()) {
    return UsageError("no tokenizer.json in " + options.model_dir +
                      ": --prompt, --chat-request and \"stop\" need one (use --prompt-ids)");
  }
  auto prompts = BuildPrompts(args, config, tokenizer.get());
  if (!prompts.ok()) return UsageError(prompts.status().message());
  auto model_config = checkpoint::LoadModelConfig(options.model_dir);
  if (!model_config.ok()) return UsageError(model_config.status().message());
  // The engine refuses these too, but only after loading the weights (chat
  // prompts were checked by the server's parser, with their own max_tokens).
  for (size_t i = 0; i < prompts->size(); ++i) {
    if ((*prompts)[i].chat) continue;
    const auto len = static_cast<int64_t>((*prompts)[i].ids.size());
    if (len + config.max_new_tokens > options.max_model_len) {
      return UsageError(
          fmt::format("prompt {} ({} tokens) + max_new_tokens ({}) exceeds --max-model-len {}",
                      i + 1, len, config.max_new_tokens, options.max_model_len));
    }
  }

  LogModel(*model);
  DSV4_LOG_INFO("{}", DescribeGenerationDefaults(*defaults, args.generation_config));
  if (Status placed = PlaceMemory(args.residency, &args.engine.options); !placed.ok()) {
    std::cerr << "dsv4 generate: " << placed.message() << "\n";
    return ExitCodeFor(placed);
  }
  auto engine = launch::CreateLocalEngine(options);
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
  // The profile covers the generation window (as the reference's offline
  // mode): from the first submission to the last output, not the load.
  profile::SetThreadName("main");
  s = StartProfile(*profile_flags);
  if (!s.ok()) {
    std::cerr << "dsv4 generate: " << s.message() << "\n";
    return 1;
  }
  auto results = RunGenerate(**engine, job, &stats);
  (*engine)->Shutdown();
  if (profile_flags->enabled && !StopProfile("dsv4 generate").ok()) return 1;
  if (!results.ok()) return UsageError(results.status().message());
  if (config.stream) std::cout << "\n";
  PrintResults(std::cout, *results, job, stats, options.num_speculative_tokens);
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
  AddProfileFlags(cmd, &args->profile);
  cmd->add_option("--prompt", args->prompts, "Prompt text (repeatable; needs tokenizer.json)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, e.g. 1,2,3 (repeatable)");
  cmd->add_option("--generate-config", args->generate_config,
                  R"(Sampling and stopping as JSON, e.g. {"max_new_tokens":32,"temperature":0.7})");
  cmd->add_option("--generation-config", args->generation_config, kGenerationConfigHelp)
      ->capture_default_str();
  AddSamplingFlags(cmd, &args->sampling);
  AddResidencyFlags(cmd, &args->residency);
  cmd->add_flag("--chat", args->chat,
                "Apply the chat encoding to each --prompt as one user message and print the "
                "output parsed as the server does (reasoning, content, tool calls)");
  cmd->add_flag("--thinking", args->thinking,
                "Thinking mode for chat prompts that do not choose (serve's --default-thinking)");
  cmd->add_option("--chat-request", args->chat_requests,
                  "A chat-completions request body (JSON file: messages, tools, thinking, "
                  "sampling), parsed as `dsv4 serve` parses it (repeatable)");
  cmd->callback([args, exit_code] { *exit_code = RunGenerateCommand(*args); });
}

}  // namespace dsv4::cli
