#include "server/openai_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <thread>

#include "base/logging.h"
#include "server/api_key.h"
#include "server/connection_watch.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/request_parse.h"
#include "server/response_format.h"

namespace dsv4::server {

namespace {

constexpr const char* kJson = "application/json";

// Decrements the in-flight count when the last owner (handler or stream
// provider) lets go.
struct InFlight {
  explicit InFlight(std::atomic<int64_t>& n) : count(n) { ++count; }
  ~InFlight() { --count; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  std::atomic<int64_t>& count;
};

// State of one SSE response, owned by the content provider.
struct StreamState {
  std::unique_ptr<Generation> gen;
  std::unique_ptr<InFlight> in_flight;
  ConnectionWatch watch;
  ResponseHeader header;
  std::vector<size_t> text_offsets;
  std::vector<bool> finish_sent;  // [choice]: its finish_reason chunk is out
  bool started = false;
  bool aborted = false;  // by a server stop
  bool finished = false;
};

}  // namespace

class OpenAiServer::Impl {
 public:
  Impl(AsyncEngine& engine, const text::Tokenizer& tokenizer, ServerOptions options,
       std::atomic<int64_t>& in_flight)
      : engine_(engine),
        tok_(tokenizer),
        opt_(std::move(options)),
        metrics_(opt_.served_model_name),
        api_key_(opt_.api_key),
        in_flight_(in_flight) {}

  void Setup();
  Status Bind(int* port);
  void Serve() { svr_.listen_after_bind(); }
  void Stop(std::chrono::milliseconds drain);

 private:
  using BodyHandler =
      std::function<void(const httplib::Request&, const std::string&, httplib::Response&)>;
  void SendError(httplib::Response& res, const ApiError& e);
  bool Authorized(const httplib::Request& req) const;
  std::optional<ApiError> Admit() const;
  struct BodyRead {
    std::optional<ApiError> error;
    bool in_sync = true;  // the whole body was consumed: the connection can go on
  };
  void RouteWithBody(const std::string& method, const std::string& pattern, BodyHandler handler);
  BodyRead ReadBody(const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader& reader, bool keep, std::string* body);
  void HandleGenerate(const httplib::Request& req, const std::string& text,
                      httplib::Response& res, bool chat);
  void RespondWhole(httplib::Response& res, Generation& gen, const ResponseHeader& h,
                    ConnectionWatch& watch);
  bool StreamStep(StreamState& st, httplib::DataSink& sink);
  void HandleTokenize(const std::string& text, httplib::Response& res);
  void HandleDetokenize(const std::string& text, httplib::Response& res);

  AsyncEngine& engine_;
  const text::Tokenizer& tok_;
  ServerOptions opt_;
  ServerMetrics metrics_;
  ApiKeyCheck api_key_;
  std::atomic<int64_t>& in_flight_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};  // drain timed out: abort what is left
  int listen_fd_ = -1;
  httplib::Server svr_;
};

void OpenAiServer::Impl::SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.http_status == 429 || e.http_status == 503) {
    res.set_header("Retry-After", std::to_string(opt_.retry_after_seconds));
  }
  res.set_content(Dump(e.ToJson()), kJson);
  metrics_.RecordHttpError(e.http_status);
}

bool OpenAiServer::Impl::Authorized(const httplib::Request& req) const {
  if (!api_key_.enabled()) return true;
  if (req.path == "/health" || req.path == "/metrics") return true;
  return api_key_.Matches(req.get_header_value("Authorization"));
}

