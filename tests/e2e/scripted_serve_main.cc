// dsv4_scripted_serve: the dsv4 command line plus one TEST-ONLY flag,
// `serve --test-script-ids FILE`, which serves scripted token ids through
// ScriptedEngine (tests/server/scripted_engine.h) over the real engine.  Used
// by the end-to-end tests of reasoning and tool-call responses
// (js/server_e2e.mjs); never installed, and the dsv4 binary has no such flag.
// Also `serve --test-start-delay SECONDS`: start-up takes that much longer
// after the model is loaded, so a test sees /health answer 503 before the
// engine is attached (deploy_test.sh).
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "commands.h"
#include "tests/server/scripted_engine.h"

int main(int argc, char** argv) {
  using namespace dsv4;
  struct State {
    std::string script_path;
    double start_delay_seconds = 0;
    std::unique_ptr<server::ScriptedEngine> engine;  // lives until exit
  };
  auto state = std::make_shared<State>();
  cli::ServeHooks hooks;
  hooks.add_flags = [state](CLI::App* serve) {
    serve->add_option("--test-script-ids", state->script_path,
                      "TEST ONLY: replay token ids from FILE instead of the sampled ones "
                      "(one JSON array of ids or string per line)");
    serve
        ->add_option("--test-start-delay", state->start_delay_seconds,
                     "TEST ONLY: seconds start-up waits after the model is loaded")
        ->check(CLI::Range(0.0, 60.0));
  };
  hooks.wrap_engine = [state](engine::AsyncEngine& engine, const text::Tokenizer& tokenizer,
                              int64_t eos_token_id) -> Result<engine::AsyncEngine*> {
    std::this_thread::sleep_for(std::chrono::duration<double>(state->start_delay_seconds));
    if (state->script_path.empty()) return &engine;
    DSV4_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> scripts,
                          server::LoadTokenScripts(state->script_path, tokenizer));
    state->engine =
        std::make_unique<server::ScriptedEngine>(engine, std::move(scripts), eos_token_id);
    return static_cast<engine::AsyncEngine*>(state->engine.get());
  };
  hooks.banner_warning =
      "this is dsv4_scripted_serve, a TEST build: --test-script-ids replays "
      "scripted token ids, --test-start-delay slows start-up";
  return cli::RunCli(argc, argv, std::move(hooks));
}
