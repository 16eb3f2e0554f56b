// Message JSON -> DeepSeek-V4 prompt.  The first byte picks the options; the
// rest is parsed as (ordered) JSON and handed to EncodeMessages, which must
// return a prompt or an error, never crash.  A prompt built from valid UTF-8
// JSON must itself be valid UTF-8 and must tokenize.  The messages are read
// as the server reads them (ReadJson, at most 128 levels: EncodeMessages
// copies messages with nlohmann's recursive copy); tool-call `arguments`
// strings inside them may nest to any depth, as a model's output can.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/text_fuzz_common.h"
#include "text/chat_encoding.h"
#include "text/json_reader.h"
#include "text/utf8.h"

using namespace dsv4::text;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  JsonLimits limits;
  limits.max_depth = 128;
  OrderedJson messages;
  if (ReadJson(body, limits, &messages)) return 0;
  EncodeOptions o;
  o.thinking_mode = (flags & 1) ? ThinkingMode::kThinking : ThinkingMode::kChat;
  o.drop_thinking = (flags & 2) == 0;
  o.add_default_bos_token = (flags & 4) == 0;
  if (flags & 8) o.reasoning_effort = (flags & 16) ? "max" : "high";
  if ((flags & 32) && messages.is_array() && messages.size() > 1) {
    // Split: the first message becomes context.
    o.context = OrderedJson::array({messages[0]});
    messages.erase(messages.begin());
  }
  auto prompt = EncodeMessages(messages, o);
  if (prompt.ok()) {
    fuzz::Require(IsValidUtf8(*prompt), "prompt is not valid UTF-8");
    if (prompt->size() < 4096) (void)fuzz::V4Tokenizer().Encode(*prompt);
  }
  return 0;
}
