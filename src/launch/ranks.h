// Expert-parallel engines over the ranks of an mpirun (docs/scale-out.md):
// rank 0 runs the engine (scheduler, cache bookkeeping, HTTP or the offline
// driver) and broadcasts every StepPlan before running it; every other rank
// is a follower that builds the same executor from rank 0's options and
// runs the same plans.  The model's MoE layers split the routed experts over
// the ranks (model/moe_shard.h).  With --dp 1 everything else is replicated,
// so every rank computes the same tokens and rank 0's are the ones reported;
// with --dp N (DP attention across ranks) rank r runs partition r's rows and
// rank 0 gathers every rank's results.
#pragma once

#include <memory>

#include "base/status.h"
#include "dist/communicator.h"
#include "engine/async_engine.h"
#include "engine/executor.h"
#include "launch/engine_options.h"
#include "model/moe_shard.h"
#include "runner/model_executor.h"

namespace dsv4::launch {

// One-line InvalidArgument for what this slice cannot run: --ep different
// from the number of ranks, --ep > 1 outside mpirun, --dp > 1 with several
// ranks other than one partition per rank (--dp = the rank count).
Status CheckRanks(const EngineOptions& options, const dist::Communicator& world);

// One rank's share of an expert-parallel engine's steps (docs/scale-out.md
// "Measured"), summed when the engine ends: logged by every rank, and rank
// 0's is what `dsv4 bench --ep N` prints.
struct RankTraffic {
  int64_t steps = 0;
  double step_seconds = 0;  // inside steps: rank 0's plan broadcast and every forward
  double plan_seconds = 0;  // rank 0 broadcasting the plans (0 on a follower)
  model::ExpertExchangeStats moe;
  int64_t hidden_size = 0;
  // What is neither the MoE all-gathers nor the plan broadcast.
  double compute_seconds() const { return step_seconds - plan_seconds - moe.exchange_seconds; }
  // Routed-output bytes per token per MoE layer: --dp 1, what every rank
  // together exchanges per token; data-parallel, what this rank's own tokens
  // receive from other ranks (the dispatch records are in moe.dispatch_bytes).
  double bytes_per_token_layer() const {
    return moe.token_layers > 0 ? static_cast<double>(moe.rows) * static_cast<double>(hidden_size) *
                                      2.0 / static_cast<double>(moe.token_layers)
                                : 0.0;
  }
};

// Rank 0's executor: sends each plan to the followers, then runs it on
// `local` (not owned; it outlives this).  With gather_results (DP attention
// across ranks: each rank runs its own partition) the step's result is every
// rank's results merged.  Its destruction tells the followers that the
// engine ended and logs this rank's communication.
class PlanBroadcaster final : public engine::Executor {
 public:
  PlanBroadcaster(dist::Communicator& world, runner::ModelExecutor* local,
                  const model::Model& model, bool gather_results);
  ~PlanBroadcaster() override;
  Result<engine::StepResult> Run(const engine::StepPlan& plan) override;

 private:
  dist::Communicator& world_;
  runner::ModelExecutor* local_;
  const model::Model& model_;
  bool gather_results_ = false;
  RankTraffic traffic_;
};

// Rank 0: the traffic of the last engine over the world's ranks
// (dist::World()) that ended; all zero before one has, or with one rank.
RankTraffic LastEngineTraffic();

// Rank 0 of a run with several ranks: what CreateLocalEngine does, with the
// followers loading the model alongside, a start-up check that every rank
// runs the same binary and checkpoint (fingerprints compared on every rank;
// a mismatch or a failure on any rank is an error on every rank), rank 0's
// cache budget used everywhere (the block tables index identical pools).
Result<std::unique_ptr<engine::AsyncEngine>> CreateRankZeroEngine(const EngineOptions& options,
                                                                  dist::Communicator& world);

// Ranks other than 0: serves rank 0's engines until rank 0 releases them
// (ReleaseFollowers); returns the process's exit status.  Ignores SIGINT and
// SIGTERM (rank 0 decides when to stop); once rank 0 has sent its first
// message, a silence longer than --dist-timeout aborts every rank (rank 0
// sends keep-alives while idle).
int RunFollower(dist::Communicator& world);

// Rank 0, before it exits: stops the keep-alives and lets the followers
// exit.  Nothing with one rank.
void ReleaseFollowers(dist::Communicator& world);

}  // namespace dsv4::launch
