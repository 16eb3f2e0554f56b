// ReadJson (linear, bounded JSON parsing) and PyJsonDumps on untrusted,
// deeply nested values.
#include "text/json_reader.h"

#include <gtest/gtest.h>

#include <string>

#include "text/chat_encoding.h"
#include "text/py_json.h"

namespace dsv4::text {
namespace {

OrderedJson Read(std::string_view text, const JsonLimits& limits = {}) {
  OrderedJson j;
  const auto err = ReadJson(text, limits, &j);
  EXPECT_FALSE(err) << text << " -> " << err->path << ": " << err->message;
  return j;
}

JsonReadError ReadError(std::string_view text, const JsonLimits& limits = {}) {
  OrderedJson j = 7;
  const auto err = ReadJson(text, limits, &j);
  EXPECT_TRUE(err.has_value()) << text;
  EXPECT_TRUE(j.is_null());
  return err.value_or(JsonReadError{});
}

std::string Nested(size_t depth, const std::string& open, const std::string& leaf,
                   const std::string& close) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += open;
  s += leaf;
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}

TEST(JsonReader, SameValueAsNlohmannIncludingKeyOrderAndDuplicates) {
  for (const char* text : {
           R"({"b": 1, "a": [true, false, null, -3, 18446744073709551615, 1.5e300, "x\u00e9\n"]})",
           R"([])",
           R"({})",
           R"("s")",
           R"(-0.0)",
           R"(123456789012345678901234567890)",
           R"({"k": 1, "j": 2, "k": {"z": [3]}})",
           R"([{"a": {"b": {"c": []}}}, [[[]]], "\ud83d\ude00"])",
       }) {
    EXPECT_EQ(Read(text), OrderedJson::parse(text)) << text;
  }
  // A duplicate in an object large enough for the hash index.
  std::string big = "{";
  for (int i = 0; i < 40; ++i) big += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  big += R"("k3": "last", "k39": [1]})";
  const OrderedJson j = Read(big);
  EXPECT_EQ(j, OrderedJson::parse(big));
  EXPECT_EQ(j.size(), 40u);
  EXPECT_EQ(j.begin().key(), "k0");
  EXPECT_EQ(j["k3"], "last");
  EXPECT_EQ(std::next(j.begin(), 3).key(), "k3");  // first position kept
  EXPECT_EQ(j["k39"], OrderedJson::array({1}));
}

TEST(JsonReader, SyntaxErrorsAreNotLimits) {
  for (const char* text : {"", "{", "{\"a\":}", "[1,]", "nul", "{} x", "\"\xff\"", "NaN"}) {
    const JsonReadError e = ReadError(text);
    EXPECT_FALSE(e.limit) << text;
    EXPECT_NE(e.message.find("byte"), std::string::npos) << e.message;
  }
}

TEST(JsonReader, DepthLimitNamesThePath) {
  JsonLimits limits;
  limits.max_depth = 3;
  Read(R"({"a": [{"b": 1}]})", limits);  // exactly 3 levels
  JsonReadError e = ReadError(R"({"a": [{"b": [1]}]})", limits);
  EXPECT_TRUE(e.limit);
  EXPECT_EQ(e.path, "a[0].b");
  EXPECT_EQ(e.message, "JSON nested deeper than 3 levels");
  e = ReadError("[[[[]]]]", limits);
  EXPECT_EQ(e.path, "[0][0][0]");
  // Long paths keep their first kJsonPathSegments steps.
  limits.max_depth = 128;
  e = ReadError(Nested(200, R"({"x": )", "1", "}"), limits);
  EXPECT_EQ(e.path, "x.x.x.x.x.x.x.x...");
  EXPECT_EQ(e.message, "JSON nested deeper than 128 levels");
}

TEST(JsonReader, MemberElementAndStringLimits) {
  JsonLimits limits;
  limits.max_object_members = 2;
  limits.max_array_elements = 3;
  limits.max_string_bytes = 4;
  Read(R"({"a": [1, 2, 3], "b": "abcd"})", limits);
  Read(R"({"a": 1, "b": 2, "a": 3})", limits);  // a duplicate is not a new member
  JsonReadError e = ReadError(R"({"o": {"a": 1, "b": 2, "c": 3}})", limits);
  EXPECT_TRUE(e.limit);
  EXPECT_EQ(e.path, "o");
  EXPECT_EQ(e.message, "JSON object with more than 2 members");
  e = ReadError(R"({"o": [[1, 2, 3, 4]]})", limits);
  EXPECT_EQ(e.path, "o[0]");
  EXPECT_EQ(e.message, "JSON array with more than 3 elements");
  e = ReadError(R"({"o": ["abcde"]})", limits);
  EXPECT_EQ(e.path, "o[0]");
  EXPECT_EQ(e.message, "JSON string longer than 4 bytes");
  e = ReadError(R"({"abcde": 1})", limits);
  EXPECT_EQ(e.path, "");
  EXPECT_EQ(e.message, "JSON object key longer than 4 bytes");
}

TEST(JsonReader, HundredThousandKeysParseInOneLinearPass) {
  std::string text = "{";
  for (int i = 0; i < 100000; ++i) {
    if (i) text += ',';
    text += "\"k" + std::to_string(i) + "\":" + std::to_string(i);
  }
  text += "}";
  const OrderedJson j = Read(text);
  ASSERT_EQ(j.size(), 100000u);
  EXPECT_EQ(std::prev(j.end()).key(), "k99999");
  EXPECT_EQ(j.find("k54321").value(), 54321);
  JsonLimits limits;
  limits.max_object_members = 10000;
  EXPECT_EQ(ReadError(text, limits).message, "JSON object with more than 10000 members");
}

// 300k levels: parsing, dumping and destroying must not recurse.
TEST(JsonReader, DeepNestingParsesDumpsAndFrees) {
  const size_t depth = 300000;  // a recursive walk needs > 8 MiB of stack long before
  const OrderedJson arrays = Read(Nested(depth, "[", "1", "]"));
  EXPECT_EQ(PyJsonDumps(arrays), Nested(depth, "[", "1", "]"));
  const OrderedJson objects = Read(Nested(depth, R"({"a":)", "null", "}"));
  EXPECT_EQ(PyJsonDumps(objects), Nested(depth, R"({"a": )", "null", "}"));
}

// A deep member followed by a sibling key: a growing ordered_map copies its
// members (recursively), which is how OrderedJson::parse itself overflowed.
TEST(JsonReader, DeepMembersWithSiblingsAreNotCopied) {
  const size_t depth = 300000;
  std::string text;
  for (size_t i = 0; i < depth; ++i) text += R"({"a":)";
  text += "1";
  for (size_t i = 0; i < depth; ++i) text += R"(,"b":2})";
  const OrderedJson j = Read(text);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j["b"], 2);
  std::string expected;
  for (size_t i = 0; i < depth; ++i) expected += R"({"a": )";
  expected += "1";
  for (size_t i = 0; i < depth; ++i) expected += R"(, "b": 2})";
  EXPECT_EQ(PyJsonDumps(j), expected);
}

