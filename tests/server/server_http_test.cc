// The server over real loopback HTTP: endpoints, chat and completions,
// streaming, scripted reasoning/tool-call output, disconnects, concurrency.
#include <atomic>
#include <future>

#include "server_fixture.h"
#include "text/chat_encoding.h"

namespace dsv4::server::testing {
namespace {

std::vector<int32_t> ChatPrompt(const std::string& user, bool thinking = false) {
  text::EncodeOptions o;
  o.thinking_mode = thinking ? text::ThinkingMode::kThinking : text::ThinkingMode::kChat;
  auto s = text::EncodeMessages(
      text::OrderedJson::parse(R"([{"role":"user","content":)" + Json(user).dump() + "}]"), o);
  EXPECT_TRUE(s.ok());
  return V4Tokenizer().Encode(*s);
}

TEST(ServerHttp, HealthModelsAndReadiness) {
  TestServer srv;
  TestClient c = srv.Client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const Json models = Json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "dsv4");
  srv.engine().set_ready(false);
  EXPECT_EQ(c.Get("/health")->status, 503);
  auto [status, body] = srv.Post("/v1/completions", R"({"prompt":"hi"})");
  EXPECT_EQ(status, 503);
}

TEST(ServerHttp, CompletionTextUsageAndFinish) {
  TestServer srv;
  const std::vector<int32_t> prompt = V4Tokenizer().Encode("Hello world");
  auto [status, body] =
      srv.Post("/v1/completions", R"({"model":"dsv4","prompt":"Hello world","max_tokens":7})");
  ASSERT_EQ(status, 200) << body;
  const Json r = Json::parse(body);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], Decode(FakeOutput(prompt, 7)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 7);
  EXPECT_EQ(r["usage"]["total_tokens"], prompt.size() + 7);
}

