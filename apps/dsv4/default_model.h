// Which checkpoint `dsv4 serve | generate | eval | bench` run when no --model
// is given: the embedded default model, models/dsv4-mini, which the
// repository holds (docs/tools.md "Default model").
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::cli {

// Relative to a repository root (or any directory above the executable or
// the working directory).
inline constexpr const char* kDefaultModelSubdir = "models/dsv4-mini";

// The text every --model flag's help carries.
inline constexpr const char* kModelFlagHelp =
    "Checkpoint directory (default: $DSV4_MODEL, else the embedded default model "
    "models/dsv4-mini, found in the executable's directory, the working directory or a parent)";

struct ModelLocation {
  std::string dir;
  std::string source;  // "--model", "$DSV4_MODEL" or "default"
};

// Resolution order:
//  1. `flag` when non-empty, as given (the loader reports a bad directory);
//  2. `env` ($DSV4_MODEL) when non-empty; NotFound unless it is a directory;
//  3. the first <d>/models/dsv4-mini holding config.json, for d = each of
//     search_dirs and then its parents up to the root, search dir by search
//     dir (a directory without config.json, e.g. an empty placeholder, is
//     skipped).
// NotFound otherwise: one line saying where it looked and how to get a model.
Result<ModelLocation> ResolveModelDir(const std::string& flag, const std::string& env,
                                      const std::vector<std::string>& search_dirs);

// ResolveModelDir with $DSV4_MODEL and {the executable's directory, the
// working directory}; a --model that is not a directory (missing, a file, a
// symlink loop) is an error here.
Result<ModelLocation> ResolveModel(const std::string& flag);

// The model name `serve` answers to by default (and `generate` checks a
// --chat-request's "model" against): the directory's last component.
std::string ModelName(const std::string& dir);

// The startup log line naming the model and where the choice came from.
void LogModel(const ModelLocation& model);

}  // namespace dsv4::cli