// The encoder reads a tool call's arguments with ReadJson: any depth works.
TEST(JsonReader, EncoderTakesDeepToolCallArguments) {
  const std::string deep = Nested(300000, "[", "", "]");
  OrderedJson messages = OrderedJson::array();
  messages.push_back({{"role", "user"}, {"content", "hi"}});
  messages.push_back(
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls",
        OrderedJson::array(
            {{{"type", "function"},
              {"function",
               {{"name", "f"}, {"arguments", R"({"x": )" + deep + R"(, "y": 1})"}}}}})}});
  const Result<std::string> prompt = EncodeMessages(messages, EncodeOptions{});
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_NE(prompt->find(R"(<｜DSML｜parameter name="x" string="false">)" + deep +
                         "</｜DSML｜parameter>"),
            std::string::npos);
}

TEST(JsonReader, PyJsonDumpsKeepsItsFormat) {
  const OrderedJson j = Read(R"({"b": [1, 2.5, {"c": null}], "a": "é\u0001", "e": {}, "f": []})");
  EXPECT_EQ(PyJsonDumps(j), R"({"b": [1, 2.5, {"c": null}], "a": "é\u0001", "e": {}, "f": []})");
  EXPECT_EQ(PyJsonDumps(OrderedJson(3)), "3");
}

TEST(JsonReader, JoinJsonPath) {
  EXPECT_EQ(JoinJsonPath("a", "b"), "a.b");
  EXPECT_EQ(JoinJsonPath("a", "[0].b"), "a[0].b");
  EXPECT_EQ(JoinJsonPath("", "b"), "b");
  EXPECT_EQ(JoinJsonPath("a", ""), "a");
}

}  // namespace
}  // namespace dsv4::text
