// The MPI implementation of Communicator (built only when CMake found MPI).
// Collectives are the non-blocking MPI-3 ones, completed by a polling loop
// that first yields and then sleeps: ranks share cores with compute threads
// (and, on a test machine, with each other), so spinning inside MPI would
// steal the time the slowest rank needs; and the loop is where the timeout
// (Communicator::timeout_s) turns a dead or hung rank into an abort.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace dsv4::dist {

// REQUIRES: MPI is initialised (Session::Start).
std::unique_ptr<Communicator> NewMpiWorldCommunicator();

}  // namespace dsv4::dist