std::optional<ApiError> OpenAiServer::Impl::Admit() const {
  ApiError e;
  if (draining_ || !engine_.Ready()) {
    e.http_status = 503;
    e.type = "service_unavailable";
    e.message = draining_ ? "the server is shutting down" : "the engine is not ready";
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

namespace {

bool HasBody(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

// For a response that leaves part of the body unread: httplib would parse the
// rest as the next request.  The client may see the connection reset instead
// of the response (TCP sends RST when unread data is discarded).
void StopReading(const httplib::Request& req) {
  ConnectionWatch(req.local_addr, req.local_port, req.remote_addr, req.remote_port).StopReading();
}

// How far past --max-request-bytes a body is still read (and dropped).
uint64_t DrainBytes(const ServerOptions& o) {
  return std::max<uint64_t>(static_cast<uint64_t>(o.max_body_bytes), uint64_t{1} << 20);
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

}  // namespace

// cpp-httplib 0.11 reads a chunked body whole into req.body whatever
// set_payload_max_length says (it only checks Content-Length), and decodes
// Content-Encoding: gzip/deflate/br without a bound.  A content receiver sees
// every decoded byte, so --max-request-bytes bounds them all.  Bytes past the
// limit are read and dropped, up to DrainBytes() more, so that an ordinary
// client that sent a somewhat large body gets its 413 on a connection still in
// sync; beyond that the rest is left unread and the connection is ended.
// `keep` = false drops everything (a request that is refused anyway).
OpenAiServer::Impl::BodyRead OpenAiServer::Impl::ReadBody(const httplib::Request& req,
                                                          httplib::Response& res,
                                                          const httplib::ContentReader& reader,
                                                          bool keep, std::string* body) {
  const auto limit = static_cast<uint64_t>(opt_.max_body_bytes);
  const uint64_t most = limit + DrainBytes(opt_);
  BodyRead r;
  ApiError too_large;
  too_large.http_status = 413;
  too_large.message = fmt::format("request body over {} bytes", opt_.max_body_bytes);
  if (!req.has_header("Transfer-Encoding") && req.has_header("Content-Length")) {
    const uint64_t declared =
        std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    if (declared > most) {  // refused before reading a byte
      r.error = too_large;
      r.in_sync = false;
      return r;
    }
    if (keep && declared <= limit) body->reserve(static_cast<size_t>(declared));
  }
  uint64_t seen = 0;
  const bool ok = reader([&](const char* data, size_t n) {
    seen += n;
    if (seen > limit) {
      std::string().swap(*body);
    } else if (keep) {
      body->append(data, n);
    }
    return seen <= most;
  });
  if (seen > limit) {
    r.error = too_large;
  } else if (!ok) {
    ApiError e;  // httplib's status: 400 bad framing, 415 unknown Content-Encoding
    e.http_status = res.status >= 400 ? res.status : 400;
    e.message = fmt::format("could not read the request body (HTTP {})", e.http_status);
    r.error = e;
  }
  r.in_sync = ok;
  return r;
}

// Every request with a body (POST, PUT, PATCH, DELETE) goes through here,
// unknown routes too: the API key is checked after the body is drained.
void OpenAiServer::Impl::RouteWithBody(const std::string& method, const std::string& pattern,
                                       BodyHandler handler) {
  auto route = [this, handler = std::move(handler)](const httplib::Request& req,
                                                    httplib::Response& res,
                                                    const httplib::ContentReader& reader) {
    const bool authorized = Authorized(req);
    std::string body;
    const BodyRead read = ReadBody(req, res, reader, /*keep=*/authorized, &body);
    if (!read.in_sync) StopReading(req);
    if (!authorized) return SendError(res, Unauthorized());
    if (read.error) return SendError(res, *read.error);
    handler(req, body, res);
  };
  if (method == "POST") {
    svr_.Post(pattern, std::move(route));
  } else if (method == "PUT") {
    svr_.Put(pattern, std::move(route));
  } else if (method == "PATCH") {
    svr_.Patch(pattern, std::move(route));
  } else {
    svr_.Delete(pattern, std::move(route));
  }
}

void OpenAiServer::Impl::Setup() {
  const int threads = opt_.num_http_threads > 0
                          ? opt_.num_http_threads
                          : static_cast<int>(opt_.max_concurrent_requests) + 8;
  svr_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib listens with a backlog of 5: a burst of new connections (64
  // clients at once) would overflow it.  Remember the socket to widen it.
  svr_.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = sock;
  });
  // ReadBody enforces --max-request-bytes (and reads some more to drop it).
  svr_.set_payload_max_length(
      static_cast<size_t>(static_cast<uint64_t>(opt_.max_body_bytes) + DrainBytes(opt_)));
  svr_.set_keep_alive_max_count(1000);
  svr_.set_read_timeout(60);
  svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string& m = req.method;
    if (m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE") {
      return httplib::Server::HandlerResponse::Unhandled;  // RouteWithBody
    }
    if (m == "PRI") {  // httplib would read its body whole, without a bound
      if (HasBody(req)) StopReading(req);
      SendError(res, NoSuchRoute());
      return httplib::Server::HandlerResponse::Handled;
    }
    if (HasBody(req)) {  // httplib would not read it: its bytes would be the next request
      StopReading(req);
      SendError(res, BadRequest(fmt::format("a {} request must not have a body", m)));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (Authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    SendError(res, Unauthorized());
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib produces itself (404 route, 413 body, 400 framing) get
  // OpenAI's shape too; our own errors already carry a body.
  svr_.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 404) {
      e.type = "not_found_error";
      e.message = "no such route";
    } else if (res.status == 413) {
      e.message = fmt::format("request body over {} bytes", opt_.max_body_bytes);
    } else {
      e.message = fmt::format("HTTP error {}", res.status);
    }
    res.set_content(Dump(e.ToJson()), kJson);
    metrics_.RecordHttpError(res.status);
  });
  svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = engine_.Ready() && !draining_;
    res.status = ok ? 200 : 503;
    res.set_content(ok ? R"({"status":"ok"})" : R"({"status":"not_ready"})", kJson);
  });
  svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Json model{{"id", opt_.served_model_name},
               {"object", "model"},
               {"created", 0},
               {"owned_by", "dsv4"},
               {"max_model_len", opt_.max_model_len}};
    res.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({model})}}), kJson);
  });
  svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(engine_.Stats()), "text/plain; version=0.0.4");
  });
  RouteWithBody("POST", "/v1/chat/completions",
                [this](const httplib::Request& req, const std::string& body,
                       httplib::Response& res) { HandleGenerate(req, body, res, /*chat=*/true); });
  RouteWithBody("POST", "/v1/completions",
                [this](const httplib::Request& req, const std::string& body,
                       httplib::Response& res) { HandleGenerate(req, body, res, /*chat=*/false); });
  RouteWithBody("POST", "/tokenize",
                [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
                  HandleTokenize(body, res);
                });
  RouteWithBody("POST", "/detokenize",
                [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
                  HandleDetokenize(body, res);
                });
  // Unknown routes with a body: drained like the others (registered last).
  for (const char* method : {"POST", "PUT", "PATCH", "DELETE"}) {
    RouteWithBody(method, ".*",
                  [this](const httplib::Request&, const std::string&, httplib::Response& res) {
                    SendError(res, NoSuchRoute());
                  });
  }
}

