// dsv4: the one command line (cli.cc).
#include "commands.h"

int main(int argc, char** argv) { return dsv4::cli::RunCli(argc, argv); }
