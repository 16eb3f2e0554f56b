// The printout of `dsv4 generate` (docs/sampling.md §5): per prompt its
// text (plain prompts) or the server's message fields (chat prompts), token
// ids, logprobs and finish reason, then the run's statistics.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "generate_driver.h"

namespace dsv4::cli {

// REQUIRES: results[i] belongs to job.prompts[i].
void PrintResults(std::ostream& os, const std::vector<PromptResult>& results,
                  const GenerateJob& job, const GenerateStats& stats,
                  int32_t num_speculative_tokens);

}  // namespace dsv4::cli