// usage.prompt_tokens_details.cached_tokens (whole and streamed, chat and
// completions, per prompt for n > 1) and the prefix-cache counters on
// /metrics, over a fake engine that models a prefix cache of 16-token pages.
TEST(ServerHttp, CachedTokensInUsageAndMetrics) {
  FakeEngineOptions eo;
  eo.prefix_page = 16;
  TestServer srv({}, eo);
  Json prompt = Json::array();
  for (int i = 0; i < 40; ++i) prompt.push_back(5 + i);
  const std::string body = Json{{"prompt", prompt}, {"max_tokens", 2}}.dump();
  auto [s1, b1] = srv.Post("/v1/completions", body);
  ASSERT_EQ(s1, 200) << b1;
  EXPECT_EQ(Json::parse(b1)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto [s2, b2] = srv.Post("/v1/completions", body);
  ASSERT_EQ(s2, 200) << b2;
  EXPECT_EQ(Json::parse(b2)["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  // n = 2: the prompt's cached tokens once, as prompt_tokens counts it once.
  const Json n2{{"prompt", prompt}, {"max_tokens", 2}, {"n", 2}};
  auto [s3, b3] = srv.Post("/v1/completions", n2.dump());
  ASSERT_EQ(s3, 200) << b3;
  EXPECT_EQ(Json::parse(b3)["usage"]["prompt_tokens"], 40);
  EXPECT_EQ(Json::parse(b3)["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  // Streamed: the final usage chunk.
  const Json streamed{{"prompt", prompt},
                      {"max_tokens", 2},
                      {"stream", true},
                      {"stream_options", Json{{"include_usage", true}}}};
  auto [s4, b4] = srv.Post("/v1/completions", streamed.dump());
  ASSERT_EQ(s4, 200) << b4;
  const size_t at = b4.rfind("\"usage\"");
  ASSERT_NE(at, std::string::npos) << b4;
  EXPECT_NE(b4.find("\"prompt_tokens_details\":{\"cached_tokens\":32}", at), std::string::npos)
      << b4;
  // Chat: a fresh prompt misses.
  auto [s5, b5] = srv.Post("/v1/chat/completions",
                           R"({"messages":[{"role":"user","content":"Hi there"}],"max_tokens":2})");
  ASSERT_EQ(s5, 200) << b5;
  EXPECT_EQ(Json::parse(b5)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto m = srv.Client().Get("/metrics");
  ASSERT_TRUE(m);
  const int64_t chat = Json::parse(b5)["usage"]["prompt_tokens"].get<int64_t>();
  for (const std::string& needle :
       {fmt::format("vllm:prefix_cache_queries_total{{model_name=\"dsv4\",engine=\"0\"}} {}",
                    5 * 40 + chat),
        std::string("vllm:prefix_cache_hits_total{model_name=\"dsv4\",engine=\"0\"} ") +
            std::to_string(4 * 32)}) {
    EXPECT_NE(m->body.find(needle), std::string::npos) << needle << "\n" << m->body;
  }
}

TEST(ServerHttp, CompletionPromptFormsAndN) {
  TestServer srv;
  auto [s1, b1] = srv.Post("/v1/completions", R"({"prompt":[5,6,7],"max_tokens":3})");
  ASSERT_EQ(s1, 200) << b1;
  EXPECT_EQ(Json::parse(b1)["choices"][0]["text"], Decode(FakeOutput({5, 6, 7}, 3)));
  auto [s2, b2] = srv.Post("/v1/completions", R"({"prompt":["a","b"],"max_tokens":2,"n":2})");
  ASSERT_EQ(s2, 200) << b2;
  const Json r = Json::parse(b2);
  ASSERT_EQ(r["choices"].size(), 4u);
  EXPECT_EQ(r["choices"][3]["index"], 3);
  EXPECT_EQ(r["choices"][3]["text"], Decode(FakeOutput(V4Tokenizer().Encode("b"), 2)));
  EXPECT_EQ(r["usage"]["completion_tokens"], 8);
  auto [s3, b3] = srv.Post("/v1/completions", R"({"prompt":[[5],[6,7]],"max_tokens":1})");
  ASSERT_EQ(s3, 200) << b3;
  EXPECT_EQ(Json::parse(b3)["choices"].size(), 2u);
}

TEST(ServerHttp, CompletionStopStringIsCutAndAborts) {
  TestServer srv;
  const std::vector<int32_t> prompt = {11, 12};
  const std::string full = Decode(FakeOutput(prompt, 20));
  const std::string stop = full.substr(full.size() / 2, 3);
  const Json req{{"prompt", prompt}, {"max_tokens", 20}, {"stop", stop}};
  auto [status, body] = srv.Post("/v1/completions", req.dump());
  ASSERT_EQ(status, 200) << body;
  const Json r = Json::parse(body);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST(ServerHttp, ChatNonStreamingAndStreamingAgree) {
  TestServer srv;
  const std::vector<int32_t> prompt = ChatPrompt("Hi there");
  const std::string req =
      R"({"model":"dsv4","messages":[{"role":"user","content":"Hi there"}],"max_tokens":9)";
  auto [s1, b1] = srv.Post("/v1/chat/completions", req + "}");
  ASSERT_EQ(s1, 200) << b1;
  const Json r = Json::parse(b1);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], Decode(FakeOutput(prompt, 9)));
  EXPECT_TRUE(r["choices"][0]["message"]["reasoning_content"].is_null());
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

  auto [s2, b2] = srv.Post("/v1/chat/completions",
                           req + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(s2, 200) << b2;
  const std::vector<Json> ev = SseEvents(b2);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  for (size_t i = 1; i + 3 < ev.size() + 1 && i < ev.size() - 3; ++i) {
    EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
    content += ev[i]["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(content, r["choices"][0]["message"]["content"].get<std::string>());
  const Json& fin = ev[ev.size() - 3];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(fin["choices"][0]["delta"], Json::object());
  const Json& usage = ev[ev.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 9);
  EXPECT_EQ(ev.back(), "[DONE]");
}

// Reasoning, content and a tool call, scripted: the exact JSON a client gets.
const char* kToolScript =
    R"("Let me check.</think>Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n)"
    R"(<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n)"
    R"(<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n)"
    R"(</｜DSML｜tool_calls><｜end▁of▁sentence｜>")";

std::vector<std::vector<int32_t>> ToolScript() {
  return {V4Tokenizer().Encode(Json::parse(kToolScript).get<std::string>())};
}

const char* kToolRequest =
    R"({"messages":[{"role":"user","content":"Weather in Paris?"}],
        "tools":[{"type":"function","function":{"name":"get_weather","parameters":
          {"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}],
        "chat_template_kwargs":{"enable_thinking":true},"max_tokens":200)";

TEST(ServerHttp, ScriptedReasoningAndToolCallNonStreaming) {
  TestServer srv({}, {}, ToolScript());
  auto [status, body] = srv.Post("/v1/chat/completions", std::string(kToolRequest) + "}");
  ASSERT_EQ(status, 200) << body;
  const Json r = Json::parse(body);
  const Json& msg = r["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "Let me check.");
  EXPECT_EQ(msg["content"], "Sure.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  const Json& call = msg["tool_calls"][0];
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(r["usage"]["completion_tokens"], ToolScript()[0].size());
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"],
            V4Tokenizer().Encode("Let me check.").size());
}

TEST(ServerHttp, ScriptedReasoningAndToolCallStreaming) {
  TestServer srv({}, {}, ToolScript());
  auto [status, body] =
      srv.Post("/v1/chat/completions", std::string(kToolRequest) + R"(,"stream":true})");
  ASSERT_EQ(status, 200) << body;
  const std::vector<Json> ev = SseEvents(body);
  std::string reasoning, content, args, id;
  int num_headers = 0;
  std::string finish;
  for (const Json& e : ev) {
    if (e == "[DONE]") continue;
    const Json& ch = e["choices"][0];
    const Json& d = ch["delta"];
    reasoning += d.value("reasoning_content", "");
    content += d.value("content", "");
    if (d.contains("tool_calls")) {
      const Json& t = d["tool_calls"][0];
      EXPECT_EQ(t["index"], 0);
      if (t.contains("id")) {
        ++num_headers;
        id = t["id"];
        EXPECT_EQ(t["type"], "function");
        EXPECT_EQ(t["function"]["name"], "get_weather");
        EXPECT_EQ(args, "");  // the name comes first, then argument fragments
      }
      args += t["function"].value("arguments", "");
    }
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Let me check.");
  EXPECT_EQ(content, "Sure.");
  EXPECT_EQ(num_headers, 1);
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(args, R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(ev.back(), "[DONE]");
}

TEST(ServerHttp, ScriptedEosHonouredUnlessIgnoreEos) {
  const std::vector<int32_t> script = {100, 200, 1, 300, 400};
  TestServer srv({}, {}, {script});
  auto [s1, b1] = srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":10})");
  ASSERT_EQ(s1, 200) << b1;
  Json r = Json::parse(b1);
  EXPECT_EQ(r["choices"][0]["text"], Decode({100, 200}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
  auto [s2, b2] = srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":4,"ignore_eos":true})");
  ASSERT_EQ(s2, 200) << b2;
  r = Json::parse(b2);
  EXPECT_EQ(r["choices"][0]["text"], Decode({100, 200, 300}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
}

TEST(ServerHttp, TokenizeDetokenizeAndMetrics) {
  TestServer srv;
  auto [s1, b1] = srv.Post("/tokenize", R"({"prompt":"Hello world"})");
  ASSERT_EQ(s1, 200) << b1;
  const Json t = Json::parse(b1);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), V4Tokenizer().Encode("Hello world"));
  EXPECT_EQ(t["count"], t["tokens"].size());
  auto [s2, b2] = srv.Post("/detokenize", Json{{"tokens", t["tokens"]}}.dump());
  ASSERT_EQ(s2, 200) << b2;
  EXPECT_EQ(Json::parse(b2)["prompt"], "Hello world");
  auto [s3, b3] = srv.Post("/tokenize", R"({"messages":[{"role":"user","content":"Hi there"}]})");
  ASSERT_EQ(s3, 200) << b3;
  EXPECT_EQ(Json::parse(b3)["tokens"].get<std::vector<int32_t>>(), ChatPrompt("Hi there"));

  ASSERT_EQ(srv.Post("/v1/completions", R"({"prompt":[5,6],"max_tokens":4})").first, 200);
  auto m = srv.Client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->Header("Content-Type"), "text/plain; version=0.0.4");
  for (const char* needle :
       {"vllm:prompt_tokens_total{model_name=\"dsv4\",engine=\"0\"} 2",
        "vllm:generation_tokens_total{model_name=\"dsv4\",engine=\"0\"} 4",
        "vllm:request_success_total{model_name=\"dsv4\",engine=\"0\",finished_reason=\"length\"} 1",
        "vllm:time_to_first_token_seconds_count{model_name=\"dsv4\",engine=\"0\"} 1",
        "vllm:time_per_output_token_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"dsv4\",engine=\"0\","
        "position=\"0\"} 0"}) {
    EXPECT_NE(m->body.find(needle), std::string::npos) << needle;
  }
}

TEST(ServerHttp, ClientDisconnectAbortsTheRequest) {
  ServerOptions so;
  so.keepalive_seconds = 0.05;
  FakeEngineOptions eo;
  eo.step_time = std::chrono::milliseconds(20);
  TestServer srv(so, eo);
  int chunks = 0;
  auto res =
      srv.Client().Post("/v1/completions", R"({"prompt":"x","max_tokens":3000,"stream":true})",
                        "application/json", {}, [&](std::string_view) { return ++chunks < 3; });
  EXPECT_FALSE(res);  // we closed the connection after the third piece
  const int64_t at_close = srv.engine().Stats().generation_tokens_total;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (srv.engine().num_aborted() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(srv.engine().num_aborted(), 1);
  EXPECT_EQ(srv.engine().Stats().num_running, 0);
  // Aborted within one engine step of the close: the next output wakes the
  // stream, which sees the closed socket (plus one step for the abort to
  // reach the engine loop).
  EXPECT_LE(srv.engine().Stats().generation_tokens_total - at_close, 2);

  // A non-streaming client that gives up is noticed too.
  TestClient impatient(srv.port(), std::chrono::milliseconds(200));  // then the client closes
  auto r = impatient.Post("/v1/completions", R"({"prompt":"y","max_tokens":3000})");
  EXPECT_FALSE(r);
  const auto deadline2 = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (srv.engine().num_aborted() < 2 && std::chrono::steady_clock::now() < deadline2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(srv.engine().num_aborted(), 2);
  EXPECT_EQ(srv.engine().Stats().num_running, 0);
}

TEST(ServerHttp, SixtyFourConcurrentStreamsEqualSequential) {
  FakeEngineOptions eo;
  eo.max_running = 16;
  eo.max_waiting = 128;
  TestServer srv({}, eo);
  auto request = [](int i, bool stream) {
    return Json{
        {"messages", Json::array({Json{{"role", "user"}, {"content", "q" + std::to_string(i)}}})},
        {"max_tokens", 12 + i % 5},
        {"stream", stream}}
        .dump();
  };
  std::vector<std::string> sequential(64);
  for (int i = 0; i < 64; ++i) {
    auto [s, b] = srv.Post("/v1/chat/completions", request(i, false));
    ASSERT_EQ(s, 200) << b;
    sequential[i] = Json::parse(b)["choices"][0]["message"]["content"];
  }
  std::vector<std::future<std::string>> futures;
  for (int i = 0; i < 64; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      auto [s, b] = srv.Post("/v1/chat/completions", request(i, true));
      if (s != 200) return "HTTP " + std::to_string(s) + b;
      std::string content;
      for (const Json& e : SseEvents(b)) {
        if (e != "[DONE]" && !e["choices"].empty())
          content += e["choices"][0]["delta"].value("content", "");
      }
      return content;
    }));
  }
  for (int i = 0; i < 64; ++i) EXPECT_EQ(futures[i].get(), sequential[i]) << i;
  // A client has its whole body ([DONE]) before the handler thread returns and
  // releases its in-flight count, so allow the handlers a moment to unwind.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (srv.server().num_in_flight() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(srv.engine().Stats().num_running, 0);
  EXPECT_EQ(srv.engine().Stats().cache_usage, 0.0);
  EXPECT_EQ(srv.server().num_in_flight(), 0);
}

TEST(ServerHttp, GracefulStopDrainsThenAborts) {  // docs/server.md "Shutdown"
  FakeEngineOptions eo;
  eo.step_time = std::chrono::milliseconds(2);
  TestServer srv({}, eo);
  // A short request finishes normally during the drain; a long one is
  // aborted when the drain time is up and still gets a complete response.
  auto short_req = std::async(std::launch::async, [&] {
    return srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":40})");
  });
  auto long_req = std::async(std::launch::async, [&] {
    return srv.Post("/v1/completions", R"({"prompt":"y","max_tokens":3000})");
  });
  while (srv.server().num_in_flight() < 2)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread stopper([&] { srv.Stop(std::chrono::milliseconds(1000)); });
  // Stop closes the listener at once (as uvicorn does): a new connection is
  // refused, or answered 503 when it raced the close.  The stopper thread
  // starts when it gets to run (late under a sanitizer on a loaded machine):
  // poll instead of guessing a delay.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(900);
  bool turned_away = false;
  while (!turned_away && std::chrono::steady_clock::now() < deadline) {
    auto h = srv.Client().Get("/health");
    turned_away = !h || h->status == 503;
    if (!turned_away) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(turned_away);
  auto refused = srv.Post("/v1/completions", R"({"prompt":"z","max_tokens":1})");
  EXPECT_TRUE(refused.first == -1 || refused.first == 503) << refused.first;
  const auto [s1, b1] = short_req.get();
  ASSERT_EQ(s1, 200) << b1;
  EXPECT_EQ(Json::parse(b1)["choices"][0]["finish_reason"], "length");
  const auto [s2, b2] = long_req.get();
  ASSERT_EQ(s2, 200) << b2;
  EXPECT_EQ(Json::parse(b2)["choices"][0]["finish_reason"], "abort");
  stopper.join();
}

}  // namespace
}  // namespace dsv4::server::testing

namespace dsv4::server::testing {
namespace {

// An engine much faster than the handler delivers several outputs per poll;
// the finish_reason must still appear exactly once per choice, on the last
// chunk of that choice (chat: after its last delta; completions: with it).
TEST(ServerHttp, CoalescedOutputsFinishOnce) {
  FakeEngineOptions eo;
  eo.step_time = std::chrono::microseconds(0);
  TestServer srv({}, eo);
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    const bool chat = std::string(path) == "/v1/chat/completions";
    Json req = {{"max_tokens", 24}, {"stream", true}, {"n", 2}};
    if (chat) {
      req["messages"] = Json::array({Json{{"role", "user"}, {"content", "hi"}}});
    } else {
      req["prompt"] = "hi";
    }
    for (int rep = 0; rep < 5; ++rep) {
      auto [s, b] = srv.Post(path, req.dump());
      ASSERT_EQ(s, 200) << b;
      std::vector<int> finishes(2, 0);
      std::vector<bool> after_finish(2, false);
      for (const Json& e : SseEvents(b)) {
        if (e == "[DONE]" || e["choices"].empty()) continue;
        const Json& c = e["choices"][0];
        const int i = c["index"].get<int>();
        if (finishes[static_cast<size_t>(i)] > 0) after_finish[static_cast<size_t>(i)] = true;
        if (!c["finish_reason"].is_null()) ++finishes[static_cast<size_t>(i)];
      }
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(finishes[static_cast<size_t>(i)], 1) << path << " choice " << i;
        EXPECT_FALSE(after_finish[static_cast<size_t>(i)]) << path << " choice " << i;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::server::testing
