// serve: the OpenAI-compatible HTTP server (docs/server.md) over the local
// engine.  Takes every engine flag of `dsv4 generate` plus the server's own.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "default_model.h"
#include "engine_flags.h"
#include "generation_defaults.h"
#include "kernels/dispatch.h"
#include "launch/engine_setup.h"
#include "launch/loading_engine.h"
#include "profile/profile.h"
#include "residency.h"
#include "server/openai_server.h"
#include "text/tokenizer.h"

namespace dsv4::cli {
namespace {

// HTTP worker threads at most (a request in flight holds one; beyond the
// pool, requests wait in its queue).  The pool starts them on demand; the
// count is still checked to be startable before the banner.
constexpr int kMaxHttpThreads = 4096;
// Descriptors kept free of connections (model files, the engine, logs).
constexpr int64_t kSpareDescriptors = 128;
constexpr double kMaxShutdownSeconds = 86400;

// glibc malloc arenas of the server process (docs/server.md "Memory over
// time" has the measurements behind the choice).
constexpr int kServeMallocArenas = 2;

struct ServeArgs {
  EngineFlags engine;
  std::string positional_model;  // `dsv4 serve MODEL`
  std::string model_source;      // where the model directory came from (default_model.h)
  server::ServerOptions server;
  ServeHooks hooks;
  ProfileFlagArgs profile;
  std::string shutdown_timeout = "30";  // seconds, or "inf"
  std::string generation_config = "auto";
  ResidencyFlags residency;
  bool max_connections_given = false;
};

// The first SIGINT/SIGTERM, from the thread that waits for it.  Before
// `ready` (the model still loading) that thread ends the process itself.
struct StopSignal {
  Mutex mu;
  CondVar cv;
  bool ready GUARDED_BY(mu) = false;
  int signal GUARDED_BY(mu) = 0;
};

// --shutdown-timeout: seconds in [0, 86400], or "inf" (wait for every request).
std::string CheckShutdownTimeout(std::string& value) {
  if (value == "inf") return "";
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v < 0 ||
      v > kMaxShutdownSeconds) {
    return "Value " + value + " not in range 0 to 86400 (seconds) or inf";
  }
  return "";
}

std::chrono::milliseconds DrainTime(const std::string& shutdown_timeout) {
  if (shutdown_timeout == "inf") return std::chrono::milliseconds::max();
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::strtod(shutdown_timeout.c_str(), nullptr) * 1000));
}

// Every connection is a descriptor: raise the soft limit toward the hard one
// when --max-connections needs it.  A default that does not fit shrinks to
// what does; an explicit value that does not fit is an error.
Status FitConnectionsToDescriptors(bool given, int64_t* max_connections) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return Status::Ok();
  const auto want = static_cast<rlim_t>(*max_connections + kSpareDescriptors);
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < want) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? want : std::min(want, lim.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= want) return Status::Ok();
  const int64_t fits = static_cast<int64_t>(lim.rlim_cur) - kSpareDescriptors;
  if (given || fits < 16) {
    return InvalidArgument("--max-connections {} needs {} open files; the limit is {} (ulimit -n)",
                           *max_connections, want, lim.rlim_cur);
  }
  *max_connections = fits;
  return Status::Ok();
}

void PrintBanner(const ServeArgs& a, int port) {
  const launch::EngineOptions& e = a.engine.options;
  std::cout << "dsv4 serve\n"
            << "  model:                    " << e.model_dir << " (" << a.model_source
            << ", served as '" << a.server.served_model_name << "')\n"
            << "  parallelism:              dp " << e.dp << ", threads "
            << (e.threads > 0 ? std::to_string(e.threads) + " (--threads)"
                              : std::to_string(ThreadPool::DefaultThreads()) +
                                    " (one per physical core of one NUMA node)")
            << ", kernels " << kernels::IsaName(kernels::ActiveIsa()) << "\n"
            << "  max running requests:     " << e.max_num_seqs << " (queue " << e.max_waiting
            << ", HTTP in flight " << a.server.max_concurrent_requests << ")\n"
            << "  scheduled tokens / step:  " << e.max_num_batched_tokens << " (long prefill chunk "
            << e.long_prefill_token_threshold << ")\n"
            << "  max model len:            " << e.max_model_len << "\n"
            << "  speculative tokens (MTP): " << e.num_speculative_tokens << "\n"
            << "  prefix caching:           " << (e.enable_prefix_caching ? "on" : "off") << "\n"
            << "  API key:                  " << (a.server.api_key.empty() ? "none" : "required")
            << "\n"
            << "  HTTP:                     " << a.server.max_connections << " connections, "
            << a.server.num_http_threads << " workers, header timeout "
            << a.server.header_timeout_seconds << " s, body timeout "
            << a.server.body_timeout_seconds << " s, read timeout " << a.server.read_timeout_seconds
            << " s\n";
  if (!a.hooks.banner_warning.empty()) std::cout << "  WARNING: " << a.hooks.banner_warning << "\n";
  std::cout << "  endpoints: GET /health /v1/models /metrics; POST /v1/chat/completions "
               "/v1/completions /tokenize /detokenize"
            << (a.server.profile ? " /start_profile /stop_profile" : "") << "\n";
  if (a.server.profile) {
    std::cout << "  profile:                  " << profile::LevelsName(a.server.profile_levels)
              << " -> " << a.server.profile_output << " (POST /start_profile, /stop_profile)\n";
  }
  std::cout << "Listening on http://" << a.server.host << ":" << port << "\n"
            << "Application startup complete." << std::endl;
}

