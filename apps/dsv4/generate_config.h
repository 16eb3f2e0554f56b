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
//   min_tokens int >= 0 [0]            include_stop_str_in_output bool [false]
//   thinking bool [false], reasoning_effort null | string [null]: --chat only
// Integers are accepted where a number is expected; booleans never are.
struct GenerateConfig {
  int64_t max_new_tokens = 256;
  engine::SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool stream = false;
  bool thinking = false;
  std::optional<std::string> reasoning_effort;
};

// InvalidArgument with a one-line message on malformed JSON, a wrong type,
// a value out of range or an unknown field.  The fields the JSON names
// replace those of `base` (the defaults: dsv4's, or generation_config.json's).
Result<GenerateConfig> ParseGenerateConfig(std::string_view json, GenerateConfig base = {});

// The flat sampling flags of `dsv4 generate` (--temperature, --top-p, ...),
// each applied over `config` as the JSON field of the same name would be; a
// flag given wins over --generate-config (docs/sampling.md §5 "Precedence").
struct SamplingFlags {
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty,
      repetition_penalty;
  std::optional<int64_t> top_k, seed, max_tokens, min_tokens, logprobs;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
};
// InvalidArgument naming the flag, e.g. "--top-p: \"top_p\" must be in (0, 1], got 2".
Status ApplySamplingFlags(const SamplingFlags& flags, GenerateConfig* config);

// {"method": "mtp", "num_speculative_tokens": K}, K >= 1 (both required):
// returns K.
Result<int32_t> ParseSpeculativeConfig(std::string_view json);

}  // namespace dsv4::cli
