#include "server/openai_server.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/logging.h"
#include "base/mutex.h"
#include "profile/options.h"
#include "profile/profile.h"
#include "profile/session.h"
#include "server/access_log.h"
#include "server/api_key.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/request_parse.h"
#include "server/response_format.h"

namespace dsv4::server {

namespace {

constexpr const char* kJson = "application/json";

// Counts a request in flight for its lifetime.
struct InFlight {
  explicit InFlight(std::atomic<int64_t>& n) : count(n) { ++count; }
  ~InFlight() { --count; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  std::atomic<int64_t>& count;
};

// State of one SSE response, on its worker thread.
struct StreamState {
  std::unique_ptr<Generation> gen;
  ResponseHeader header;
  std::vector<size_t> text_offsets;
  std::vector<bool> finish_sent;  // [choice]: its finish_reason chunk is out
  bool started = false;
  bool aborted = false;  // by a server stop
  bool finished = false;
};

HttpResponse JsonResponse(std::string body) {
  HttpResponse r;
  r.content_type = kJson;
  r.body = std::move(body);
  return r;
}

ApiError Unauthorized() {
  ApiError e;
  e.http_status = 401;
  e.type = "authentication_error";
  e.code = "invalid_api_key";
  e.message = "a valid API key is required (Authorization: Bearer <key>)";
  return e;
}

ApiError NoSuchRoute() {
  ApiError e;
  e.http_status = 404;
  e.type = "not_found_error";
  e.message = "no such route";
  return e;
}

HttpTransportOptions TransportOptions(const ServerOptions& o) {
  HttpTransportOptions t;
  t.host = o.host;
  t.port = o.port;
  t.max_header_bytes = o.max_header_bytes;
  t.max_body_bytes = o.max_body_bytes;
  t.header_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(o.header_timeout_seconds * 1000));
  t.body_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.body_timeout_seconds * 1000));
  t.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.read_timeout_seconds * 1000));
  t.max_connections = o.max_connections;
  t.io_threads = o.num_io_threads;
  t.worker_threads =
      o.num_http_threads > 0 ? o.num_http_threads : static_cast<int>(o.max_concurrent_requests) + 8;
  return t;
}

}  // namespace

class OpenAiServer::Impl : public HttpRouter {
 public:
  Impl(engine::AsyncEngine& engine, const text::Tokenizer& tokenizer, ServerOptions options,
       std::atomic<int64_t>& in_flight)
      : engine_(engine),
        tok_(tokenizer),
        opt_(std::move(options)),
        metrics_(opt_.served_model_name),
        api_key_(opt_.api_key),
        in_flight_(in_flight),
        http_(TransportOptions(opt_), *this) {}

  Status Bind(int* port) { return http_.Bind(port); }
  void Serve() { http_.Serve(); }
  void Stop(std::chrono::milliseconds drain);

  // HttpRouter
  std::optional<HttpResponse> Route(const HttpRequest& req) override;
  void Handle(HttpExchange& ex) override;
  HttpResponse TransportError(int status, const std::string& message) override;

 private:
  HttpResponse ErrorResponse(const ApiError& e);
  bool Authorized(const HttpRequest& req) const;
  std::optional<ApiError> Admit() const;
  void HandleGenerate(HttpExchange& ex, bool chat);
  // Both return the request's timing and set *status to the HTTP status answered
  // (0: the client left before the answer was complete).
  RequestTiming RespondWhole(HttpExchange& ex, Generation& gen, const ResponseHeader& h,
                             int* status);
  RequestTiming RespondStream(HttpExchange& ex, std::unique_ptr<Generation> gen,
                              const ResponseHeader& h, int* status);
  std::string StreamStep(StreamState& st, HttpExchange& ex);
  void HandleTokenize(const std::string& text, HttpExchange& ex);
  void HandleDetokenize(const std::string& text, HttpExchange& ex);
  void HandleStartProfile(HttpExchange& ex) EXCLUDES(profile_mu_);
  void HandleStopProfile(HttpExchange& ex) EXCLUDES(profile_mu_);
  // Writes one chunk of a stream, as an e2e span.
  static bool WriteChunk(HttpExchange& ex, const std::string& out);

  engine::AsyncEngine& engine_;
  const text::Tokenizer& tok_;
  ServerOptions opt_;
  ServerMetrics metrics_;
  ApiKeyCheck api_key_;
  std::atomic<int64_t>& in_flight_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};  // drain timed out: abort what is left
  // Serializes /start_profile and /stop_profile (as the reference does), so
  // a start and a stop never interleave their checks and the session calls.
  Mutex profile_mu_;
  HttpServer http_;  // last: stopped and destroyed first
};