int RunServe(ServeArgs& a) {
  // Bound glibc's malloc arenas before any thread starts (docs/server.md
  // "Memory over time"): with the default (8 per core) every HTTP thread
  // that builds a large response can end up with an arena of its own, each
  // keeping its high-water mark, so RSS ratchets up under load.  An explicit
  // MALLOC_ARENA_MAX in the environment wins.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, kServeMallocArenas);
  // Signals go to the sigwait below, never to a random worker thread: block
  // them before any thread starts (threads inherit the mask).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not a crash

  if (Status s = ResolveEngineFlags(&a.engine); !s.ok()) {
    std::cerr << "dsv4 serve: " << s.message() << "\n";
    return 2;
  }
  const Result<profile::ProfileFlags> profile_flags = ResolveProfileFlags(a.profile);
  if (!profile_flags.ok()) {
    std::cerr << "dsv4 serve: " << profile_flags.status().message() << "\n";
    return 2;
  }
  a.server.profile = profile_flags->enabled;
  a.server.profile_output = profile_flags->output;
  a.server.profile_levels = profile_flags->levels;
  if (!a.positional_model.empty()) {
    // `dsv4 serve MODEL` as `vllm serve MODEL`; --model stays.
    if (!a.engine.options.model_dir.empty() && a.engine.options.model_dir != a.positional_model) {
      std::cerr << "dsv4 serve: the model is given twice (" << a.positional_model << " and --model "
                << a.engine.options.model_dir << "); give it once\n";
      return 2;
    }
    a.engine.options.model_dir = a.positional_model;
  }
  auto model = ResolveModel(a.engine.options.model_dir);
  if (!model.ok()) {
    std::cerr << "dsv4 serve: " << model.status().message() << "\n";
    return 2;  // the model named on the command line is bad input, whatever the cause
  }
  a.engine.options.model_dir = model->dir;
  a.model_source = model->source;
  LogModel(*model);
  auto defaults = LoadGenerationDefaults(a.generation_config, model->dir);
  if (!defaults.ok()) {
    std::cerr << "dsv4 serve: " << defaults.status().message() << "\n";
    return 2;
  }
  a.server.default_sampling = defaults->sampling;
  a.server.default_max_tokens = defaults->max_new_tokens;
  DSV4_LOG_INFO("{}", DescribeGenerationDefaults(*defaults, a.generation_config));
  if (a.server.api_key.empty()) {
    if (const char* env = std::getenv("DSV4_API_KEY")) a.server.api_key = env;
  }
  if (a.server.served_model_name.empty()) {
    a.server.served_model_name = ModelName(a.engine.options.model_dir);
  }
  a.server.max_model_len = a.engine.options.max_model_len;
  auto tok = text::Tokenizer::Load(a.engine.options.model_dir + "/tokenizer.json");
  if (!tok.ok()) {
    std::cerr << "dsv4 serve: " << tok.status().message() << "\n";
    return 1;
  }
  if (auto eos = (*tok)->TokenId("<｜end▁of▁sentence｜>")) a.server.eos_token_id = *eos;
  if (a.server.num_http_threads == 0) {
    a.server.num_http_threads =
        static_cast<int>(std::min<int64_t>(a.server.max_concurrent_requests + 8, kMaxHttpThreads));
  }
  if (Status s = CheckThreadsCanStart(a.server.num_http_threads); !s.ok()) {
    std::cerr << "dsv4 serve: --http-threads: " << s.message() << "\n";
    return 1;
  }
  if (Status s = FitConnectionsToDescriptors(a.max_connections_given, &a.server.max_connections);
      !s.ok()) {
    std::cerr << "dsv4 serve: " << s.message() << "\n";
    return 2;
  }
  // The port is bound before the model loads (docs/deploy.md "Ready means
  // ready"): a port in use fails at once, and /health answers 503 "loading"
  // until the model is loaded and a warm-up forward has run.
  launch::LoadingEngine loading;
  server::OpenAiServer http(loading, **tok, a.server);
  if (Status s = http.Bind(); !s.ok()) {
    std::cerr << "dsv4 serve: " << s.message() << "\n";
    return 1;
  }
  std::thread serve_thread([&http] { http.Serve(); });
  DSV4_LOG_INFO("bound http://{}:{}; loading the model (GET /health answers 503 until ready)",
                a.server.host, http.port());
  auto stop = std::make_shared<StopSignal>();
  std::thread([stop, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    MutexLock lock(&stop->mu);
    if (!stop->ready) {
      // Nothing is served yet: no request to drain, and the load cannot be
      // interrupted halfway, so the process ends here.
      std::cerr << "dsv4 serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
                << " while loading the model: exiting" << std::endl;
      std::_Exit(1);
    }
    stop->signal = sig;
    stop->cv.SignalAll();
  }).detach();
  const auto fail = [&](const Status& s) {
    std::cerr << "dsv4 serve: " << s.message() << "\n";
    http.Stop(std::chrono::milliseconds(0));
    serve_thread.join();
    return ExitCodeFor(s);
  };
  // Placement first (the caches and the compute threads inherit it), then
  // the load and residency (--populate, --mlock: inside CreateLocalEngine):
  // /health stays 503 until all are done.
  if (Status s = PlaceMemory(a.residency, &a.engine.options); !s.ok()) return fail(s);
  auto engine = launch::CreateLocalEngine(a.engine.options);
  if (!engine.ok()) return fail(engine.status());
  const Result<double> warm = launch::WarmUp(**engine, 0);
  if (!warm.ok()) return fail(warm.status());
  DSV4_LOG_INFO("warm-up forward (1 prompt token, 1 output token) took {:.3f} s", *warm);
  engine::AsyncEngine* serving = engine->get();
  if (a.hooks.wrap_engine) {
    Result<engine::AsyncEngine*> wrapped =
        a.hooks.wrap_engine(**engine, **tok, a.server.eos_token_id);
    if (!wrapped.ok()) {
      const int rc = fail(wrapped.status());
      return rc == 1 ? 2 : rc;
    }
    serving = *wrapped;
  }
  loading.Attach(serving);
  PrintBanner(a, http.port());
  int sig = 0;
  {
    MutexLock lock(&stop->mu);
    stop->ready = true;
    while (stop->signal == 0) stop->cv.Wait(&stop->mu);
    sig = stop->signal;
  }
  std::cout << "dsv4 serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
            << ": draining requests in flight ("
            << (a.shutdown_timeout == "inf" ? std::string("no time limit")
                                            : "up to " + a.shutdown_timeout + " s")
            << ")" << std::endl;
  http.Stop(DrainTime(a.shutdown_timeout));
  serve_thread.join();
  (*engine)->Shutdown();
  // A session still running at shutdown is written, not lost.
  if (a.server.profile && profile::SessionActive()) (void)StopProfile("dsv4 serve");
  std::cout << "dsv4 serve: stopped" << std::endl;
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code, ServeHooks hooks) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  AddEngineFlags(cmd, &args->engine);
  cmd->add_option("MODEL", args->positional_model,
                  "Checkpoint directory, as `vllm serve MODEL` (same as --model)");
  AddProfileFlags(cmd, &args->profile);
  server::ServerOptions& s = args->server;
  s.served_model_name.clear();
  cmd->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "Port to listen on (0 = any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--served-model-name", s.served_model_name,
                  "Model id clients use (default: the model directory's name)");
  cmd->add_option("--api-key", s.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (default: $DSV4_API_KEY)");
  cmd->add_option("--max-request-bytes", s.max_body_bytes, "Larger request bodies get 413")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--max-concurrent-requests", s.max_concurrent_requests,
                  "HTTP requests in flight at most; beyond it 429 + Retry-After")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-waiting", args->engine.options.max_waiting,
                  "Requests queued in the engine at most; beyond it 429 + Retry-After")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--http-threads", s.num_http_threads,
                  "Worker threads for generation, tokenize and detokenize, started on demand "
                  "(0 = max-concurrent-requests + 8, at most 4096; a request in flight holds one)")
      ->check(CLI::Range(0, kMaxHttpThreads));
  cmd->add_option("--max-connections", s.max_connections,
                  "Open HTTP connections at most; at the limit the oldest one without a request "
                  "in progress is closed to make room")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str()
      ->each([args](const std::string&) { args->max_connections_given = true; });
  cmd->add_option("--header-timeout", s.header_timeout_seconds,
                  "Seconds from a request's first byte to the end of its header")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--body-timeout", s.body_timeout_seconds,
                  "Seconds from the end of a request's header to the end of its body")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--read-timeout", s.read_timeout_seconds,
                  "Seconds a connection may stay silent: between body bytes, while a response "
                  "is not read, idle between requests")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--generation-config", args->generation_config, kGenerationConfigHelp)
      ->capture_default_str();
  AddResidencyFlags(cmd, &args->residency);
  cmd->add_flag("--default-thinking", s.default_thinking,
                "Thinking mode unless a request turns it off (default: chat mode)");
  cmd->add_option("--shutdown-timeout", args->shutdown_timeout,
                  "Seconds (0..86400, or inf) requests in flight may take to finish after "
                  "SIGINT/SIGTERM; then they are aborted")
      ->check(CLI::Validator(CheckShutdownTimeout, "SECONDS|inf"))
      ->capture_default_str();
  if (hooks.add_flags) hooks.add_flags(cmd);
  args->hooks = std::move(hooks);
  cmd->callback([args, exit_code] { *exit_code = RunServe(*args); });
}

}  // namespace dsv4::cli
