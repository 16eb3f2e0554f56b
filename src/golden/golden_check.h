// `dsv4 check-golden`: the model against the reference's golden outputs
// (docs/model.md "check-golden").  Isolated-block tests feed stored input streams to one
// block and compare its output streams (the discriminating test); end-to-end
// tests compare logits (gross errors only).  Layer kinds and the layers to test
// come from the config and the golden file, nothing is specific to tiny-a.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::golden {

struct GoldenCheckOptions {
  int num_threads = 0;  // 0 = ThreadPool::DefaultThreads()
};

struct GoldenCheckLine {
  std::string name;
  bool pass = true;
  std::string figures;  // human-readable measurements
};

struct GoldenCheckReport {
  std::vector<GoldenCheckLine> lines;
  bool ok() const;
};

// Runs every check; an error Status only when the files cannot be used
// (missing tensors, shape mismatches), not when a check fails.
Result<GoldenCheckReport> CheckGolden(const std::string& model_dir, const std::string& golden_file,
                                      const GoldenCheckOptions& options = {});

// Prints one line per check ("PASS|FAIL name: figures") and a summary to out;
// returns 0 when every check passes, 1 when one fails, 2 on an error.
int RunCheckGolden(const std::string& model_dir, const std::string& golden_file, std::ostream& out);

}  // namespace dsv4::golden
