// Sparse attention with sink against golden/ops §13, for every ISA.
#include <gtest/gtest.h>

#include <cmath>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using testing::ExpectBf16Close;
using testing::IsasToTest;
using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;
using testing::ReadI64;
using testing::ScopedIsa;

class SparseAttnGolden : public ::testing::TestWithParam<int> {};

TEST_P(SparseAttnGolden, MatchesReference) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const int dim = GetParam();
  const std::string p = "sparse_attn.d" + std::to_string(dim);
  Shape q_shape, idx_shape;
  const std::vector<bf16> q = ReadBf16(*f, p + ".q", &q_shape);
  const std::vector<bf16> kv = ReadBf16(*f, p + ".kv");
  const std::vector<int64_t> idx = ReadI64(*f, p + ".idx", &idx_shape);
  const std::vector<float> sink = ReadF32(*f, p + ".sink");
  const std::vector<bf16> want = ReadBf16(*f, p + ".o");
  const int64_t tokens = q_shape[0], heads = q_shape[1], list_len = idx_shape[1];
  std::vector<const bf16*> rows(idx.size());  // [tokens, list_len]
  for (size_t i = 0; i < idx.size(); ++i) {
    rows[i] = idx[i] < 0 ? nullptr : kv.data() + idx[i] * dim;
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    std::vector<bf16> o(q.size());
    SparseAttention(q.data(), tokens, heads, dim, rows.data(), list_len, sink.data(), scale,
                    o.data(), &pool);
    ExpectBf16Close(o, want, 2, 0.01, p + " " + std::string(IsaName(isa)));
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, SparseAttnGolden, ::testing::Values(128, 512));

}  // namespace
}  // namespace dsv4::kernels
