// Hostile request bodies (docs/server.md "Input limits"): JSON nested deep
// enough to overflow a recursive walk, objects with 100k keys, bodies that
// dodge --max-request-bytes through chunked framing or compression.  Each is
// answered with an OpenAI-style error naming the field, and the server keeps
// serving.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "server_fixture.h"

namespace dsv4::server::testing {
namespace {

// Deeper than the ~21,500 levels that overflowed the recursive dump.
constexpr size_t kDeep = 25000;

std::string DeepObject(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += R"({"a":)";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

std::string DeepArray(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string Quoted(const std::string& s) { return Json(s).dump(); }

std::string ToolsWithParameters(const std::string& parameters) {
  return R"("tools":[{"type":"function","function":{"name":"f","parameters":)" + parameters + "}}]";
}

std::string AssistantCallWithArguments(const std::string& arguments_json) {
  return R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",)"
         R"("function":{"name":"f","arguments":)" +
         arguments_json + "}}]}";
}

std::string ChatWithCall(const std::string& arguments_json) {
  return R"({"messages":[{"role":"user","content":"hi"},)" +
         AssistantCallWithArguments(arguments_json) +
         R"(,{"role":"tool","tool_call_id":"c1","content":"ok"}],"max_tokens":2})";
}

// Asserts an OpenAI error with `status` whose param starts with `param` and
// whose message contains `text`.
void ExpectLimitError(const std::pair<int, std::string>& r, int status, const std::string& param,
                      const std::string& text) {
  EXPECT_EQ(r.first, status) << r.second.substr(0, 300);
  const Json j = Json::parse(r.second, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.second.substr(0, 300);
  const Json& e = j["error"];
  ASSERT_TRUE(e["param"].is_string()) << e.dump();
  EXPECT_EQ(e["param"].get<std::string>().rfind(param, 0), 0u) << e.dump();
  EXPECT_NE(e["message"].get<std::string>().find(text), std::string::npos) << e.dump();
  EXPECT_EQ(e["type"], "invalid_request_error");
}

void ExpectServing(const TestServer& srv) {
  const auto r = srv.Post("/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
  EXPECT_EQ(r.first, 200) << r.second;
}

const char* kDepthText = "JSON nested deeper than 128 levels";

TEST(ServerHttpLimits, DeepToolParametersAre400) {
  TestServer srv;
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],)" +
                           ToolsWithParameters(DeepObject(kDeep)) + "}";
  ExpectLimitError(srv.Post("/v1/chat/completions", body), 400, "tools[0].function.parameters",
                   kDepthText);
  ExpectLimitError(srv.Post("/tokenize", body), 400, "tools[0].function.parameters", kDepthText);
  ExpectServing(srv);
  // Within the limit the schema is rendered into the prompt.
  const std::string ok = R"({"messages":[{"role":"user","content":"hi"}],)" +
                         ToolsWithParameters(DeepObject(100)) + "}";
  const auto r = srv.Post("/tokenize", ok);
  ASSERT_EQ(r.first, 200) << r.second;
  EXPECT_GT(Json::parse(r.second)["count"].get<int>(), 100);
}

TEST(ServerHttpLimits, DeepToolCallArgumentsAre400) {
  TestServer srv;
  // As a JSON object (the body itself is too deep).
  ExpectLimitError(srv.Post("/v1/chat/completions", ChatWithCall(DeepObject(kDeep))), 400,
                   "messages[1].tool_calls[0].function.arguments", kDepthText);
  // As a JSON string holding deep JSON: the body is shallow, the arguments are not.
  for (const std::string& args : {DeepObject(kDeep), R"({"x":)" + DeepArray(kDeep) + "}"}) {
    const auto r = srv.Post("/v1/chat/completions", ChatWithCall(Quoted(args)));
    ExpectLimitError(r, 400, "messages[1].tool_calls[0].function.arguments", kDepthText);
    EXPECT_EQ(Json::parse(r.second)["error"]["param"],
              "messages[1].tool_calls[0].function.arguments");
    ExpectLimitError(srv.Post("/tokenize", ChatWithCall(Quoted(args))), 400,
                     "messages[1].tool_calls[0].function.arguments", kDepthText);
  }
  ExpectServing(srv);
  // 100 levels are fine and reach the prompt.
  const auto r = srv.Post("/tokenize", ChatWithCall(Quoted(DeepObject(100))));
  EXPECT_EQ(r.first, 200) << r.second;
}

// The model writes a tool call whose value is nested 25,000 deep: the client
// gets it verbatim; sending it back is a 400 (it is over the input limit),
// not a crash.
TEST(ServerHttpLimits, ModelProducedDeepToolCallRoundTrip) {
  const std::string value = DeepArray(kDeep);
  const std::string script =
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" "
      "string=\"false\">" +
      value + "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
  const std::vector<int32_t> ids = V4Tokenizer().Encode(script);
  ServerOptions so;
  so.max_model_len = static_cast<int64_t>(ids.size()) + 1000;
  FakeEngineOptions eo;
  eo.max_model_len = so.max_model_len;
  eo.step_time = std::chrono::microseconds(0);
  TestServer srv(so, eo, {ids});
  const std::string request = R"({"messages":[{"role":"user","content":"hi"}],)" +
                              ToolsWithParameters("{}") +
                              ",\"max_tokens\":" + std::to_string(ids.size() + 10) + "}";
  const auto r = srv.Post("/v1/chat/completions", request);
  ASSERT_EQ(r.first, 200) << r.second.substr(0, 300);
  const Json response = Json::parse(r.second);
  const Json& msg = response["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << msg.dump().substr(0, 300);
  const std::string arguments = msg["tool_calls"][0]["function"]["arguments"];
  EXPECT_EQ(arguments, R"({"x": )" + value + "}");
  // The client appends the call and a result and asks again.
  const std::string again = R"({"messages":[{"role":"user","content":"hi"},)" +
                            AssistantCallWithArguments(Quoted(arguments)) +
                            R"(,{"role":"tool","tool_call_id":"c1","content":"ok"}],)" +
                            ToolsWithParameters("{}") + R"(,"max_tokens":2})";
  ExpectLimitError(srv.Post("/v1/chat/completions", again), 400,
                   "messages[1].tool_calls[0].function.arguments", kDepthText);
  ExpectServing(srv);
}

// 100k keys parsed in quadratic time took 8-23 s of CPU; now the object is
// refused at its 10,001st member (the parse up to there is linear).
TEST(ServerHttpLimits, HundredThousandKeysAre400) {
  TestServer srv;
  std::string keys = "{";
  for (int i = 0; i < 100000; ++i) keys += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  keys += "}";
  ExpectLimitError(
      srv.Post("/v1/chat/completions",
               R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":)" + keys + "}"),
      400, "logit_bias", "JSON object with more than 10000 members");
  ExpectLimitError(
      srv.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],)" +
                                           ToolsWithParameters(keys) + "}"),
      400, "tools[0].function.parameters", "more than 10000 members");
  ExpectServing(srv);
}

struct RawAnswer {
  std::string text;        // what the server sent
  bool timed_out = false;  // no answer and no close within 20 s
};

// A raw HTTP/1.1 exchange: sends `head` and then `chunks` (stopping quietly
// if the server closes), then reads until the end of one JSON answer, the
// server's close or 20 s.
RawAnswer RawExchange(int port, const std::string& head, const std::vector<std::string>& chunks) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  auto send_all = [fd](const std::string& s) {
    for (size_t off = 0; off < s.size();) {
      const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  };
  if (send_all(head)) {
    for (const std::string& c : chunks) {
      if (!send_all(c)) break;
    }
  }
  RawAnswer answer;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) answer.timed_out = true;
    if (n <= 0) break;
    answer.text.append(buf, static_cast<size_t>(n));
    const size_t end = answer.text.find("\r\n\r\n");
    if (end != std::string::npos && answer.text.find('}', end) != std::string::npos) break;
  }
  close(fd);
  return answer;
}

