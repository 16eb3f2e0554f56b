#include "model/moe_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/int8_gemm.h"
#include "kernels/moe_routing.h"
#include "kernels/quant.h"
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

// ---- Data-parallel MoE (DP attention across ranks) ----

namespace {

size_t Sz(int64_t v) { return static_cast<size_t>(v); }

constexpr int64_t kActBlock = 128;  // activation block along K (as in moe.cc)

// What each rank says before an exchange: its rows and layer, or that it has
// finished the step's MoE layers (an idle filler).
struct DpHeader {
  int64_t rows = 0;
  int32_t layer = -1;
  int32_t done = 0;
};

std::vector<DpHeader> GatherHeaders(dist::Communicator& comm, const DpHeader& mine) {
  std::vector<DpHeader> all(Sz(comm.size()));
  const Status s = comm.AllGather(&mine, sizeof(DpHeader), all.data());
  if (!s.ok()) comm.Abort("dsv4: data-parallel MoE header: " + s.ToString(), 1);
  int32_t layer = -1;
  for (const DpHeader& h : all) {
    if (h.done != 0) continue;
    if (layer >= 0 && h.layer != layer) {
      // Every working rank runs the main layers in order, then the MTP
      // block: two layers at once is a broken invariant.
      comm.Abort(fmt::format("dsv4: rank {}: data-parallel MoE: ranks in layers {} and {} at once",
                             comm.rank(), layer, h.layer),
                 1);
    }
    layer = h.layer;
  }
  return all;
}

// One exchange of one layer, every rank's header known.  This rank's n rows:
// codes xq [n, d], scales xs [n, nb], routing ids/rw [n, k]; y [n, d].
void Exchange(const MoeShape& shape, const MoeWeights& w, std::span<const DpHeader> headers,
              const uint8_t* xq, const float* xs, const int32_t* ids, const float* rw, int64_t n,
              bf16* y, int32_t* expert_ids_out, Workspace& ws, ThreadPool* pool) {
  const ExpertShard& shard = w.shard;
  dist::Communicator& comm = *shard.comm;
  const int ranks = comm.size();
  const int me = comm.rank();
  const int64_t d = shape.dim, e = shape.num_experts, k = shape.top_k;
  const int64_t nb = w.int8 ? 1 : d / kActBlock;
  // Per token: codes, scales, expert ids, routing weights.  Rank q's block
  // holds its n_q tokens' codes, then their scales, ids and weights.
  const int64_t rec = d + nb * 4 + k * 4 + k * 4;
  std::vector<int64_t> counts(Sz(ranks));
  int64_t total = 0, base = 0, mine_at = 0;
  for (int q = 0; q < ranks; ++q) {
    if (q == me) {
      base = total;
      mine_at = total * rec;
    }
    counts[Sz(q)] = headers[Sz(q)].rows * rec;
    total += headers[Sz(q)].rows;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint8_t* all = ws.Get<uint8_t>(WsSlot::kMoeDpAll, Sz(std::max<int64_t>(total * rec, 1)));
  if (n > 0) {
    uint8_t* p = all + mine_at;
    std::memcpy(p, xq, Sz(n * d));
    std::memcpy(p + n * d, xs, Sz(n * nb) * 4);
    std::memcpy(p + n * (d + nb * 4), ids, Sz(n * k) * 4);
    std::memcpy(p + n * (d + nb * 4 + k * 4), rw, Sz(n * k) * 4);
  }
  Status s = comm.AllGatherV(all + mine_at, all, counts);
  if (!s.ok()) comm.Abort("dsv4: data-parallel MoE dispatch: " + s.ToString(), 1);
  const auto t1 = std::chrono::steady_clock::now();
  if (total == 0) return;  // every rank knows: nothing more to exchange

  // Every token of every rank, rank after rank (global token t).
  uint8_t* gq = ws.Get<uint8_t>(WsSlot::kMoeXq, Sz(total * d));
  float* gs = ws.Get<float>(WsSlot::kMoeXs, Sz(total * nb));
  int32_t* gids = ws.Get<int32_t>(WsSlot::kMoeIds, Sz(total * k));
  float* grw = ws.Get<float>(WsSlot::kMoeRw, Sz(total * k));
  for (int64_t q = 0, t = 0; q < ranks; ++q) {
    const int64_t m = headers[Sz(q)].rows;
    const uint8_t* p = all + t * rec;
    std::memcpy(gq + t * d, p, Sz(m * d));
    std::memcpy(gs + t * nb, p + m * d, Sz(m * nb) * 4);
    std::memcpy(gids + t * k, p + m * (d + nb * 4), Sz(m * k) * 4);
    std::memcpy(grw + t * k, p + m * (d + nb * 4 + k * 4), Sz(m * k) * 4);
    t += m;
  }
  const int64_t na = total * k;
  int64_t* offset = ws.Get<int64_t>(WsSlot::kMoeOff, Sz(e + 1));
  int64_t* ptok = ws.Get<int64_t>(WsSlot::kMoePtok, Sz(na));
  float* pw = ws.Get<float>(WsSlot::kMoePw, Sz(na));
  const int64_t max_rows = kernels::SortByExpert(gids, grw, total, k, e, offset, ptok, pw);

  // Rows of expert i for rank q's tokens [base_q, base_q + n_q): inside an
  // expert the rows are in ascending token order, so they are one run,
  // [cut[i (R + 1) + q], cut[i (R + 1) + q + 1]).
  const int64_t stride = ranks + 1;
  int64_t* cut = ws.Get<int64_t>(WsSlot::kMoeDpTok, Sz(e * stride + max_rows + 1));
  int64_t* tok = cut + e * stride;  // [max_rows] this rank's tokens of one expert
  for (int64_t i = 0; i < e; ++i) {
    int64_t t = 0;
    for (int q = 0; q <= ranks; ++q) {
      cut[i * stride + q] = std::lower_bound(ptok + offset[i], ptok + offset[i + 1], t) - ptok;
      if (q < ranks) t += headers[Sz(q)].rows;
    }
  }

  // This rank's experts on every rank's rows; each row goes back to its
  // token's rank only (all-to-all), expert after expert.
  const int64_t lo = shard.first(e), hi = shard.last(e);
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(bf16));
  bf16* ye = ws.Get<bf16>(WsSlot::kMoeYe, Sz(std::max<int64_t>(offset[hi] - offset[lo], 1) * d));
  uint8_t* eq = ws.Get<uint8_t>(WsSlot::kMoeEq, Sz(max_rows * d));
  float* es = ws.Get<float>(WsSlot::kMoeEs, Sz(max_rows * nb));
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t m = offset[i + 1] - offset[i];
    if (m == 0) continue;
    kernels::GatherRows(gq, gs, d, nb, ptok + offset[i], m, eq, es);
    RoutedExpertForward(shape, w.experts[Sz(i)], eq, es, m, pw + offset[i],
                        ye + (offset[i] - offset[lo]) * d, ws, pool);
  }
  std::vector<int64_t> send_counts(Sz(ranks)), recv_counts(Sz(ranks));
  // The packed token slots are free once dispatched: this rank's own
  // records (kMoeDpMine) become the send buffer, every rank's
  // (kMoeDpAll) the receive buffer.
  bf16* send =
      ws.Get<bf16>(WsSlot::kMoeDpMine, Sz(std::max<int64_t>(offset[hi] - offset[lo], 1) * d));
  int64_t sent_rows = 0;
  for (int q = 0; q < ranks; ++q) {
    const int64_t q0 = sent_rows;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t a = cut[i * stride + q], m = cut[i * stride + q + 1] - a;
      if (m == 0) continue;
      std::memcpy(send + sent_rows * d, ye + (a - offset[lo]) * d, Sz(m * row_bytes));
      sent_rows += m;
    }
    send_counts[Sz(q)] = (sent_rows - q0) * row_bytes;
    int64_t from = 0;  // rows of rank q's experts for this rank's tokens
    for (int64_t i = q * e / ranks; i < (q + 1) * e / ranks; ++i) {
      from += cut[i * stride + me + 1] - cut[i * stride + me];
    }
    recv_counts[Sz(q)] = from * row_bytes;
  }
  int64_t mine_rows = 0;
  for (int64_t c : recv_counts) mine_rows += c / row_bytes;
  // Received rank after rank = this rank's tokens' rows in ascending expert id.
  bf16* got = ws.Get<bf16>(WsSlot::kMoeDpAll, Sz(std::max<int64_t>(mine_rows, 1) * d));
  const auto t2 = std::chrono::steady_clock::now();
  s = comm.AllToAllV(send, send_counts, got, recv_counts);
  if (!s.ok()) comm.Abort("dsv4: data-parallel MoE combine: " + s.ToString(), 1);
  if (shard.stats != nullptr) {
    ExpertExchangeStats& st = *shard.stats;
    const int64_t in_mine = counts[Sz(me)];
    const int64_t remote_in = mine_rows * row_bytes - recv_counts[Sz(me)];
    ++st.exchanges;
    st.token_layers += n;
    st.local_rows += offset[hi] - offset[lo];
    st.rows += remote_in / row_bytes;  // routed rows of this rank's tokens computed elsewhere
    st.bytes_sent += in_mine * (ranks - 1) + sent_rows * row_bytes - send_counts[Sz(me)];
    st.bytes_received += (total * rec - in_mine) + remote_in;
    st.dispatch_bytes += total * rec - in_mine;
    st.exchange_seconds +=
        std::chrono::duration<double>(t1 - t0).count() +
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  }
  if (n == 0) return;

  // The one-process sum: FP32 in ascending expert id, the shared expert last.
  float* acc = ws.Get<float>(WsSlot::kMoeAcc, Sz(n * d));
  std::memset(acc, 0, Sz(n * d) * sizeof(float));
  const bf16* row = got;
  for (int64_t i = 0; i < e; ++i) {
    const int64_t a = cut[i * stride + me], m = cut[i * stride + me + 1] - a;
    if (m == 0) continue;
    for (int64_t j = 0; j < m; ++j) tok[j] = ptok[a + j] - base;
    kernels::ScatterAddRows(row, tok, m, d, acc, pool);
    row += m * d;
  }
  bf16* ysh = nullptr;
  if (shape.shared_inter > 0) {
    ysh = ws.Get<bf16>(WsSlot::kMoeYsh, Sz(n * d));
    SharedExpertForward(shape, w.shared, gq + base * d, gs + base * nb, n, ysh, ws, pool);
  }
  kernels::CombineExperts(acc, ysh, n, d, y, pool);
  if (expert_ids_out != nullptr) kernels::SortRowsAscending(gids + base * k, n, k, expert_ids_out);
}

}  // namespace

