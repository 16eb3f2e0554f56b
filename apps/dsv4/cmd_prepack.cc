// prepack: the kernel-ready sidecar beside a checkpoint (docs/prepack.md).
#include <sys/resource.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "tools/prepack.h"

namespace dsv4::cli {

void RegisterPrepack(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<tools::PrepackOptions>();
  CLI::App* cmd = app.add_subcommand(
      "prepack", "Write the kernel-ready weight layout as a sidecar the engine maps at startup");
  cmd->add_option("--model", opts->model_dir, "Checkpoint directory")->required();
  AddOutputOption(cmd, &opts->output,
                  "Sidecar path (default: <model>/dsv4-stacked-r<ranks>.safetensors)");
  cmd->add_option("--ranks", opts->ranks, "Expert-parallel ranks the layout is split for")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--force", opts->force, "Replace an existing sidecar");
  cmd->callback([opts, exit_code] {
    opts->progress = true;
    Result<tools::PrepackSummary> r = tools::Prepack(*opts);
    if (!r.ok()) {
      std::cerr << "dsv4 prepack: " << r.status().message() << "\n";
      *exit_code = ExitCodeFor(r.status());
      return;
    }
    struct rusage ru {};
    ::getrusage(RUSAGE_SELF, &ru);
    std::printf("Wrote %s (%.3f GiB) in %.3f s\n", r->path.c_str(),
                static_cast<double>(r->bytes) / (1ull << 30), r->seconds);
    std::printf("%lld tensors; peak RSS %ld MiB\n", static_cast<long long>(r->num_tensors),
                ru.ru_maxrss / 1024);
  });
}

}  // namespace dsv4::cli
