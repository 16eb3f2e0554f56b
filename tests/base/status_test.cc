#include "base/status.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("{} is odd", x);
  return x / 2;
}

Result<int> Quarter(int x) {
  DSV4_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = NotFound("tensor '{}' missing", "a.b");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: tensor 'a.b' missing");
  EXPECT_EQ(s.WithPrefix("x.safetensors").message(), "x.safetensors: tensor 'a.b' missing");
}

TEST(Status, ResultPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "3 is odd");
}

}  // namespace
}  // namespace dsv4
