// Everything needed to start a local engine on one process: the model
// directory and the engine flags shared by `dsv4 generate` and `dsv4 serve`
// (flag-compatible with the reference, docs/server.md "Command line").
#pragma once

#include <cstdint>
#include <string>

namespace dsv4::launch {

struct EngineOptions {
  std::string model_dir;
  int threads = 0;  // 0 = one per physical core of one NUMA node (ThreadPool::DefaultThreads)
  // Pinning of the compute threads (launch/compute_pool.h): "" / none, auto, or a CPU list.
  // Unresolved as given on the command line when ranks are sent it: each rank
  // resolves auto against its own NUMA node (launch/numa_placement.h).
  std::string cpu_list;
  // --numa (launch/numa_placement.h): none, interleave, auto or node:N.  One
  // process applies it in the CLI before loading; with --ep > 1 every rank
  // applies it before loading its shard (auto: node local_rank % nodes).
  std::string numa = "none";
  // --hugepages (launch/huge_pages.h): after the memory plan, the mapped
  // checkpoint moves into transparent huge pages unless the weights stream
  // from disk.  One process only (not with --ep > 1).
  bool hugepages = true;
  // --populate and --mlock (launch/residency.h): once the engine runs, the
  // mapped checkpoint the model still reads is read in, then the process's
  // memory locked.  One process, or rank 0 of --ep > 1.
  bool populate = false;
  bool mlock = false;
  double log_stats_interval_s = 0;        // periodic statistics line (engine/stats_log.h); 0 = none
  int64_t max_model_len = 4096;           // prompt + output tokens per request
  int64_t max_num_seqs = 16;              // running requests at most
  int64_t max_num_batched_tokens = 4096;  // token budget per step
  int64_t long_prefill_token_threshold = 2048;
  int64_t block_size = 128;  // source tokens per cache page
  int32_t dp = 1;            // attention data-parallel partitions
  // Expert-parallel ranks (--ep; docs/scale-out.md): must equal mpirun's rank
  // count; 1 = one process.
  int32_t ep = 1;
  // Seconds a rank waits inside a step for the others before it aborts the
  // run (a rank died or hangs; --dist-timeout).
  double dist_timeout_s = 60;
  int64_t kv_cache_memory = 0;         // bytes for caches; 0 = use memory_utilization
  double memory_utilization = 0.9;     // fraction of available RAM for caches (when bytes = 0)
  int32_t num_speculative_tokens = 0;  // K; 0 = no MTP
  int64_t max_waiting = 1024;          // queued requests beyond which Submit fails (429/503)
  // Prefix caching (--enable-prefix-caching, on by default as in vLLM):
  // prompts reuse the pages and rolling-state snapshots earlier requests
  // computed (docs/engine.md §7.2).
  bool enable_prefix_caching = true;
  std::string prepacked =
      "auto";  // sidecar policy: auto | off | PATH (model.h model::ModelOptions)
};

}  // namespace dsv4::launch
