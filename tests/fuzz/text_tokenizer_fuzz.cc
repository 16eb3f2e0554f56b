// Tokenizer encode/decode on arbitrary bytes.  Properties: Encode is total
// and lossless (DecodeBytes(Encode(x)) == x), ids are known, Decode is valid
// UTF-8 equal to SanitizeUtf8(x), and the incremental detokenizer agrees
// with Decode for a data-dependent split of the ids.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/text_fuzz_common.h"
#include "text/detokenizer.h"
#include "text/utf8.h"

using namespace dsv4::text;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::V4Tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.Encode(text);
  for (int32_t id : ids) fuzz::Require(tok.IsKnown(id), "unknown id from Encode");
  fuzz::Require(tok.DecodeBytes(ids) == text, "DecodeBytes(Encode(x)) != x");
  const std::string decoded = tok.Decode(ids);
  fuzz::Require(IsValidUtf8(decoded), "Decode produced invalid UTF-8");
  fuzz::Require(decoded == SanitizeUtf8(text), "Decode(Encode(x)) != SanitizeUtf8(x)");
  for (bool skip : {false, true}) {
    IncrementalDetokenizer detok(tok, skip);
    std::string streamed;
    const size_t step = size == 0 ? 1 : 1 + data[0] % 5;
    for (size_t i = 0; i < ids.size(); i += step) {
      const std::string piece =
          detok.Push(std::span<const int32_t>(ids).subspan(i, std::min(step, ids.size() - i)));
      fuzz::Require(IsValidUtf8(piece), "detokenizer emitted invalid UTF-8");
      streamed += piece;
    }
    streamed += detok.Finish();
    fuzz::Require(streamed == tok.Decode(ids, skip), "streaming detokenization != Decode");
  }
  return 0;
}
