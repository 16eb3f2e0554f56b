// Drives prompts through an AsyncEngine for `dsv4 generate`: submits them
// all at once (continuous batching does the rest), follows every output on
// the calling thread, matches stop strings after each committed token and
// aborts a request whose stop string appeared.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/async_engine.h"
#include "generate_config.h"
#include "text/tokenizer.h"

namespace dsv4::cli {

struct PromptResult {
  std::vector<int32_t> tokens;         // through the token that completed a stop string
  std::vector<TokenLogprob> logprobs;  // aligned with tokens when requested
  std::string text;                    // stop string removed; empty without tokenizer
  std::string finish;                  // eos | stop | length | aborted | error
  Status error;                        // with finish == "error"
};

struct GenerateStats {
  double seconds = 0;  // first submission to the last final output
  int64_t num_tokens = 0;
  int64_t num_verify_steps = 0;  // steps that carried drafts
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
};

struct GenerateJob {
  std::vector<std::vector<int32_t>> prompts;
  GenerateConfig config;
  const text::Tokenizer* tokenizer = nullptr;  // null: no text, no stop strings
  int32_t eos_token_id = 1;
  std::ostream* stream = nullptr;  // stream=true: text deltas of the one prompt
};

// InvalidArgument when the engine refuses a request at submission (the
// requests submitted before it are aborted and awaited).
Result<std::vector<PromptResult>> RunGenerate(AsyncEngine& engine, const GenerateJob& job,
                                              GenerateStats* stats);

}  // namespace dsv4::cli
