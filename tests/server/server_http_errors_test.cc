// Every error class, in OpenAI's shape, and that bad requests leave the
// others alone.
#include "server_fixture.h"

namespace dsv4::server::testing {
namespace {

void ExpectError(const std::pair<int, std::string>& r, int status, const std::string& param = "") {
  EXPECT_EQ(r.first, status) << r.second;
  const Json j = Json::parse(r.second, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.second;
  ASSERT_TRUE(j.contains("error")) << r.second;
  const Json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param") && e.contains("code"));
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << r.second;
  }
}

const std::string kChat = R"("messages":[{"role":"user","content":"hi"}])";

TEST(ServerHttpErrors, BadRequests) {
  ServerOptions so;
  so.max_model_len = 64;
  TestServer srv(so);
  ExpectError(srv.Post("/v1/chat/completions", "{not json"), 400);
  ExpectError(srv.Post("/v1/chat/completions", "[1]"), 400);
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"temperature":"hot"})"), 400,
              "temperature");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"max_tokens":0})"), 400,
              "max_tokens");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"frobnicate":1})"), 400,
              "frobnicate");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"logit_bias":[1]})"), 400,
              "logit_bias");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"logit_bias":{"a":1}})"), 400,
              "logit_bias");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"logit_bias":{"-3":1}})"), 400,
              "logit_bias");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"logit_bias":{"5":100.5}})"), 400,
              "logit_bias");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"model":"gpt-4"})"), 400, "model");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"max_tokens":60})"), 400,
              "messages");
  ExpectError(srv.Post("/v1/completions", R"({"prompt":"hi","max_tokens":64})"), 400, "prompt");
  ExpectError(srv.Post("/v1/completions", R"({"prompt":[99999999]})"), 400, "prompt");
  ExpectError(srv.Post("/v1/completions", R"({"prompt":""})"), 400, "prompt");
  ExpectError(srv.Post("/v1/chat/completions", R"({"messages":[]})"), 400, "messages");
  ExpectError(srv.Post("/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})"),
              400);
  ExpectError(srv.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":null}]})"),
              400);
  ExpectError(srv.Post("/v1/chat/completions", R"({"messages":[{"role":"tool","content":"x"}]})"),
              400);
  ExpectError(
      srv.Post(
          "/v1/chat/completions",
          R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"[1]"}}]}]})"),
      400);
  ExpectError(
      srv.Post("/v1/chat/completions",
               "{" + kChat + R"(,"tools":[{"type":"function","function":{"name":"bad name"}}]})"),
      400, "tools");
  ExpectError(
      srv.Post(
          "/v1/chat/completions",
          "{" + kChat +
              R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"})"),
      400, "tool_choice");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"tool_choice":"auto"})"), 400,
              "tool_choice");
  ExpectError(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"reasoning_effort":"extreme"})"),
              400, "reasoning_effort");
  // Nothing reached the engine, and a good request still works.
  EXPECT_EQ(srv.engine().Stats().prompt_tokens_total, 0);
  EXPECT_EQ(srv.Post("/v1/chat/completions", "{" + kChat + R"(,"max_tokens":3})").first, 200);
}

TEST(ServerHttpErrors, NotFoundAndTooLarge) {
  ServerOptions so;
  so.max_body_bytes = 1000;
  TestServer srv(so);
  ExpectError(srv.Post("/v1/nothing", "{}"), 404);
  auto g = srv.Client().Get("/nope");
  ASSERT_TRUE(g);
  ExpectError({g->status, g->body}, 404);
  ExpectError(srv.Post("/v1/completions", R"({"prompt":")" + std::string(2000, 'a') + R"("})"),
              413);
}

TEST(ServerHttpErrors, ApiKey) {
  ServerOptions so;
  so.api_key = "sekret";
  TestServer srv(so);
  ExpectError(srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":1})"), 401);
  ExpectError(srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":1})",
                       {{"Authorization", "Bearer wrong"}}),
              401);
  EXPECT_EQ(srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":1})",
                     {{"Authorization", "Bearer sekret"}})
                .first,
            200);
  EXPECT_EQ(srv.Client().Get("/health")->status, 200);  // probes need no key
}

TEST(ServerHttpErrors, QueueFullIs429WithRetryAfterAndNothingIsLost) {
  FakeEngineOptions eo;
  eo.max_running = 1;
  eo.max_waiting = 2;
  TestServer srv({}, eo);
  srv.engine().set_paused(true);
  std::vector<std::thread> waiting;
  std::vector<int> statuses(2, 0);
  for (int i = 0; i < 2; ++i) {
    waiting.emplace_back([&, i] {
      statuses[i] = srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})").first;
    });
  }
  while (srv.engine().Stats().num_waiting < 2)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto r = srv.Client().Post("/v1/completions", R"({"prompt":"x","max_tokens":2})");
  ASSERT_TRUE(r);
  ExpectError({r->status, r->body}, 429);
  EXPECT_EQ(r->Header("Retry-After"), "1");
  srv.engine().set_paused(false);
  for (auto& t : waiting) t.join();
  EXPECT_EQ(statuses, (std::vector<int>{200, 200}));
}

TEST(ServerHttpErrors, ServerConcurrencyLimitIs429) {
  ServerOptions so;
  so.max_concurrent_requests = 1;
  TestServer srv(so);
  srv.engine().set_paused(true);
  std::thread first([&] {
    EXPECT_EQ(srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})").first, 200);
  });
  while (srv.server().num_in_flight() < 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ExpectError(srv.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})"), 429);
  srv.engine().set_paused(false);
  first.join();
}

}  // namespace
}  // namespace dsv4::server::testing
