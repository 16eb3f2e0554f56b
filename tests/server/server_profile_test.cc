// POST /start_profile and /stop_profile (docs/profiling.md, docs/server.md):
// 404 without --profile, the API key honoured, a stop without a start a clear
// 400, and a session's trace holding the HTTP spans of the requests it saw.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "profile/options.h"
#include "profile/session.h"
#include "server_fixture.h"

namespace dsv4::server::testing {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("dsv4_server_profile_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  return dir;
}

ServerOptions ProfileOptions(const fs::path& out) {
  ServerOptions so;
  so.profile = true;
  so.profile_output = out.string();
  so.profile_levels = 1;  // e2e
  return so;
}

// The OpenAI error object of an answer, or null.
Json ErrorOf(const std::pair<int, std::string>& r) {
  const Json j = Json::parse(r.second, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"] : Json();
}

TEST(ServerProfile, EndpointsExistOnlyWithProfile) {
  TestServer srv;
  for (const char* path : {"/start_profile", "/stop_profile"}) {
    const auto r = srv.Post(path, "");
    EXPECT_EQ(r.first, 404) << path << " " << r.second;
    EXPECT_TRUE(ErrorOf(r).is_object()) << r.second;
  }
}

TEST(ServerProfile, StopWithoutStartIsAClear400) {
  TestServer srv(ProfileOptions(TempDir("stop")));
  const auto r = srv.Post("/stop_profile", "");
  EXPECT_EQ(r.first, 400) << r.second;
  const Json e = ErrorOf(r);
  ASSERT_TRUE(e.is_object()) << r.second;
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["message"], "no profile is running; POST /start_profile first");
  EXPECT_FALSE(fs::exists(TempDir("stop")));  // nothing written
}

TEST(ServerProfile, HonoursTheApiKey) {
  ServerOptions so = ProfileOptions(TempDir("key"));
  so.api_key = "sekret";
  TestServer srv(so);
  EXPECT_EQ(srv.Post("/start_profile", "").first, 401);
  EXPECT_EQ(srv.Post("/start_profile", "", {{"Authorization", "Bearer wrong"}}).first, 401);
  EXPECT_EQ(srv.Post("/stop_profile", "").first, 401);
  const ClientHeaders ok = {{"Authorization", "Bearer sekret"}};
  EXPECT_EQ(srv.Post("/start_profile", "", ok).first, 200);
  EXPECT_EQ(srv.Post("/stop_profile", "", ok).first, 200);
}

TEST(ServerProfile, ASessionTracesTheRequestsItSaw) {
  const fs::path out = TempDir("session");
  TestServer srv(ProfileOptions(out));
  // Before the session: not in the trace.
  ASSERT_EQ(srv.Post("/v1/completions", R"({"prompt":"before","max_tokens":2})").first, 200);
  // Sessions are numbered per process (earlier tests may have run some).
  const std::string first = profile::TracePath(out.string(), profile::SessionsStarted() + 1);
  const std::string next = profile::TracePath(out.string(), profile::SessionsStarted() + 2);
  const auto start = srv.Post("/start_profile", "");
  ASSERT_EQ(start.first, 200) << start.second;
  const Json started = Json::parse(start.second);
  EXPECT_EQ(started["status"], "started");
  EXPECT_EQ(started["levels"], "e2e");
  EXPECT_EQ(started["path"], first);
  const auto again = srv.Post("/start_profile", "");
  EXPECT_EQ(again.first, 400);
  EXPECT_EQ(ErrorOf(again)["message"], "a profile is already running; POST /stop_profile first");

  ASSERT_EQ(srv.Post("/v1/completions", R"({"prompt":"one","max_tokens":3})").first, 200);
  ASSERT_EQ(srv.Post("/v1/completions", R"({"prompt":"two","max_tokens":4,"stream":true})").first,
            200);
  ASSERT_EQ(srv.Post("/v1/chat/completions",
                     R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})")
                .first,
            200);
  // A client has its answer a moment before the worker that sent it is
  // done: wait for the handlers (their spans end before they count out).
  for (int i = 0; i < 2000 && srv.server().num_in_flight() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(srv.server().num_in_flight(), 0);
  const auto stop = srv.Post("/stop_profile", "");
  ASSERT_EQ(stop.first, 200) << stop.second;
  const Json stopped = Json::parse(stop.second);
  EXPECT_EQ(stopped["status"], "stopped");
  EXPECT_EQ(stopped["path"], first);
  EXPECT_EQ(stopped["dropped_events"], 0);

  std::ifstream in(first);
  const Json trace = Json::parse(in);
  std::map<std::string, int> spans;
  std::set<int64_t> request_ids;  // each generation span names its engine request
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "http") ++spans[e["name"].get<std::string>()];
    if (e["ph"] == "X" && e["name"] != "http.write" && e["cat"] == "http") {
      request_ids.insert(e["args"]["request_id"].get<int64_t>());
    }
  }
  EXPECT_EQ(request_ids.size(), 3u);
  EXPECT_EQ(spans["http.completions"], 2);
  EXPECT_EQ(spans["http.chat_completions"], 1);
  // A whole response is one write; the stream at least one more (how many
  // depends on how many tokens one poll gathers: under TSan, all of them).
  EXPECT_GE(spans["http.write"], 2 + 1);
  // A second session writes the next file; the first stays.
  ASSERT_EQ(srv.Post("/start_profile", "").first, 200);
  const auto second = srv.Post("/stop_profile", "");
  ASSERT_EQ(second.first, 200);
  EXPECT_EQ(Json::parse(second.second)["path"], next);
  EXPECT_NE(first, next);
  EXPECT_TRUE(fs::exists(first));
  fs::remove_all(out);
}

}  // namespace
}  // namespace dsv4::server::testing
