// eval: perplexity of a model over a UTF-8 text file (docs/eval.md), on the
// bare forward pass (src/eval), not through the serving engine.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/logging.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "checkpoint/model_config.h"
#include "commands.h"
#include "default_model.h"
#include "eval/perplexity.h"
#include "model/model.h"
#include "text/tokenizer.h"

namespace dsv4::cli {
namespace {

constexpr int64_t kDefaultContext = 512;  // dsv4-mini's training sequence length

struct EvalArgs {
  std::string model;
  std::string text;
  std::optional<int64_t> context;
  std::optional<int64_t> stride;
  int64_t batch = 4;
  int threads = 0;
  bool no_mtp = false;
  bool json = false;
  std::string prepacked = "auto";
};

// A bad flag or input: one line on stderr, exit status 2.
int InputError(const std::string& message) {
  std::cerr << "dsv4 eval: " << message << "\n";
  return 2;
}

Result<std::string> ReadText(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFound("--text {}: no such file", path);
  if (!std::filesystem::is_regular_file(path, ec)) {
    return InvalidArgument("--text {}: not a regular file", path);
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream data;
  data << in.rdbuf();
  if (!in.good() && !in.eof()) return IoError("--text {}: cannot read", path);
  if (data.str().empty()) return InvalidArgument("--text {} is empty", path);
  return data.str();
}

std::string ModeText(const eval::PerplexityReport& r) {
  if (r.stride == r.context) {
    return "chunked: disjoint windows, every token but each window's first is scored";
  }
  return fmt::format(
      "sliding: every token but the text's first is scored once, with at least {} tokens of "
      "context after the first window",
      r.context - r.stride);
}

nlohmann::ordered_json HeadJson(const eval::HeadStats& h) {
  return {{"scored", h.scored},
          {"nll_sum", h.nll_sum},
          {"mean_nll", h.mean_nll()},
          {"perplexity", h.perplexity()},
          {"top1_accuracy", h.top1_rate()}};
}

void PrintJson(const EvalArgs& a, const std::string& model_dir, int64_t text_bytes, int threads,
               const eval::PerplexityReport& r) {
  nlohmann::ordered_json j;
  j["model"] = model_dir;
  j["text"] = a.text;
  j["text_bytes"] = text_bytes;
  j["tokens"] = r.num_tokens;
  j["context"] = r.context;
  j["stride"] = r.stride;
  j["mode"] = r.stride == r.context ? "chunked" : "sliding";
  j["windows"] = r.num_windows;
  j["batch"] = a.batch;
  j["threads"] = threads;
  j["forward_tokens"] = r.forward_tokens;
  j["seconds"] = r.seconds;
  j["scored_tokens_per_second"] =
      r.seconds > 0 ? static_cast<double>(r.main.scored) / r.seconds : 0.0;
  j["forward_tokens_per_second"] =
      r.seconds > 0 ? static_cast<double>(r.forward_tokens) / r.seconds : 0.0;
  j["main"] = HeadJson(r.main);
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (const eval::ContextBucket& b : r.buckets) {
    nlohmann::ordered_json e = HeadJson(b.stats);
    e["context_min"] = b.min_context;
    e["context_max"] = b.max_context;
    buckets.push_back(std::move(e));
  }
  j["main"]["by_context"] = std::move(buckets);
  if (r.mtp_note.empty()) {
    j["mtp"] = HeadJson(r.mtp);
    j["mtp"]["draft_acceptance"] =
        r.mtp.scored > 0 ? static_cast<double>(r.mtp_agree) / static_cast<double>(r.mtp.scored)
                         : 0.0;
  } else {
    j["mtp"] = nullptr;
    j["mtp_note"] = r.mtp_note;
  }
  std::cout << j.dump(2) << "\n";
}

void PrintHuman(const EvalArgs& a, int64_t text_bytes, int threads,
                const eval::PerplexityReport& r) {
  std::cout << fmt::format("text: {} tokens ({} bytes) from {}\n", r.num_tokens, text_bytes,
                           a.text);
  std::cout << fmt::format("windows: {} of up to {} tokens, stride {} ({}); batch {}, {} threads\n",
                           r.num_windows, r.context, r.stride, ModeText(r), a.batch, threads);
  std::cout << fmt::format(
      "main: {} tokens scored, mean NLL {:.4f} nats, perplexity {:.3f}, top-1 accuracy {:.2f}%\n",
      r.main.scored, r.main.mean_nll(), r.main.perplexity(), 100 * r.main.top1_rate());
  std::cout << "main by context (tokens before the target in its window):\n";
  for (const eval::ContextBucket& b : r.buckets) {
    const std::string range = b.min_context == b.max_context
                                  ? std::to_string(b.min_context)
                                  : fmt::format("{}-{}", b.min_context, b.max_context);
    std::cout << fmt::format("  {:>11}: {:>8} tokens, mean NLL {:.4f}, perplexity {:.3f}\n", range,
                             b.stats.scored, b.stats.mean_nll(), b.stats.perplexity());
  }
  if (r.mtp_note.empty()) {
    const double accept = r.mtp.scored > 0
                              ? static_cast<double>(r.mtp_agree) / static_cast<double>(r.mtp.scored)
                              : 0.0;
    std::cout << fmt::format(
        "mtp (token q+2 from the true q+1): {} tokens scored, mean NLL {:.4f} nats, perplexity "
        "{:.3f}, top-1 accuracy {:.2f}%, draft acceptance {:.2f}% (MTP argmax = main argmax)\n",
        r.mtp.scored, r.mtp.mean_nll(), r.mtp.perplexity(), 100 * r.mtp.top1_rate(), 100 * accept);
  } else {
    std::cout << "mtp: not scored: " << r.mtp_note << "\n";
  }
  const double secs = std::max(r.seconds, 1e-9);
  std::cout << fmt::format("time: {:.2f} s, {:.1f} scored tokens/s, {:.1f} forward tokens/s\n",
                           r.seconds, static_cast<double>(r.main.scored) / secs,
                           static_cast<double>(r.forward_tokens) / secs);
}

int RunEval(EvalArgs& a) {
  auto location = ResolveModel(a.model);
  if (!location.ok()) return InputError(location.status().message());
  const std::string& dir = location->dir;
  auto cfg = checkpoint::LoadModelConfig(dir);
  if (!cfg.ok()) return InputError(cfg.status().message());
  eval::PerplexityOptions options;
  options.context = a.context.value_or(std::min(kDefaultContext, cfg->max_position_embeddings));
  options.stride = a.stride.value_or(0);
  if (a.stride && *a.stride == 0) return InputError("--stride must be at least 1, got 0");
  options.batch = a.batch;
  options.mtp = !a.no_mtp;
  if (Status s = eval::CheckOptions(*cfg, options); !s.ok()) {
    return InputError("--context/--stride: " + s.message());
  }
  auto text = ReadText(a.text);
  if (!text.ok()) return InputError(text.status().message());
  auto tokenizer = text::Tokenizer::Load(dir + "/tokenizer.json");
  if (!tokenizer.ok()) return InputError(tokenizer.status().message());
  const std::vector<int32_t> tokens = (*tokenizer)->Encode(*text);
  if (tokens.size() < 2) {
    return InputError(fmt::format("--text {} encodes to {} token(s); perplexity needs at least 2",
                                  a.text, tokens.size()));
  }

  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= cfg->vocab_size) {
      return InputError(fmt::format(
          "--text {}: token {} (id {}) is outside the model's vocabulary of {} ids; the "
          "tokenizer does not match the model",
          a.text, i, tokens[i], cfg->vocab_size));
    }
  }

