// An OpenAiServer on a free loopback port over a FakeEngine (optionally
// through the test-only ScriptedEngine), plus SSE helpers.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "fake_engine.h"
#include "http_client.h"
#include "server/openai_server.h"
#include "tests/server/scripted_engine.h"
#include "text/tokenizer.h"

namespace dsv4::server::testing {

using Json = nlohmann::ordered_json;

inline const text::Tokenizer& V4Tokenizer() {
  static const text::Tokenizer* tok = [] {
    const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";
    auto t = text::Tokenizer::Load(dir + "deepseek_v3_tokenizer.json",
                                   dir + "v4_known_added_tokens.json");
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      std::abort();
    }
    return std::move(t).value().release();
  }();
  return *tok;
}

class TestServer {
 public:
  explicit TestServer(ServerOptions options = {}, FakeEngineOptions engine_options = {},
                      std::vector<std::vector<int32_t>> scripts = {})
      : engine_(engine_options) {
    engine::AsyncEngine* engine = &engine_;
    if (!scripts.empty()) {
      scripted_ = std::make_unique<ScriptedEngine>(engine_, std::move(scripts), 1);
      engine = scripted_.get();
    }
    options.port = 0;
    // Enough for the 64-stream test without 520 idle threads per server.
    if (options.num_http_threads == 0) options.num_http_threads = 96;
    server_ = std::make_unique<OpenAiServer>(*engine, V4Tokenizer(), options);
    Status s = server_->Bind();
    EXPECT_TRUE(s.ok()) << s.ToString();
    thread_ = std::thread([this] { server_->Serve(); });
  }
  ~TestServer() { Stop(std::chrono::milliseconds(2000)); }
  void Stop(std::chrono::milliseconds drain) {
    if (!thread_.joinable()) return;
    server_->Stop(drain);
    thread_.join();
  }

  TestClient Client() const { return TestClient(server_->port()); }
  // POSTs JSON; returns {status, body}, or {-1, ...} when no answer came.
  std::pair<int, std::string> Post(const std::string& path, const std::string& body,
                                   const ClientHeaders& headers = {}) const {
    auto r = Client().Post(path, body, "application/json", headers);
    if (!r) return {-1, "no response (refused, closed or timed out)"};
    return {r->status, r->body};
  }
  FakeEngine& engine() { return engine_; }
  OpenAiServer& server() { return *server_; }
  int port() const { return server_->port(); }

 private:
  FakeEngine engine_;
  std::unique_ptr<ScriptedEngine> scripted_;
  std::unique_ptr<OpenAiServer> server_;
  std::thread thread_;
};

// The JSON events of an SSE body, in order; "[DONE]" becomes the string
// "[DONE]".  Comment lines (keepalives) are skipped.
inline std::vector<Json> SseEvents(const std::string& body) {
  std::vector<Json> events;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) != 0) continue;
    const std::string data = event.substr(6);
    events.push_back(data == "[DONE]" ? Json("[DONE]") : Json::parse(data));
  }
  return events;
}

inline std::string Decode(const std::vector<int32_t>& ids) {
  return V4Tokenizer().Decode(ids, /*skip_special=*/true);
}

// What the fake engine generates for `prompt`: n tokens.
inline std::vector<int32_t> FakeOutput(const std::vector<int32_t>& prompt, int64_t n) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i)
    ids.push_back(FakeEngine::TokenAt(prompt, i, FakeEngineOptions{}));
  return ids;
}

}  // namespace dsv4::server::testing
