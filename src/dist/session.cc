#include "dist/session.h"

#include <pthread.h>

#include <csignal>
#include <cstdlib>

#ifdef DSV4_HAVE_MPI
#include <mpi.h>

#include "dist/mpi_communicator.h"
#endif

namespace dsv4::dist {
namespace {

// Set by Session::Start, cleared by ~Session (see World()).
Communicator* g_world = nullptr;

}  // namespace

bool StartedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

bool HaveMpi() {
#ifdef DSV4_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Session>> Session::Start(int* argc, char*** argv) {
  if (g_world != nullptr) return FailedPrecondition("a dist::Session is already running");
  std::unique_ptr<Session> s(new Session());
  if (!StartedByMpirun()) {
    s->world_ = std::make_unique<LocalCommunicator>();
  } else {
#ifdef DSV4_HAVE_MPI
    int provided = 0;
    // The threads MPI starts inherit SIGINT and SIGTERM blocked: a signal
    // for the process then reaches a thread of dsv4's choosing (`dsv4 serve`
    // drains on SIGTERM) instead of killing it through an MPI thread.
    sigset_t stop, saved;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &saved);
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    if (rc != MPI_SUCCESS) return FailedPrecondition("MPI_Init_thread failed");
    s->mpi_ = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      return FailedPrecondition(
          "the MPI library gives thread level {}, dsv4 needs MPI_THREAD_SERIALIZED", provided);
    }
    s->world_ = NewMpiWorldCommunicator();
#else
    (void)argc;
    (void)argv;
    return FailedPrecondition(
        "started by mpirun, but this dsv4 was built without MPI (install libopenmpi-dev: "
        "scripts/deps, then rebuild)");
#endif
  }
  g_world = s->world_.get();
  return s;
}

Session::~Session() {
  if (g_world == world_.get()) g_world = nullptr;
  world_.reset();
#ifdef DSV4_HAVE_MPI
  if (mpi_) MPI_Finalize();
#endif
}

Communicator& World() {
  static LocalCommunicator local;
  return g_world != nullptr ? *g_world : local;
}

}  // namespace dsv4::dist