HttpResponse OpenAiServer::Impl::ErrorResponse(const ApiError& e) {
  HttpResponse r = JsonResponse(Dump(e.ToJson()));
  r.status = e.http_status;
  if (e.http_status == 429 || e.http_status == 503) {
    r.headers.emplace_back("Retry-After", std::to_string(opt_.retry_after_seconds));
  }
  metrics_.RecordHttpError(e.http_status);
  return r;
}

HttpResponse OpenAiServer::Impl::TransportError(int status, const std::string& message) {
  ApiError e;
  e.http_status = status;
  e.message = message;
  if (status >= 500) e.type = status == 503 ? "service_unavailable" : "server_error";
  if (status == 408) e.code = "request_timeout";
  return ErrorResponse(e);
}

bool OpenAiServer::Impl::Authorized(const HttpRequest& req) const {
  if (!api_key_.enabled()) return true;
  if (req.path == "/health" || req.path == "/metrics") return true;
  return api_key_.Matches(req.Header("Authorization"));
}

std::optional<ApiError> OpenAiServer::Impl::Admit() const {
  ApiError e;
  if (draining_ || !engine_.Ready()) {
    e.http_status = 503;
    e.type = "service_unavailable";
    e.message = draining_ ? "the server is shutting down"
                          : "the model is loading (weights, caches, warm-up forward); retry later";
    if (!draining_) e.code = "model_loading";
    return e;
  }
  if (in_flight_.load() >= opt_.max_concurrent_requests) {
    e.http_status = 429;
    e.type = "rate_limit_error";
    e.code = "queue_full";
    e.message =
        fmt::format("too many requests in flight ({}); retry later", opt_.max_concurrent_requests);
    return e;
  }
  return std::nullopt;
}

// On an I/O thread: the cheap routes are answered here, so they never wait
// for a worker; the POST routes go to the worker pool.  The API key is
// checked before the route (401 before 404), the body was read whole before.
std::optional<HttpResponse> OpenAiServer::Impl::Route(const HttpRequest& req) {
  const std::string& m = req.method;
  const bool get = m == "GET" || m == "HEAD";
  if (get && !req.body.empty()) {
    return ErrorResponse(BadRequest(fmt::format("a {} request must not have a body", m)));
  }
  if (!Authorized(req)) return ErrorResponse(Unauthorized());
  const std::string& p = req.path;
  if (get && p == "/health") {
    // 200 only once the model is loaded and warmed up (docs/deploy.md);
    // before, and while draining, the 503 of Admit with its reason.
    if (const std::optional<ApiError> e = Admit(); e && e->http_status == 503) {
      return ErrorResponse(*e);
    }
    return JsonResponse(R"({"status":"ok"})");
  }
  if (get && p == "/v1/models") {
    Json model{{"id", opt_.served_model_name},
               {"object", "model"},
               {"created", 0},
               {"owned_by", "dsv4"},
               {"max_model_len", opt_.max_model_len}};
    return JsonResponse(Dump(Json{{"object", "list"}, {"data", Json::array({model})}}));
  }
  if (get && p == "/metrics") {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = metrics_.Render(engine_.Stats());
    return r;
  }
  if (m == "POST" && (p == "/v1/chat/completions" || p == "/v1/completions" || p == "/tokenize" ||
                      p == "/detokenize")) {
    return std::nullopt;  // Handle, on a worker
  }
  // Only with --profile; a stop writes the trace, so it runs on a worker.
  if (opt_.profile && m == "POST" && (p == "/start_profile" || p == "/stop_profile")) {
    return std::nullopt;
  }
  return ErrorResponse(NoSuchRoute());
}

void OpenAiServer::Impl::Handle(HttpExchange& ex) {
  const std::string& p = ex.request().path;
  if (p == "/v1/chat/completions") return HandleGenerate(ex, /*chat=*/true);
  if (p == "/v1/completions") return HandleGenerate(ex, /*chat=*/false);
  if (p == "/start_profile") return HandleStartProfile(ex);
  if (p == "/stop_profile") return HandleStopProfile(ex);
  profile::Span span(profile::kE2e, "http", p == "/tokenize" ? "http.tokenize" : "http.detokenize");
  if (p == "/tokenize") return HandleTokenize(ex.request().body, ex);
  HandleDetokenize(ex.request().body, ex);
}

