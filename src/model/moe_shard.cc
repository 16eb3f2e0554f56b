#include "model/moe_shard.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/moe_routing.h"
#include "model/moe.h"

namespace dsv4::model {

void ShardedMoeTail(const MoeShape& shape, const MoeWeights& w, const uint8_t* xq, const float* xs,
                    int64_t nb, int64_t n, const int32_t* ids, const int64_t* offset,
                    const int64_t* ptok, const float* pw, int64_t max_rows, bf16* y,
                    int32_t* expert_ids_out, Workspace& ws, ThreadPool* pool) {
  const ExpertShard& shard = w.shard;
  dist::Communicator& comm = *shard.comm;
  const int64_t d = shape.dim;
  const int64_t e = shape.num_experts;
  const int64_t na = offset[e];
  const auto sz = [](int64_t v) { return static_cast<size_t>(v); };

  // Every rank's rows land in sorted-assignment order: rank q's experts
  // [q·E/N, (q+1)·E/N) are the rows [offset[q·E/N], offset[(q+1)·E/N)).
  bf16* ye = ws.Get<bf16>(WsSlot::kMoeYe, sz(na * d));              // [na, d]
  uint8_t* eq = ws.Get<uint8_t>(WsSlot::kMoeEq, sz(max_rows * d));  // [rows, d]
  float* es = ws.Get<float>(WsSlot::kMoeEs, sz(max_rows * nb));     // [rows, nb]
  const int64_t lo = shard.first(e);
  const int64_t hi = shard.last(e);
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t m = offset[i + 1] - offset[i];
    if (m == 0) continue;
    kernels::GatherRows(xq, xs, d, nb, ptok + offset[i], m, eq, es);
    RoutedExpertForward(shape, w.experts[sz(i)], eq, es, m, pw + offset[i], ye + offset[i] * d, ws,
                        pool);
  }
  const int ranks = comm.size();
  std::vector<int64_t> counts(sz(ranks));
  for (int q = 0; q < ranks; ++q) {
    const int64_t qlo = q * e / ranks, qhi = (q + 1) * e / ranks;
    counts[sz(q)] = (offset[qhi] - offset[qlo]) * d * static_cast<int64_t>(sizeof(bf16));
  }
  const auto t0 = std::chrono::steady_clock::now();
  // In place: this rank's block of ye already holds its rows.
  const Status s = comm.AllGatherV(ye + offset[lo] * d, ye, counts);
  if (!s.ok()) comm.Abort("dsv4: MoE expert exchange: " + s.ToString(), 1);
  if (shard.stats != nullptr) {
    ExpertExchangeStats& st = *shard.stats;
    const int64_t mine = counts[sz(comm.rank())];
    ++st.exchanges;
    st.token_layers += n;
    st.local_rows += offset[hi] - offset[lo];
    st.rows += na;
    st.bytes_sent += mine * (ranks - 1);
    st.bytes_received += na * d * static_cast<int64_t>(sizeof(bf16)) - mine;
    st.exchange_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // The single-process sum: FP32 accumulation in ascending expert id.
  float* acc = ws.Get<float>(WsSlot::kMoeAcc, sz(n * d));  // [n, d]
  std::memset(acc, 0, sz(n * d) * sizeof(float));
  for (int64_t i = 0; i < e; ++i) {
    const int64_t m = offset[i + 1] - offset[i];
    if (m > 0) kernels::ScatterAddRows(ye + offset[i] * d, ptok + offset[i], m, d, acc, pool);
  }
  bf16* ysh = nullptr;
  if (shape.shared_inter > 0) {
    ysh = ws.Get<bf16>(WsSlot::kMoeYsh, sz(n * d));  // [n, d]
    SharedExpertForward(shape, w.shared, xq, xs, n, ysh, ws, pool);
  }
  kernels::CombineExperts(acc, ysh, n, d, y, pool);  // the shared expert last
  if (expert_ids_out != nullptr) kernels::SortRowsAscending(ids, n, shape.top_k, expert_ids_out);
}

}  // namespace dsv4::model
