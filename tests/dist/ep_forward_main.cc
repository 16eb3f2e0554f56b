// Run under mpirun by CTest (dist_ep_forward_np2/np4): on every rank, the
// model loaded with its expert shard (ModelOptions::expert_parallel) gives
// bit for bit the logits and streams of the same model loaded whole, over a
// batch mixing two prefill chunks (200 and 37 rows, crossing 4- and
// 128-token blocks) and then decode steps of both sequences, and the MTP
// block's logits over the same rows.  Exit 0 when every byte matched.
// Usage: ep_forward_main MODEL_DIR
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dist/session.h"
#include "model/model.h"

namespace dsv4 {
namespace {

struct Out {
  std::vector<float> logits;
  std::vector<bf16> streams;
};

// One forward (and one MTP forward over its streams) of `batch` on `m`.
Status Run(const model::Model& m, model::ModelCache& cache, model::ModelCache& mtp_cache,
           model::ForwardBatch batch, model::Workspace& ws, ThreadPool* pool, Out* main_out,
           Out* mtp_out) {
  batch.logit_rows.clear();
  for (int64_t r = 0; r < batch.num_tokens(); ++r) batch.logit_rows.push_back(r);
  const auto rows = static_cast<size_t>(batch.num_tokens());
  const auto vocab = static_cast<size_t>(m.config().vocab_size);
  main_out->logits.assign(rows * vocab, 0);
  main_out->streams.assign(rows * static_cast<size_t>(m.stream_width()), bf16());
  model::ForwardOutputs o;
  o.logits = main_out->logits.data();
  o.streams = main_out->streams.data();
  DSV4_RETURN_IF_ERROR(m.Forward(batch, cache, o, ws, pool));
  mtp_out->logits.assign(rows * vocab, 0);
  model::ForwardOutputs t;
  t.logits = mtp_out->logits.data();
  return m.ForwardMtp(batch, main_out->streams.data(), mtp_cache, t, ws, pool);
}

bool Same(const Out& a, const Out& b) {
  return a.logits.size() == b.logits.size() && a.streams.size() == b.streams.size() &&
         std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0 &&
         std::memcmp(a.streams.data(), b.streams.data(), a.streams.size() * sizeof(bf16)) == 0;
}

int Main(int argc, char** argv) {
  auto session = dist::Session::Start(&argc, &argv);
  if (!session.ok() || argc < 2) {
    std::fprintf(stderr, "usage: mpirun -np N ep_forward_main MODEL_DIR\n");
    return 1;
  }
  dist::Communicator& world = (*session)->world();
  model::ModelOptions sharded;
  sharded.expert_parallel = &world;
  auto whole = model::Model::Load(argv[1]);
  auto ep = model::Model::Load(argv[1], sharded);
  if (!whole.ok() || !ep.ok()) {
    std::fprintf(stderr, "rank %d: load failed: %s %s\n", world.rank(),
                 whole.status().ToString().c_str(), ep.status().ToString().c_str());
    return 1;
  }
  ThreadPool pool(1);
  model::Workspace ws_whole, ws_ep;
  auto c_whole = (*whole)->NewCache(2), c_ep = (*ep)->NewCache(2);
  auto m_whole = (*whole)->NewCache(2), m_ep = (*ep)->NewCache(2);
  std::mt19937 rng(5);
  const auto vocab = static_cast<uint32_t>((*whole)->config().vocab_size);
  auto ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<int32_t>(rng() % vocab);
    return v;
  };
  std::vector<model::ForwardBatch> steps(1);
  steps[0].Add(0, 0, ids(200));
  steps[0].Add(1, 0, ids(37));
  for (int s = 0; s < 4; ++s) {
    model::ForwardBatch b;
    b.Add(0, 200 + s, ids(1));
    b.Add(1, 37 + s, ids(1));
    steps.push_back(b);
  }
  int failures = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    Out a, a_mtp, b, b_mtp;
    Status sa = Run(**whole, *c_whole, *m_whole, steps[s], ws_whole, &pool, &a, &a_mtp);
    Status sb = Run(**ep, *c_ep, *m_ep, steps[s], ws_ep, &pool, &b, &b_mtp);
    if (!sa.ok() || !sb.ok()) {
      std::fprintf(stderr, "rank %d step %zu: %s %s\n", world.rank(), s, sa.ToString().c_str(),
                   sb.ToString().c_str());
      return 1;
    }
    if (!Same(a, b) || !Same(a_mtp, b_mtp)) {
      std::fprintf(stderr, "rank %d step %zu: sharded forward differs from the whole model\n",
                   world.rank(), s);
      ++failures;
    }
  }
  const model::ExpertExchangeStats& x = (*ep)->expert_exchange_stats();
  if (x.exchanges == 0 || x.local_rows == 0 || x.local_rows >= x.rows) {
    std::fprintf(stderr, "rank %d: the sharded model did not exchange (%lld of %lld rows here)\n",
                 world.rank(), static_cast<long long>(x.local_rows),
                 static_cast<long long>(x.rows));
    ++failures;
  }
  if (failures == 0 && world.rank() == 0) {
    std::printf("%d ranks: logits, streams and MTP logits bitwise equal to one process\n",
                world.size());
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dsv4

int main(int argc, char** argv) { return dsv4::Main(argc, argv); }