  LogModel(*location);
  model::ModelOptions model_options;
  model_options.prepacked = a.prepacked;
  model_options.load_mtp = options.mtp;
  auto model = model::Model::Load(dir, model_options);
  if (!model.ok()) {
    std::cerr << "dsv4 eval: " << model.status().message() << "\n";
    return 1;
  }
  auto pool_or = ThreadPool::Create(a.threads > 0 ? a.threads : ThreadPool::DefaultThreads());
  if (!pool_or.ok()) {
    std::cerr << "dsv4 eval: " << pool_or.status().message() << "\n";
    return 1;
  }
  ThreadPool& pool = **pool_or;
  // base/progress.h: a live line on a terminal, a plain line every 10 s
  // otherwise; created at the first report, which knows the total.
  std::optional<Progress> progress;
  int64_t reported = 0;
  options.on_progress = [&progress, &reported](const eval::Progress& p) {
    if (!progress) progress.emplace("eval tokens", p.total, ProgressUnit::kItems);
    progress->Add(p.scored - reported);
    reported = p.scored;
  };
  auto report = eval::EvaluatePerplexity(**model, tokens, options, &pool);
  if (progress) {
    progress->Finish();
    if (report.ok()) DSV4_LOG_INFO("{}", progress->Summary());
  }
  if (!report.ok()) {
    std::cerr << "dsv4 eval: " << report.status().message() << "\n";
    return report.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const auto bytes = static_cast<int64_t>(text->size());
  if (a.json) {
    PrintJson(a, dir, bytes, pool.num_threads(), *report);
  } else {
    PrintHuman(a, bytes, pool.num_threads(), *report);
  }
  return 0;
}

}  // namespace

void RegisterEval(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Perplexity over a UTF-8 text file (main model and MTP head). The text is tokenized "
      "without BOS and cut into windows of --context tokens starting every --stride tokens; "
      "each window runs as a fresh sequence. Chunked (stride = context, the default): every "
      "token but each window's first is scored. Sliding (stride < context): each window scores "
      "only the tokens no earlier window scored, so every token but the text's first is scored "
      "once. See docs/eval.md");
  cmd->add_option("--model", args->model, kModelFlagHelp);
  cmd->add_option("--text", args->text, "UTF-8 text file to score")->required();
  cmd->add_option("--context", args->context,
                  "Tokens per window (default: 512, at most max_position_embeddings)");
  cmd->add_option("--stride", args->stride,
                  "Tokens between window starts, 1..context (default: context = chunked)");
  cmd->add_option("--batch", args->batch, "Windows per forward call (one cache slot each)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Compute threads (0 = every CPU)")
      ->check(ThreadsRange())
      ->capture_default_str();
  cmd->add_flag("--no-mtp", args->no_mtp, "Skip the MTP head (faster)");
  cmd->add_flag("--json", args->json, "Print one JSON object instead of the human-readable lines");
  cmd->add_option("--prepacked", args->prepacked,
                  "Prepacked sidecar: auto, off or a path (docs/prepack.md)")
      ->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = RunEval(*args); });
}

}  // namespace dsv4::cli