void DataParallelMoe(const MoeShape& shape, const MoeWeights& w, const bf16* x,
                     const int32_t* token_ids, int64_t n, bf16* y, int32_t* expert_ids_out,
                     Workspace& ws, ThreadPool* pool) {
  const int64_t d = shape.dim, k = shape.top_k;
  const int64_t nb = w.int8 ? 1 : d / kActBlock;
  // Routing and quantization are per token: this rank's rows only.
  int32_t* ids = ws.Get<int32_t>(WsSlot::kMoeIds, Sz(std::max<int64_t>(n * k, 1)));
  float* rw = ws.Get<float>(WsSlot::kMoeRw, Sz(std::max<int64_t>(n * k, 1)));
  uint8_t* xq = ws.Get<uint8_t>(WsSlot::kMoeXq, Sz(std::max<int64_t>(n * d, 1)));
  float* xs = ws.Get<float>(WsSlot::kMoeXs, Sz(std::max<int64_t>(n * nb, 1)));
  if (n > 0) {
    Route(shape, w.router, x, token_ids, n, ids, rw, nullptr, ws, pool);
    if (w.int8) {
      kernels::ActQuantInt8PerToken(x, n, d, reinterpret_cast<int8_t*>(xq), xs, pool);
    } else {
      kernels::ActQuantFp8(x, n, d, kActBlock, xq, xs);
    }
  }
  // Exchange reuses these slots for every rank's tokens: keep copies.
  const size_t bytes = Sz(n * d) + Sz(n * nb) * 4 + Sz(n * k) * 8;
  uint8_t* p = ws.Get<uint8_t>(WsSlot::kMoeDpMine, std::max<size_t>(bytes, 1));
  std::memcpy(p, xq, Sz(n * d));
  std::memcpy(p + n * d, xs, Sz(n * nb) * 4);
  std::memcpy(p + n * d + n * nb * 4, ids, Sz(n * k) * 4);
  std::memcpy(p + n * d + n * nb * 4 + n * k * 4, rw, Sz(n * k) * 4);
  const std::vector<DpHeader> headers = GatherHeaders(*w.shard.comm, DpHeader{n, w.shard.layer, 0});
  Exchange(shape, w, headers, p, reinterpret_cast<const float*>(p + n * d),
           reinterpret_cast<const int32_t*>(p + n * d + n * nb * 4),
           reinterpret_cast<const float*>(p + n * d + n * nb * 4 + n * k * 4), n, y, expert_ids_out,
           ws, pool);
}

void FinishDataParallelStep(std::span<const MoeLayerRef> layers, Workspace& ws, ThreadPool* pool) {
  if (layers.empty()) return;
  const ExpertShard& shard = layers[0].weights->shard;
  if (!shard.active() || !shard.data_parallel) return;
  dist::Communicator& comm = *shard.comm;
  for (;;) {
    const std::vector<DpHeader> headers = GatherHeaders(comm, DpHeader{0, -1, 1});
    int32_t layer = -1;
    for (const DpHeader& h : headers) {
      if (h.done == 0) layer = h.layer;
    }
    if (layer < 0) return;  // every rank is done
    if (static_cast<size_t>(layer) >= layers.size()) {
      comm.Abort(fmt::format("dsv4: rank {}: data-parallel MoE: layer {} of {} unknown here",
                             comm.rank(), layer, layers.size()),
                 1);
    }
    const MoeLayerRef& l = layers[Sz(layer)];
    Exchange(*l.shape, *l.weights, headers, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr,
             ws, pool);
  }
}

}  // namespace dsv4::model
