// A test fixture holding the golden tiny-a model and a 2-thread pool, loaded
// once per test suite (model tests that run whole forwards share it).
#pragma once

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "model/model.h"
#include "testing/golden.h"

namespace dsv4::testing {

class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = model::Model::Load(TestDataPath("golden/tiny-a"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    model_ = nullptr;
    pool_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr); }

  static inline model::Model* model_ = nullptr;
  static inline ThreadPool* pool_ = nullptr;
};

}  // namespace dsv4::testing