// POST /start_profile: a trace session of --profile-level, written to the
// next trace path under --profile-output.  400 while one runs.
void OpenAiServer::Impl::HandleStartProfile(HttpExchange& ex) {
  MutexLock lock(&profile_mu_);
  if (profile::SessionActive()) {
    return ex.Respond(
        ErrorResponse(BadRequest("a profile is already running; POST /stop_profile first")));
  }
  profile::SessionOptions o;
  o.levels = opt_.profile_levels;
  o.path = profile::TracePath(opt_.profile_output, profile::SessionsStarted() + 1);
  if (const Status s = profile::StartSession(o); !s.ok()) {
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = s.message();
    return ex.Respond(ErrorResponse(e));
  }
  DSV4_LOG_INFO("server: profile ({}) started, trace {}", profile::LevelsName(o.levels), o.path);
  ex.Respond(JsonResponse(Dump(
      Json{{"status", "started"}, {"levels", profile::LevelsName(o.levels)}, {"path", o.path}})));
}

// POST /stop_profile: ends the session and writes its trace; 400 (not an
// empty success) when none runs, so a client learns its start was lost.
void OpenAiServer::Impl::HandleStopProfile(HttpExchange& ex) {
  MutexLock lock(&profile_mu_);
  if (!profile::SessionActive()) {
    return ex.Respond(
        ErrorResponse(BadRequest("no profile is running; POST /start_profile first")));
  }
  const Result<profile::SessionSummary> s = profile::StopSession();
  if (!s.ok()) {
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = s.status().message();
    return ex.Respond(ErrorResponse(e));
  }
  DSV4_LOG_INFO("server: profile written to {} ({} events, {} dropped)", s->path, s->events,
                s->dropped_events);
  ex.Respond(JsonResponse(Dump(Json{{"status", "stopped"},
                                    {"path", s->path},
                                    {"levels", profile::LevelsName(s->levels)},
                                    {"events", s->events},
                                    {"dropped_events", s->dropped_events},
                                    {"bytes", s->bytes},
                                    {"seconds", s->seconds}})));
}

bool OpenAiServer::Impl::WriteChunk(HttpExchange& ex, const std::string& out) {
  profile::Span span(profile::kE2e, "http", "http.write");
  if (span) span.Arg("bytes", static_cast<int64_t>(out.size()));
  return ex.WriteChunk(out);
}

void OpenAiServer::Impl::Stop(std::chrono::milliseconds drain) {
  draining_ = true;
  // Whatever is still running when the drain time is up is aborted (the
  // handlers see stopping_ within one poll) and answered with finish_reason
  // "abort" before the connections are cut.
  http_.Stop(drain, kAbortGrace, [this] { stopping_ = true; });
}

void OpenAiServer::Impl::HandleGenerate(HttpExchange& ex, bool chat) {
  // The whole request on its worker: parse, admission, generation, the
  // response (streamed chunks are http.write spans inside it).
  profile::Span span(profile::kE2e, "http", chat ? "http.chat_completions" : "http.completions");
  const auto received = std::chrono::steady_clock::now();
  AccessRecord access;
  access.route = chat ? "/v1/chat/completions" : "/v1/completions";
  // A refusal is answered and logged with its status (the generation never started).
  auto refuse = [&](const ApiError& e) {
    ex.Respond(ErrorResponse(e));
    access.status = e.http_status;
    access.total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count();
    DSV4_LOG_INFO("{}", AccessLine(access));
  };
  Json body;
  if (auto e = ParseRequestBody(ex.request().body, opt_, &body)) return refuse(*e);
  ParsedRequest parsed;
  auto e = chat ? ParseChatRequest(body, tok_, opt_, &parsed)
                : ParseCompletionRequest(body, tok_, opt_, &parsed);
  if (e) return refuse(*e);
  if (auto busy = Admit()) return refuse(*busy);
  InFlight in_flight(in_flight_);
  const bool stream = parsed.stream;
  auto gen = std::make_unique<Generation>(engine_, tok_, std::move(parsed));
  if (auto err = gen->Start()) return refuse(*err);
  if (span) {
    // request_id joins this span to the engine's request track (choice 0's; with
    // n > 1 the other choices are the tracks submitted right after it).
    span.Arg("stream", stream ? 1 : 0)
        .Arg("request_id", gen->engine_id(0))
        .Arg("choices", gen->num_choices())
        .Arg("prompt_tokens", gen->prompt_tokens());
  }
  const ResponseHeader header = NewHeader(chat, opt_.served_model_name);
  access.id = header.id;
  access.prompt_tokens = gen->prompt_tokens();
  const RequestTiming t = stream ? RespondStream(ex, std::move(gen), header, &access.status)
                                 : RespondWhole(ex, *gen, header, &access.status);
  access.completion_tokens = t.generation_tokens;
  access.cached_tokens = t.cached_tokens;
  access.ttft_s = t.ttft_s;
  access.finish = t.finished_reason;
  access.total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count();
  DSV4_LOG_INFO("{}", AccessLine(access));
  // Ends before the in-flight count drops, so whoever sees no request in
  // flight (a profile stop after the client got its answer) sees its span.
  span.End();
}

