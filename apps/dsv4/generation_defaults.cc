#include "generation_defaults.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dsv4::cli {
namespace {

using Json = nlohmann::json;

Result<double> Number(const std::string& path, const std::string& key, const Json& v) {
  if (!v.is_number()) return InvalidArgument("{}: \"{}\" must be a number", path, key);
  const double x = v.get<double>();
  if (!std::isfinite(x)) return InvalidArgument("{}: \"{}\" must be finite", path, key);
  return x;
}

Status OutOfRange(const std::string& path, const std::string& key, const char* range, double x) {
  return InvalidArgument("{}: \"{}\" must be {}, got {}", path, key, range, x);
}

// One field of the file into *d; fields dsv4 does not take are skipped.
Status Take(const std::string& path, const std::string& key, const Json& v, GenerationDefaults* d) {
  engine::SamplingParams& s = d->sampling;
  if (key == "temperature") {
    DSV4_ASSIGN_OR_RETURN(double x, Number(path, key, v));
    if (x < 0) return OutOfRange(path, key, ">= 0", x);
    s.temperature = static_cast<float>(x);
  } else if (key == "top_p") {
    DSV4_ASSIGN_OR_RETURN(double x, Number(path, key, v));
    if (x <= 0 || x > 1) return OutOfRange(path, key, "in (0, 1]", x);
    s.top_p = static_cast<float>(x);
  } else if (key == "min_p") {
    DSV4_ASSIGN_OR_RETURN(double x, Number(path, key, v));
    if (x < 0 || x > 1) return OutOfRange(path, key, "in [0, 1]", x);
    s.min_p = static_cast<float>(x);
  } else if (key == "repetition_penalty") {
    DSV4_ASSIGN_OR_RETURN(double x, Number(path, key, v));
    if (x <= 0) return OutOfRange(path, key, "> 0", x);
    s.repetition_penalty = static_cast<float>(x);
  } else if (key == "top_k") {
    DSV4_ASSIGN_OR_RETURN(double x, Number(path, key, v));
    if (x != std::floor(x) || x < -1 || x > std::numeric_limits<int32_t>::max()) {
      return OutOfRange(path, key, "-1, 0 (off) or a positive integer", x);
    }
    s.top_k = x <= 0 ? 0 : static_cast<int32_t>(x);
  } else if (key == "max_new_tokens") {
    DSV4_ASSIGN_OR_RETURN(double x, Number(path, key, v));
    if (x != std::floor(x) || x < 1 || x > std::numeric_limits<int32_t>::max()) {
      return OutOfRange(path, key, "an integer >= 1", x);
    }
    d->max_new_tokens = static_cast<int64_t>(x);
  } else {
    return Status::Ok();
  }
  d->taken.push_back(fmt::format("{}={}", key, v.dump()));
  return Status::Ok();
}

}  // namespace

Result<GenerationDefaults> ParseGenerationDefaults(const std::string& json,
                                                   const std::string& path) {
  const Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgument("{}: not a JSON object", path);
  }
  GenerationDefaults d;
  d.path = path;
  for (const auto& [key, value] : doc.items()) {
    if (value.is_null()) continue;  // transformers writes unset fields as null
    DSV4_RETURN_IF_ERROR(Take(path, key, value, &d));
  }
  return d;
}

Result<GenerationDefaults> LoadGenerationDefaults(const std::string& flag,
                                                  const std::string& model_dir) {
  if (flag == "vllm") return GenerationDefaults{};
  const bool automatic = flag == "auto";
  const std::string dir = automatic ? model_dir : flag;
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (!automatic && !std::filesystem::is_directory(dir, ec)) {
    return NotFound("--generation-config: {} is not a directory (auto, vllm or a directory)", dir);
  }
  if (!std::filesystem::exists(path, ec)) {
    if (automatic) return GenerationDefaults{};
    return NotFound("--generation-config: {} does not exist", path);
  }
  std::ifstream f(path, std::ios::binary);
  std::ostringstream text;
  text << f.rdbuf();
  if (!f) return InvalidArgument("--generation-config: cannot read {}", path);
  return ParseGenerationDefaults(text.str(), path);
}

std::string DescribeGenerationDefaults(const GenerationDefaults& d, const std::string& flag) {
  if (d.path.empty()) {
    return fmt::format(
        "generation config ({}): {}; requests that do not set sampling get dsv4's defaults "
        "(greedy)",
        flag, flag == "vllm" ? "generation_config.json ignored" : "the model has none");
  }
  if (d.taken.empty()) {
    return fmt::format(
        "generation config ({}): {} sets no sampling field; dsv4's defaults (greedy)", flag,
        d.path);
  }
  return fmt::format(
      "generation config ({}): defaults from {}: {} (a request's own values win; "
      "--generation-config vllm ignores the file)",
      flag, d.path, fmt::join(d.taken, ", "));
}

}  // namespace dsv4::cli
