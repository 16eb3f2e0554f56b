// --generation-config (vLLM's flag, same values): where the default sampling
// of requests that do not choose comes from (docs/sampling.md "Generation
// config").
//   auto  the model's generation_config.json when there is one (the default);
//   vllm  ignore the file: dsv4's own defaults (greedy, no filters);
//   DIR   DIR/generation_config.json, which must exist.
// Taken from the file, as vLLM takes them: temperature, top_p, top_k, min_p,
// repetition_penalty and max_new_tokens; every other field (bos/eos ids,
// do_sample, ...) is ignored.  A request's own value always wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/sampling_params.h"

namespace dsv4::cli {

inline constexpr const char* kGenerationConfigHelp =
    "Default sampling for requests that do not set it: auto (the model's generation_config.json), "
    "vllm (ignore the file: greedy) or a directory holding a generation_config.json";

struct GenerationDefaults {
  engine::SamplingParams sampling;  // SamplingParams{} with the file's fields applied
  int64_t max_new_tokens = 0;       // 0: the file has none
  std::string path;                 // the file read; empty when none
  std::vector<std::string> taken;   // "temperature=0.7", in key order
};

// Parses the text of a generation_config.json (`path` names it in errors):
// InvalidArgument for malformed JSON or a value out of range.
Result<GenerationDefaults> ParseGenerationDefaults(const std::string& json,
                                                   const std::string& path);

// flag: auto | vllm | DIR.  NotFound when DIR has no generation_config.json.
Result<GenerationDefaults> LoadGenerationDefaults(const std::string& flag,
                                                  const std::string& model_dir);

// The start-up log line: which defaults were taken, from where.
std::string DescribeGenerationDefaults(const GenerationDefaults& defaults, const std::string& flag);

}  // namespace dsv4::cli