Status OpenAiServer::Impl::Bind(int* port) {
  if (opt_.port == 0) {
    const int p = svr_.bind_to_any_port(opt_.host);
    if (p <= 0) return IoError("cannot bind {}:<any>", opt_.host);
    *port = p;
  } else {
    if (!svr_.bind_to_port(opt_.host, opt_.port)) {
      return IoError("cannot bind {}:{} (in use or not permitted)", opt_.host, opt_.port);
    }
    *port = opt_.port;
  }
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);  // Linux updates the backlog
  return Status::Ok();
}

void OpenAiServer::Impl::Stop(std::chrono::milliseconds drain) {
  draining_ = true;
  const auto deadline = Clock::now() + drain;
  while (in_flight_.load() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Whatever is still running is aborted (handlers see stopping_ within one
  // poll) and answered with finish_reason "abort" before the sockets close.
  stopping_ = true;
  const auto abort_deadline = Clock::now() + std::chrono::seconds(5);
  while (in_flight_.load() > 0 && Clock::now() < abort_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  svr_.stop();
}

void OpenAiServer::Impl::HandleGenerate(const httplib::Request& req, const std::string& text,
                                        httplib::Response& res, bool chat) {
  Json body;
  if (auto e = ParseRequestBody(text, opt_, &body)) return SendError(res, *e);
  ParsedRequest parsed;
  auto e = chat ? ParseChatRequest(body, tok_, opt_, &parsed)
                : ParseCompletionRequest(body, tok_, opt_, &parsed);
  if (e) return SendError(res, *e);
  if (auto busy = Admit()) return SendError(res, *busy);
  auto in_flight = std::make_unique<InFlight>(in_flight_);
  const bool stream = parsed.stream;
  auto gen = std::make_unique<Generation>(engine_, tok_, std::move(parsed));
  if (auto err = gen->Start()) return SendError(res, *err);
  const ResponseHeader header = NewHeader(chat, opt_.served_model_name);
  ConnectionWatch watch(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (!stream) {
    RespondWhole(res, *gen, header, watch);
    return;
  }
  auto st = std::make_shared<StreamState>();
  st->text_offsets.assign(static_cast<size_t>(gen->num_choices()), 0);
  st->gen = std::move(gen);
  st->in_flight = std::move(in_flight);
  st->header = header;
  st->watch = watch;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) { return StreamStep(*st, sink); },
      [this, st](bool success) {
        // A client that went away: abort within one engine step, free the
        // handler.  Releases the Generation (and its in-flight slot) now.
        if (!st->finished) {
          st->gen->AbortAll();
          RequestTiming t = st->gen->Timing();
          t.finished_reason = "abort";
          metrics_.RecordRequest(t);
          if (!success)
            DSV4_LOG_INFO("server: client disconnected; request {} aborted", st->header.id);
        }
        st->gen.reset();
        st->in_flight.reset();
      });
}

void OpenAiServer::Impl::RespondWhole(httplib::Response& res, Generation& gen,
                                      const ResponseHeader& h, ConnectionWatch& watch) {
  bool aborted = false;
  while (!gen.done()) {
    // Checked after every engine output: a client that left is aborted
    // within one engine step.
    const bool gone = watch.PeerClosed();
    if ((stopping_ || gone) && !aborted) {
      gen.AbortAll();
      aborted = true;
      if (gone) DSV4_LOG_INFO("server: client disconnected; request {} aborted", h.id);
    }
    gen.Poll(std::chrono::milliseconds(100));
  }
  metrics_.RecordRequest(gen.Timing());
  for (int i = 0; i < gen.num_choices(); ++i) {
    if (!gen.choice(i).error().ok()) {
      ApiError e;
      e.http_status = 500;
      e.type = "invalid_model_output";
      e.message = gen.choice(i).error().message();
      return SendError(res, e);
    }
  }
  const Json body =
      gen.request().chat ? ChatResponse(h, gen, tok_) : CompletionResponse(h, gen, tok_);
  res.set_content(Dump(body), kJson);
}

// One call of the chunked content provider: waits for engine outputs (at most
// keepalive_seconds) and writes them as SSE events.  An idle stream writes an
// SSE comment so that a vanished client is noticed by a failing write.
bool OpenAiServer::Impl::StreamStep(StreamState& st, httplib::DataSink& sink) {
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
  if (st.watch.PeerClosed()) return false;
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
  if (!sink.write(out.data(), out.size())) return false;
  if (st.finished) sink.done();
  return true;
}

// {"prompt": string} or {"messages": [...], tools?, chat_template_kwargs?,
// reasoning_effort?} -> {"count", "max_model_len", "tokens"}.
void OpenAiServer::Impl::HandleTokenize(const std::string& text, httplib::Response& res) {
  Json body;
  if (auto e = ParseRequestBody(text, opt_, &body)) return SendError(res, *e);
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
    if (auto e = ParseChatRequest(chat, tok_, unlimited, &parsed)) return SendError(res, *e);
    ids = parsed.prompts[0];
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    ids = tok_.Encode(body["prompt"].get<std::string>());
  } else {
    return SendError(res, BadRequest("'prompt' (a string) or 'messages' is required", "prompt"));
  }
  res.set_content(
      Dump(Json{{"count", ids.size()}, {"max_model_len", opt_.max_model_len}, {"tokens", ids}}),
      kJson);
}

void OpenAiServer::Impl::HandleDetokenize(const std::string& text, httplib::Response& res) {
  Json body;
  if (auto e = ParseRequestBody(text, opt_, &body)) return SendError(res, *e);
  const auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) {
    return SendError(res, BadRequest("'tokens' (a list of token ids) is required", "tokens"));
  }
  std::vector<int32_t> ids;
  for (const Json& id : *it) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= tok_.vocab_size()) {
      return SendError(
          res, BadRequest(fmt::format("token ids must be integers in [0, {})", tok_.vocab_size()),
                          "tokens"));
    }
    ids.push_back(id.get<int32_t>());
  }
  res.set_content(Dump(Json{{"prompt", tok_.Decode(ids)}}), kJson);
}

OpenAiServer::OpenAiServer(AsyncEngine& engine, const text::Tokenizer& tokenizer,
                           ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options), in_flight_)) {
  impl_->Setup();
}

OpenAiServer::~OpenAiServer() = default;

Status OpenAiServer::Bind() { return impl_->Bind(&port_); }

void OpenAiServer::Serve() { impl_->Serve(); }

void OpenAiServer::Stop(std::chrono::milliseconds drain) { impl_->Stop(drain); }

}  // namespace dsv4::server
