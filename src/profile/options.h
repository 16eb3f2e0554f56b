// The flag semantics shared by `dsv4 generate`, `bench` and `serve`
// (docs/profiling.md "Flags"), after the reference's --profile,
// --profile-output and --profile-level.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv4::profile {

inline constexpr const char* kDefaultOutput = "./profile_out";
inline constexpr const char* kDefaultLevels = "e2e,kernel";

// "e2e", "kernel", "verbose" or a comma list of them (spaces and case are
// ignored) -> level bits; verbose turns every level on.  InvalidArgument
// naming the bad part for an empty list or an unknown level.
Result<uint32_t> ParseLevels(const std::string& text);
// The bits as the flag spells them ("e2e,kernel", "verbose").
std::string LevelsName(uint32_t levels);

// Where session `index` (1-based, per process) writes its trace: an output
// that ends in ".json" is the file itself (each session replaces it); any
// other output is a directory holding trace.json for session 1 and
// trace-<index>.json for later ones.
std::string TracePath(const std::string& output, int index);

// What the three flags resolved to.
struct ProfileFlags {
  bool enabled = false;
  std::string output = kDefaultOutput;
  uint32_t levels = 0;
};

// --profile-output / --profile-level given without --profile is an error (as
// in the reference); the level list must parse.  `output_given` and
// `level_given` say whether the user set them.
Result<ProfileFlags> ResolveProfileFlags(bool profile, const std::string& output, bool output_given,
                                         const std::string& levels, bool level_given);

}  // namespace dsv4::profile
