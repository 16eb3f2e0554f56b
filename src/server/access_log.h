// One access line per generation request, for operators who read logs
// (docs/server.md "Access log"): who asked what, how it went, how long it
// took.  Pure formatting here; the server logs it when the answer is done.
#pragma once

#include <cstdint>
#include <string>

namespace dsv4::server {

struct AccessRecord {
  std::string route;          // "/v1/chat/completions"
  int status = 200;           // the HTTP status answered (0: the client left first)
  std::string id;             // response id ("chatcmpl-…"); empty when refused before
  int64_t prompt_tokens = 0;  // over every prompt of the request
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  double ttft_s = -1;         // < 0: no token was produced
  double total_s = 0;         // request received -> answer done
  std::string finish;         // stop | length | abort | error; empty when none
};

// "access: POST /v1/chat/completions 200 id=chatcmpl-… prompt=12 completion=8
// cached=0 ttft=0.031s total=0.120s finish=stop" (fields that do not apply
// print "-").
std::string AccessLine(const AccessRecord& r);

}  // namespace dsv4::server
