// Subcommands of the dsv4 CLI.  Each Register* adds its subcommand to `app`;
// when the subcommand runs, its exit status is stored in *exit_code
// (0 success, 1 failure of the job, 2 bad flags or input).
#pragma once

#include <CLI/CLI.hpp>

#include "base/thread_pool.h"

namespace dsv4::cli {

void RegisterMakeTiny(CLI::App& app, int* exit_code);
void RegisterCheckGolden(CLI::App& app, int* exit_code);
void RegisterGenerate(CLI::App& app, int* exit_code);
void RegisterServe(CLI::App& app, int* exit_code);
void RegisterBench(CLI::App& app, int* exit_code);
void RegisterConvert(CLI::App& app, int* exit_code);
void RegisterPrepack(CLI::App& app, int* exit_code);
void RegisterTokenize(CLI::App& app, int* exit_code);
void RegisterEval(CLI::App& app, int* exit_code);

// The range of every --threads flag: 0 (every CPU) to kMaxThreads.
inline CLI::Range ThreadsRange() { return CLI::Range(0, kMaxThreads); }

// Parses "1,2,3" into ids; false on a malformed list.
bool ParseIdList(const std::string& text, std::vector<int32_t>* ids);

}  // namespace dsv4::cli
