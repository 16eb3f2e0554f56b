// The access line's fields, for a served request and for a refused one.
#include "server/access_log.h"

#include <gtest/gtest.h>

namespace dsv4::server {
namespace {

TEST(AccessLogTest, ServedAndRefusedRequests) {
  AccessRecord r;
  r.route = "/v1/chat/completions";
  r.status = 200;
  r.id = "chatcmpl-7";
  r.prompt_tokens = 12;
  r.completion_tokens = 8;
  r.ttft_s = 0.0314;
  r.total_s = 0.1199;
  r.finish = "stop";
  EXPECT_EQ(AccessLine(r),
            "access: POST /v1/chat/completions 200 id=chatcmpl-7 prompt=12 completion=8 cached=0 "
            "ttft=0.031s total=0.120s finish=stop");
  AccessRecord refused;
  refused.route = "/v1/completions";
  refused.status = 400;
  refused.total_s = 0.0004;
  EXPECT_EQ(AccessLine(refused),
            "access: POST /v1/completions 400 id=- prompt=0 completion=0 cached=0 ttft=- "
            "total=0.000s finish=-");
  r.status = 0;  // the client left before the answer was complete
  r.finish = "abort";
  EXPECT_EQ(AccessLine(r).rfind("access: POST /v1/chat/completions - id=chatcmpl-7", 0), 0u);
}

}  // namespace
}  // namespace dsv4::server
