// generate: greedy offline generation from token ids (the direct model loop;
// the serving engine's continuous batching replaces it when it lands).
#include <chrono>
#include <iostream>
#include <sstream>

#include "base/thread_pool.h"
#include "commands.h"
#include "model/model.h"

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

struct GenerateArgs {
  std::string model;
  std::string prompt_ids;
  int64_t max_new_tokens = 16;
  int threads = 0;
};

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int RunGenerate(const GenerateArgs& args) {
  std::vector<int32_t> prompt;
  if (!ParseIdList(args.prompt_ids, &prompt)) {
    std::cerr << "dsv4 generate: --prompt-ids must be a comma-separated list of token ids\n";
    return 2;
  }
  auto model_or = Model::Load(args.model);
  if (!model_or.ok()) {
    std::cerr << "dsv4 generate: " << model_or.status().message() << "\n";
    return 1;
  }
  const Model& model = **model_or;
  const int64_t vocab = model.config().vocab_size;
  for (int32_t id : prompt) {
    if (id >= vocab) {
      std::cerr << "dsv4 generate: prompt id " << id << " is outside the vocabulary of " << vocab
                << "\n";
      return 2;
    }
  }
  ThreadPool pool(args.threads > 0 ? args.threads : ThreadPool::DefaultThreads());
  auto cache = model.NewCache(1);
  Workspace ws;
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> out;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> step_ids = prompt;
  int64_t pos = 0;
  for (int64_t i = 0; i < args.max_new_tokens; ++i) {
    ForwardBatch batch;
    batch.Add(/*cache_slot=*/0, pos, step_ids);
    batch.logit_rows = {batch.num_tokens() - 1};
    ForwardOutputs fo;
    fo.logits = logits.data();
    Status s = model.Forward(batch, *cache, fo, ws, &pool);
    if (!s.ok()) {
      std::cerr << "dsv4 generate: " << s.message() << "\n";
      return 1;
    }
    pos += static_cast<int64_t>(step_ids.size());
    const int32_t next = Argmax(logits.data(), vocab);
    out.push_back(next);
    step_ids = {next};
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "token_ids: [";
  for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? ", " : "") << out[i];
  std::cout << "]\n";
  std::cout << "[generate] " << out.size() << " tokens in " << sec << "s ("
            << static_cast<double>(out.size()) / sec << " tok/s, prompt " << prompt.size()
            << " tokens, " << pool.num_threads() << " threads)\n";
  return 0;
}

}  // namespace

void RegisterGenerate(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Offline greedy generation");
  cmd->add_option("--model", args->model, "Checkpoint directory")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, e.g. 1,2,3")->required();
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Compute threads (0 = all CPUs)");
  cmd->callback([args, exit_code] { *exit_code = RunGenerate(*args); });
}

}  // namespace dsv4::cli
