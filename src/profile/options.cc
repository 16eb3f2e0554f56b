#include "profile/options.h"

#include <algorithm>
#include <cctype>

#include "profile/profile.h"

namespace dsv4::profile {

Result<uint32_t> ParseLevels(const std::string& text) {
  uint32_t bits = 0;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string part;
    for (size_t i = begin; i < end; ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (!std::isspace(c)) part.push_back(static_cast<char>(std::tolower(c)));
    }
    if (part == "e2e") {
      bits |= kE2e;
    } else if (part == "kernel") {
      bits |= kKernel;
    } else if (part == "verbose") {
      bits |= kE2e | kKernel | kVerbose;
    } else if (!part.empty() || end < text.size() || bits == 0) {
      return InvalidArgument(
          "--profile-level '{}': unknown level '{}' (e2e, kernel, verbose or a "
          "comma list of them)",
          text, part);
    }
    begin = end + 1;
  }
  return bits;
}

std::string LevelsName(uint32_t levels) {
  if ((levels & kVerbose) != 0) return "verbose";
  std::string s;
  if ((levels & kE2e) != 0) s = "e2e";
  if ((levels & kKernel) != 0) s += s.empty() ? "kernel" : ",kernel";
  return s.empty() ? "off" : s;
}

std::string TracePath(const std::string& output, int index) {
  const bool file = output.size() >= 5 && output.compare(output.size() - 5, 5, ".json") == 0;
  if (file) return output;
  std::string dir = output.empty() ? std::string(".") : output;
  if (dir.back() != '/') dir.push_back('/');
  return index <= 1 ? dir + "trace.json" : dir + "trace-" + std::to_string(index) + ".json";
}

Result<ProfileFlags> ResolveProfileFlags(bool profile, const std::string& output, bool output_given,
                                         const std::string& levels, bool level_given) {
  if (!profile && output_given) return InvalidArgument("--profile-output requires --profile");
  if (!profile && level_given) return InvalidArgument("--profile-level requires --profile");
  ProfileFlags f;
  f.enabled = profile;
  if (output_given && output.empty()) return InvalidArgument("--profile-output is empty");
  f.output = output_given ? output : std::string(kDefaultOutput);
  DSV4_ASSIGN_OR_RETURN(f.levels, ParseLevels(level_given ? levels : std::string(kDefaultLevels)));
  return f;
}

}  // namespace dsv4::profile
