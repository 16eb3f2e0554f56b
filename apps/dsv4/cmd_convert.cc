// convert: native FP8 + MXFP4 checkpoint -> W8A8 (docs/convert.md).
#include <sys/resource.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "commands.h"
#include "tools/convert.h"

namespace dsv4::cli {

void RegisterConvert(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<tools::ConvertOptions>();
  opts->num_threads = 0;
  CLI::App* cmd = app.add_subcommand(
      "convert", "Convert a native DeepSeek-V4 checkpoint to W8A8 (INT8 per output channel)");
  cmd->add_option("--input-dir", opts->input_dir, "Native FP8 checkpoint directory")->required();
  AddOutputOption(cmd, &opts->output_dir, "New W8A8 checkpoint directory (required)",
                  "--output-dir");
  cmd->add_flag("--dry-run", opts->dry_run,
                "Validate the source and print the plan; write nothing");
  cmd->add_option("--threads", opts->num_threads,
                  "Shards converted in parallel (0 = one per CPU, at most 8)")
      ->check(ThreadsRange())
      ->capture_default_str();
  cmd->add_flag("--resume", opts->resume,
                "Continue an interrupted conversion (finished shards are validated and kept)");
  cmd->callback([opts, exit_code] {
    if (opts->output_dir.empty()) {
      std::cerr << "dsv4 convert: --output is required\n";
      *exit_code = 2;
      return;
    }
    opts->log = [](const std::string& line) { std::cout << line << std::endl; };
    opts->progress = !opts->dry_run;
    if (opts->num_threads <= 0) {
      opts->num_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
    }
    Result<tools::ConvertSummary> r = tools::ConvertToW8a8(*opts);
    if (!r.ok()) {
      // One prefix and exit-status convention for every subcommand
      // (docs/deploy.md "Errors").
      std::cerr << "dsv4 convert: " << r.status().message() << "\n";
      *exit_code = ExitCodeFor(r.status());
      return;
    }
    struct rusage ru {};
    ::getrusage(RUSAGE_SELF, &ru);
    if (!opts->dry_run) {
      std::cout << "Shards converted: " << r->shards_converted << ", resumed: " << r->shards_resumed
                << ", source shards re-hashed: " << r->source_shards_hashed
                << "\nPeak RSS: " << ru.ru_maxrss / 1024 << " MiB\n";
    }
  });
}

}  // namespace dsv4::cli
