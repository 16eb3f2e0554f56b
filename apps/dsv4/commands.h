// Subcommands of the dsv4 CLI.  Each Register* adds its subcommand to `app`;
// when the subcommand runs, its exit status is stored in *exit_code
// (0 success, 1 failure of the job, 2 bad flags or input).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/async_engine.h"
#include "text/tokenizer.h"

namespace dsv4::cli {

void RegisterMakeTiny(CLI::App& app, int* exit_code);
void RegisterCheckGolden(CLI::App& app, int* exit_code);
void RegisterGenerate(CLI::App& app, int* exit_code);

// What a test build of the CLI adds to `serve` (tests/e2e/scripted_serve_main.cc:
// scripted token ids for end-to-end tests of reasoning and tool calls).  The
// dsv4 binary passes none, so it carries no test-only flag or code.
struct ServeHooks {
  std::function<void(CLI::App* serve)> add_flags;
  // The engine to serve in place of `engine` (which it may wrap; it must
  // outlive the server), or `engine` itself.  An error exits 2.
  std::function<Result<engine::AsyncEngine*>(
      engine::AsyncEngine& engine, const text::Tokenizer& tokenizer, int64_t eos_token_id)>
      wrap_engine;
  std::string banner_warning;  // printed by the banner when non-empty
};
void RegisterServe(CLI::App& app, int* exit_code, ServeHooks hooks = {});
void RegisterBench(CLI::App& app, int* exit_code);
void RegisterConvert(CLI::App& app, int* exit_code);
void RegisterPrepack(CLI::App& app, int* exit_code);
void RegisterTokenize(CLI::App& app, int* exit_code);
void RegisterEval(CLI::App& app, int* exit_code);

// `-o, --output PATH`, the one spelling of an output path across
// subcommands (docs/tools.md "Output paths"); old_name (e.g. "--out") stays
// accepted as a hidden alias.  The caller checks that a path was given.
CLI::Option* AddOutputOption(CLI::App* cmd, std::string* path, const std::string& help,
                             const std::string& old_name = "");

// The range of every --threads flag: 0 (every CPU) to kMaxThreads.
inline CLI::Range ThreadsRange() { return CLI::Range(0, kMaxThreads); }

// The whole command line: registers every subcommand, parses, runs.  Returns
// the process exit status.
int RunCli(int argc, char** argv, ServeHooks serve_hooks = {});

// The exit-status convention of every subcommand (docs/deploy.md "Errors"):
// 2 for bad flags or input (InvalidArgument, NotFound: a missing model
// directory, an impossible --kv-cache-memory), 1 for a job that failed.
inline int ExitCodeFor(const Status& s) {
  if (s.ok()) return 0;
  const StatusCode c = s.code();
  return c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ? 2 : 1;
}

// What `dsv4 --version` prints after "dsv4 " (bumped by hand with each
// release; docs/deploy.md).
inline constexpr const char* kVersion = "0.1.0";

// Parses "1,2,3" into ids; false on a malformed list.
bool ParseIdList(const std::string& text, std::vector<int32_t>* ids);

}  // namespace dsv4::cli