RequestTiming OpenAiServer::Impl::RespondWhole(HttpExchange& ex, Generation& gen,
                                               const ResponseHeader& h, int* status) {
  bool aborted = false;
  while (!gen.done()) {
    // Checked after every engine output: a client that left is aborted
    // within one engine step.
    const bool gone = ex.PeerClosed();
    if ((stopping_ || gone) && !aborted) {
      gen.AbortAll();
      aborted = true;
      if (gone) DSV4_LOG_INFO("server: client disconnected; request {} aborted", h.id);
    }
    gen.Poll(std::chrono::milliseconds(100));
  }
  const RequestTiming timing = gen.Timing();
  metrics_.RecordRequest(timing);
  for (int i = 0; i < gen.num_choices(); ++i) {
    if (!gen.choice(i).error().ok()) {
      ApiError e;
      e.http_status = 500;
      e.type = "invalid_model_output";
      e.message = gen.choice(i).error().message();
      ex.Respond(ErrorResponse(e));
      *status = 500;
      return timing;
    }
  }
  const Json body =
      gen.request().chat ? ChatResponse(h, gen, tok_) : CompletionResponse(h, gen, tok_);
  profile::Span span(profile::kE2e, "http", "http.write");
  HttpResponse r = JsonResponse(Dump(body));
  if (span) span.Arg("bytes", static_cast<int64_t>(r.body.size()));
  ex.Respond(std::move(r));
  *status = 200;
  return timing;
}

// Streams SSE events from this worker thread until the generation is done
// or the client is gone (a failed write or a closed socket: the request is
// aborted within one engine step).
RequestTiming OpenAiServer::Impl::RespondStream(HttpExchange& ex, std::unique_ptr<Generation> gen,
                                                const ResponseHeader& h, int* status) {
  StreamState st;
  st.text_offsets.assign(static_cast<size_t>(gen->num_choices()), 0);
  st.gen = std::move(gen);
  st.header = h;
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.headers.emplace_back("Cache-Control", "no-cache");
  bool ok = ex.StartStream(head);
  while (ok && !st.finished) {
    const std::string out = StreamStep(st, ex);
    ok = !out.empty() && WriteChunk(ex, out);
  }
  if (!st.finished) {
    st.gen->AbortAll();
    RequestTiming t = st.gen->Timing();
    t.finished_reason = "abort";
    metrics_.RecordRequest(t);
    DSV4_LOG_INFO("server: client disconnected; request {} aborted", h.id);
    *status = 0;  // the stream's 200 head may be out, but its end never was
    return t;     // the exchange, unanswered, closes the connection
  }
  ex.EndStream();
  *status = 200;
  return st.gen->Timing();
}

