// The dsv4 command line, shared by the dsv4 binary (main.cc) and test builds
// that add hooks (commands.h ServeHooks).
#include <cstdlib>
#include <regex>
#include <string>
#include <utility>

#include "base/logging.h"
#include "commands.h"

namespace dsv4::cli {

namespace {

// Upper bounds at or above this are sanity caps, not advice: --help shows
// only the lower bound.
constexpr double kCapBound = 1 << 20;

// CLI11 describes a Range validator as "INT in [2 - 1099511627776]" and
// --help shows it after the option's type, the default after an "="
// ("INT:INT in [2 - 1099511627776]=4096").  Each such option's type becomes
// "INT in 1..1024", or "INT >= 2" when the upper bound is a cap, and every
// option with a default reads "TYPE (default 4096)"; the checks themselves
// (and their error messages) are unchanged.
void MakeHelpReadable(CLI::App* app) {
  static const std::regex kRange(R"(^(\w+) in \[(\S+) - (\S+)\]$)");
  for (CLI::Option* opt : app->get_options()) {
    for (int i = 0;; ++i) {
      CLI::Validator* v = nullptr;
      try {
        v = opt->get_validator(i);
      } catch (const CLI::OptionNotFound&) {
        break;
      }
      std::smatch m;
      const std::string desc = v->get_description();
      if (!std::regex_match(desc, m, kRange)) continue;
      const std::string type = m[1] == "FLOAT" ? "NUM" : m[1].str();
      const double hi = std::strtod(m[3].str().c_str(), nullptr);
      opt->type_name(hi >= kCapBound ? type + " >= " + m[2].str()
                                     : type + " in " + m[2].str() + ".." + m[3].str());
      v->description("");
    }
    const bool single = opt->get_type_size() != 0 && opt->get_expected_max() == 1;
    if (single && !opt->get_default_str().empty() && !opt->get_required() &&
        opt->get_option_text().empty()) {
      opt->option_text(opt->get_type_name() + " (default " + opt->get_default_str() + ")");
    }
  }
  for (CLI::App* sub : app->get_subcommands({})) MakeHelpReadable(sub);
}

}  // namespace

CLI::Option* AddOutputOption(CLI::App* cmd, std::string* path, const std::string& help,
                             const std::string& old_name) {
  CLI::Option* out = cmd->add_option("-o,--output", *path, help);
  if (!old_name.empty()) {
    // The earlier spelling keeps working, hidden from --help (group "").
    cmd->add_option(old_name, *path, "Old spelling of --output")->group("");
  }
  return out;
}

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
  MakeHelpReadable(&app);
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
