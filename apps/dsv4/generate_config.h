// `--generate-config` and `--speculative-config` JSON (docs/sampling.md §5):
// strict types, unknown fields rejected, every error one line naming the
// field.  Shared by `dsv4 generate` (per-run settings) and, later, `dsv4
// serve` (server-wide defaults).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampling_params.h"

namespace dsv4::cli {

// Fields and defaults (docs/sampling.md §5):
//   max_new_tokens int >= 1 [256]      temperature number >= 0 [0.0]
//   top_p number in (0, 1] [1.0]       top_k null | int (-1 / 0 = off) [null]
//   min_p number in [0, 1] [0.0]       seed null | int >= 0 [null]
//   stop null | [string] [[]]          stop_token_ids null | [int >= 0] [[]]
//   presence_penalty, frequency_penalty number in [-2, 2] [0.0]
//   repetition_penalty number > 0 [1.0]
//   logprobs null | int in [0, 20] [null]
//   stream bool [false]                ignore_eos bool [false]
//   thinking bool [false], reasoning_effort null | string [null]: --chat only
// Integers are accepted where a number is expected; booleans never are.
struct GenerateConfig {
  int64_t max_new_tokens = 256;
  engine::SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool stream = false;
  bool thinking = false;
  std::optional<std::string> reasoning_effort;
};

// InvalidArgument with a one-line message on malformed JSON, a wrong type,
// a value out of range or an unknown field.
Result<GenerateConfig> ParseGenerateConfig(std::string_view json);

// {"method": "mtp", "num_speculative_tokens": K}, K >= 1 (both required):
// returns K.
Result<int32_t> ParseSpeculativeConfig(std::string_view json);

}  // namespace dsv4::cli
