#include "residency.h"

#include "launch/numa_placement.h"

namespace dsv4::cli {

void AddResidencyFlags(CLI::App* cmd, ResidencyFlags* f) {
  cmd->add_flag("--mlock", f->mlock,
                "Lock weights and caches in RAM after loading (mlockall; needs RLIMIT_MEMLOCK, "
                "ulimit -l, above the process size)");
  cmd->add_flag("--populate", f->populate,
                "Read every page of the mapped checkpoint the model still reads before serving "
                "(a progress line, the time taken in the log)");
  cmd->add_flag("--hugepages,!--no-hugepages", f->hugepages,
                "Move the mapped weights into transparent huge pages after loading (faster "
                "weight streaming; the page cache's copy is then no longer shared with other "
                "processes)")
      ->capture_default_str();
  cmd->add_option("--numa", f->numa,
                  "Memory placement of weights and caches: none, interleave (all nodes), "
                  "node:N, or auto (node local_rank % nodes: one node per rank under mpirun, "
                  "node 0 for one process); a no-op on a one-node host")
      ->capture_default_str();
}

Status PlaceMemory(const ResidencyFlags& flags, launch::EngineOptions* options) {
  DSV4_RETURN_IF_ERROR(launch::ParseNuma(flags.numa).status());
  options->numa = flags.numa;
  options->hugepages = flags.hugepages;
  options->populate = flags.populate;
  options->mlock = flags.mlock;
  if (options->ep > 1) return Status::Ok();
  DSV4_ASSIGN_OR_RETURN(
      const launch::Placement placed,
      launch::PlaceProcess(flags.numa, options->threads, options->cpu_list, /*local_rank=*/0));
  options->cpu_list = placed.cpu_list;
  return Status::Ok();
}

}  // namespace dsv4::cli
