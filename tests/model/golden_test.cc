// The real gate: `dsv4 check-golden` on tiny-a must pass (golden/README.md §7).
#include "testing/golden.h"

#include <gtest/gtest.h>

#include <sstream>

#include "golden/golden_check.h"

namespace dsv4 {
namespace {

TEST(CheckGoldenTest, TinyAPassesEveryCheck) {
  std::ostringstream out;
  const int rc =
      golden::RunCheckGolden(testing::TestDataPath("golden/tiny-a"),
                             testing::TestDataPath("golden/tiny-a/golden.safetensors"), out);
  std::cout << out.str();
  EXPECT_EQ(rc, 0) << out.str();
  // 6 prefill37 blocks + 2 compressed blocks x (prefill, decode) + 2 MTP tests,
  // the median, 7 end-to-end logits tensors and the greedy line.
  const std::string s = out.str();
  EXPECT_NE(s.find("isolated tests median"), std::string::npos);
  EXPECT_NE(s.find("end-to-end greedy.logits"), std::string::npos);
}

TEST(CheckGoldenTest, MissingFilesAreAnError) {
  std::ostringstream out;
  EXPECT_EQ(golden::RunCheckGolden(testing::TestDataPath("golden/no-such-model"),
                                   testing::TestDataPath("golden/tiny-a/golden.safetensors"), out),
            2);
  EXPECT_NE(out.str().find("error"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
