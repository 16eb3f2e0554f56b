// dsv4: the one command line.
#include <cstdio>
#include <string>

#include "base/logging.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dsv4: DeepSeek-V4 inference and serving engine"};
  app.require_subcommand(1);
  // Bad flags: exactly one line on stderr ("dsv4: <what is wrong>"), exit 2.
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return std::string("dsv4: ") + e.what() + "\n"; });
  int exit_code = 0;
  dsv4::cli::RegisterMakeTiny(app, &exit_code);
  dsv4::cli::RegisterCheckGolden(app, &exit_code);
  dsv4::cli::RegisterGenerate(app, &exit_code);
  dsv4::cli::RegisterServe(app, &exit_code);
  dsv4::cli::RegisterBench(app, &exit_code);
  dsv4::cli::RegisterEval(app, &exit_code);
  dsv4::cli::RegisterConvert(app, &exit_code);
  dsv4::cli::RegisterPrepack(app, &exit_code);
  dsv4::cli::RegisterTokenize(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Bad flags: CLI11 prints one clear line (or the help); usage errors exit 2.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