std::vector<std::string> Chunks(int count, size_t size) {
  char head[32];
  std::snprintf(head, sizeof(head), "%zx\r\n", size);
  return std::vector<std::string>(static_cast<size_t>(count),
                                  head + std::string(size, ' ') + "\r\n");
}

// httplib 0.11 read chunked bodies whole whatever the limit (256 MiB taken
// with an 8 MiB limit).
TEST(ServerHttpLimits, ChunkedBodyOverTheLimitIs413) {
  ServerOptions so;
  so.max_body_bytes = 64 << 10;
  TestServer srv(so);
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  // Within the limit, chunked bodies work as before.
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", body.size());
  RawAnswer a =
      RawExchange(srv.port(), head, {std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n"});
  EXPECT_EQ(a.text.rfind("HTTP/1.1 200", 0), 0u) << a.text;
  // 80 KiB, complete: drained, answered 413 (before: parsed, 400).
  std::vector<std::string> chunks = Chunks(20, 4096);
  chunks.push_back("0\r\n\r\n");
  a = RawExchange(srv.port(), head, chunks);
  EXPECT_EQ(a.text.rfind("HTTP/1.1 413", 0), 0u) << a.text;
  EXPECT_NE(a.text.find("request body over 65536 bytes"), std::string::npos) << a.text;
  // A body that does not end (2 MiB sent): the server stops reading at the
  // limit + 1 MiB and ends the connection (with the 413, or a reset that
  // overtakes it).  Before: it read on and waited for the end of the body.
  a = RawExchange(srv.port(), head, Chunks(512, 4096));
  EXPECT_FALSE(a.timed_out);
  EXPECT_TRUE(a.text.empty() || a.text.rfind("HTTP/1.1 413", 0) == 0) << a.text;
  ExpectServing(srv);
}

// Content-Encoding: gzip was decoded into memory without a bound (4 KiB on the
// wire -> 4 MiB body here; 8 MiB -> ~8 GiB in general).
TEST(ServerHttpLimits, CompressedBodyIsBoundedAfterDecoding) {
  ServerOptions so;
  so.max_body_bytes = 64 << 10;
  TestServer srv(so);
  const std::string plain = R"({"prompt":")" + std::string(4 << 20, 'a') + R"("})";
  uLongf len = compressBound(plain.size());
  std::string packed(len, '\0');
  ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(packed.data()), &len,
                      reinterpret_cast<const Bytef*>(plain.data()), plain.size(), 9),
            Z_OK);
  packed.resize(len);
  ASSERT_LT(packed.size(), so.max_body_bytes);
  const auto r = srv.Post("/v1/completions", packed, {{"Content-Encoding", "deflate"}});
  EXPECT_EQ(r.first, 413) << r.second.substr(0, 300);
  EXPECT_NE(r.second.find("request body over 65536 bytes"), std::string::npos) << r.second;
  ExpectServing(srv);
}

}  // namespace
}  // namespace dsv4::server::testing
