// This process's place in a run (docs/scale-out.md "Ranks"): under mpirun
// (and in a build with MPI) MPI is initialised and the world communicator
// spans every rank; otherwise the process is rank 0 of 1 and nothing about
// MPI is touched, so a single process behaves exactly as without this layer.
#pragma once

#include <memory>

#include "base/status.h"
#include "dist/communicator.h"

namespace dsv4::dist {

// True when mpirun (OpenMPI's OMPI_COMM_WORLD_SIZE, or a PMIx/PMI launcher's
// PMIX_RANK / PMI_SIZE) started this process.
bool StartedByMpirun();
// True when this build links MPI (CMake found it).
bool HaveMpi();

class Session {
 public:
  // Under mpirun: MPI_Init_thread asking for MPI_THREAD_SERIALIZED (the engine
  // thread, not main, calls the collectives) and the world communicator.
  // Otherwise a LocalCommunicator.  FailedPrecondition when mpirun started
  // this process but the build has no MPI, or MPI cannot give serialized
  // threads.  At most one Session per process (MPI can be initialised once).
  static Result<std::unique_ptr<Session>> Start(int* argc, char*** argv);
  ~Session();  // MPI_Finalize under mpirun
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Communicator& world() { return *world_; }

 private:
  Session() = default;
  std::unique_ptr<Communicator> world_;
  bool mpi_ = false;
};

// The communicator of the process's Session (the one process-wide handle,
// like MPI's own world communicator: set by Session::Start, cleared by its
// destructor), or a LocalCommunicator while no Session runs.  The composition
// root (launch/) reads it; nothing below launch does.
Communicator& World();

}  // namespace dsv4::dist
