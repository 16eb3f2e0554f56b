// dsv4: the one command line (cli.cc).  Under mpirun every rank starts
// here: rank 0 runs the command line, the others serve its engines as
// followers until it releases them (docs/scale-out.md).
#include <cstdio>

#include "commands.h"
#include "dist/session.h"
#include "launch/ranks.h"

int main(int argc, char** argv) {
  auto session = dsv4::dist::Session::Start(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "dsv4: %s\n", session.status().message().c_str());
    return 2;
  }
  dsv4::dist::Communicator& world = (*session)->world();
  if (world.rank() != 0) return dsv4::launch::RunFollower(world);
  const int rc = dsv4::cli::RunCli(argc, argv);
  dsv4::launch::ReleaseFollowers(world);
  return rc;
}
