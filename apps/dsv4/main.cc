// dsv4: the one command line (serve | generate | convert | prepack | bench | make-tiny ...).
#include <cstdio>

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"dsv4: DeepSeek-V4 inference and serving engine"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
