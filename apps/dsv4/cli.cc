// The dsv4 command line, shared by the dsv4 binary (main.cc) and test builds
// that add hooks (commands.h ServeHooks).
#include <string>
#include <utility>

#include "base/logging.h"
#include "commands.h"

namespace dsv4::cli {

int RunCli(int argc, char** argv, ServeHooks serve_hooks) {
  CLI::App app{"dsv4: DeepSeek-V4 inference and serving engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dsv4 ") + kVersion, "Print the version and exit");
  // --log-level before or after the subcommand (fallthrough), set as it is
  // parsed, so it holds before any subcommand runs.
  app.fallthrough();
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& level) {
           SetLogLevel(level == "debug"     ? LogLevel::kDebug
                       : level == "warning" ? LogLevel::kWarning
                       : level == "error"   ? LogLevel::kError
                                            : LogLevel::kInfo);
         },
         "Least severe log lines to print: debug, info (default), warning or error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}));
  // Bad flags: exactly one line on stderr ("dsv4: <what is wrong>"), exit 2.
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return std::string("dsv4: ") + e.what() + "\n"; });
  int exit_code = 0;
  RegisterMakeTiny(app, &exit_code);
  RegisterCheckGolden(app, &exit_code);
  RegisterGenerate(app, &exit_code);
  RegisterServe(app, &exit_code, std::move(serve_hooks));
  RegisterBench(app, &exit_code);
  RegisterEval(app, &exit_code);
  RegisterConvert(app, &exit_code);
  RegisterPrepack(app, &exit_code);
  RegisterTokenize(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Bad flags: CLI11 prints one clear line (or the help); usage errors exit 2.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace dsv4::cli