// One step of a stream: waits for engine outputs (at most keepalive_seconds)
// and returns them as SSE events; an idle stream returns an SSE comment.
// Empty when the client is gone.
std::string OpenAiServer::Impl::StreamStep(StreamState& st, HttpExchange& ex) {
  Generation& gen = *st.gen;
  const bool chat = gen.request().chat;
  std::string out;
  if (!st.started) {
    st.started = true;
    for (int i = 0; i < gen.num_choices(); ++i) {
      if (chat) {
        out += SseEvent(ChatRoleChunk(st.header, i));
      } else if (gen.request().echo) {
        ChoiceDelta echo;
        echo.content = tok_.Decode(gen.request().prompts[i / gen.request().n],
                                   gen.request().skip_special_tokens);
        size_t no_offset = 0;
        out += SseEvent(CompletionChunk(st.header, i, echo, "", tok_, &no_offset));
      }
    }
  }
  if (stopping_ && !st.aborted) {
    gen.AbortAll();
    st.aborted = true;
  }
  const auto wait = std::chrono::milliseconds(static_cast<int64_t>(opt_.keepalive_seconds * 1000));
  auto deltas = gen.Poll(out.empty() ? wait : std::chrono::milliseconds(0));
  // After every engine output (and every keepalive period): a client that
  // left is noticed here, within one engine step, not at a later write.
  if (ex.PeerClosed()) return "";
  // One poll can carry several outputs of a choice, and d.finished() tells the
  // state after the last of them: only that last delta may carry (chat: be
  // followed by) the finish_reason, and only once per choice.
  st.finish_sent.resize(static_cast<size_t>(gen.num_choices()), false);
  std::vector<size_t> last_delta(static_cast<size_t>(gen.num_choices()), 0);
  for (size_t k = 0; k < deltas.size(); ++k) last_delta[static_cast<size_t>(deltas[k].first)] = k;
  for (size_t k = 0; k < deltas.size(); ++k) {
    const int index = deltas[k].first;
    const ChoiceDelta& delta = deltas[k].second;
    const ChoiceDecoder& d = gen.choice(index);
    const auto ci = static_cast<size_t>(index);
    const bool finish_here = d.finished() && k == last_delta[ci] && !st.finish_sent[ci];
    if (finish_here) st.finish_sent[ci] = true;
    if (chat) {
      Json c = ChatDeltaChunk(st.header, index, delta, tok_);
      if (!c.is_null()) out += SseEvent(c);
      if (finish_here && d.error().ok())
        out += SseEvent(ChatFinishChunk(st.header, index, d.finish_reason()));
    } else if (!delta.empty() || finish_here) {
      out += SseEvent(CompletionChunk(st.header, index, delta, finish_here ? d.finish_reason() : "",
                                      tok_, &st.text_offsets[ci]));
    }
    if (finish_here && !d.error().ok()) {  // an error finishes its choice
      ApiError e;
      e.http_status = 500;
      e.type = "invalid_model_output";
      e.message = d.error().message();
      out += SseEvent(e.ToJson());
    }
  }
  if (gen.done()) {
    if (gen.request().include_usage) out += SseEvent(UsageChunk(st.header, chat, gen));
    out += "data: [DONE]\n\n";
    st.finished = true;
    metrics_.RecordRequest(gen.Timing());
  }
  if (out.empty()) out = ": keepalive\n\n";
  return out;
}

// {"prompt": string} or {"messages": [...], tools?, chat_template_kwargs?,
// reasoning_effort?} -> {"count", "max_model_len", "tokens"}.
void OpenAiServer::Impl::HandleTokenize(const std::string& text, HttpExchange& ex) {
  Json body;
  if (auto e = ParseRequestBody(text, opt_, &body)) return ex.Respond(ErrorResponse(*e));
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    Json chat = Json::object();
    for (const char* key :
         {"model", "messages", "tools", "chat_template_kwargs", "reasoning_effort", "thinking"}) {
      if (body.contains(key)) chat[key] = body[key];
    }
    ServerOptions unlimited = opt_;
    unlimited.max_model_len = INT64_MAX / 2;  // counting tokens is not generating them
    ParsedRequest parsed;
    if (auto e = ParseChatRequest(chat, tok_, unlimited, &parsed))
      return ex.Respond(ErrorResponse(*e));
    ids = parsed.prompts[0];
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    ids = tok_.Encode(body["prompt"].get<std::string>());
  } else {
    return ex.Respond(
        ErrorResponse(BadRequest("'prompt' (a string) or 'messages' is required", "prompt")));
  }
  ex.Respond(JsonResponse(
      Dump(Json{{"count", ids.size()}, {"max_model_len", opt_.max_model_len}, {"tokens", ids}})));
}

void OpenAiServer::Impl::HandleDetokenize(const std::string& text, HttpExchange& ex) {
  Json body;
  if (auto e = ParseRequestBody(text, opt_, &body)) return ex.Respond(ErrorResponse(*e));
  const auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) {
    return ex.Respond(
        ErrorResponse(BadRequest("'tokens' (a list of token ids) is required", "tokens")));
  }
  std::vector<int32_t> ids;
  for (const Json& id : *it) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= tok_.vocab_size()) {
      return ex.Respond(ErrorResponse(BadRequest(
          fmt::format("token ids must be integers in [0, {})", tok_.vocab_size()), "tokens")));
    }
    ids.push_back(id.get<int32_t>());
  }
  ex.Respond(JsonResponse(Dump(Json{{"prompt", tok_.Decode(ids)}})));
}

OpenAiServer::OpenAiServer(engine::AsyncEngine& engine, const text::Tokenizer& tokenizer,
                           ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options), in_flight_)) {}

OpenAiServer::~OpenAiServer() = default;

Status OpenAiServer::Bind() { return impl_->Bind(&port_); }

void OpenAiServer::Serve() { impl_->Serve(); }

void OpenAiServer::Stop(std::chrono::milliseconds drain) { impl_->Stop(drain); }

}  // namespace dsv4::server
