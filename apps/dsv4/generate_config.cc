#include "generate_config.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

namespace dsv4::cli {

namespace {

using Json = nlohmann::json;

// JSON type names as a user writes them, for messages.
const char* TypeName(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "an object";
}

Status WrongType(std::string_view field, const char* want, const Json& v) {
  return InvalidArgument("\"{}\" must be {}, got {}", field, want, TypeName(v));
}

Result<Json> ParseObject(std::string_view json) {
  Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    // Second parse only to word the error (the position of the fault).
    try {
      const Json unused = Json::parse(json);
    } catch (const Json::parse_error& e) {
      return InvalidArgument("invalid JSON: {}", e.what());
    }
    return InvalidArgument("invalid JSON");
  }
  if (!doc.is_object()) return InvalidArgument("must be a JSON object, got {}", TypeName(doc));
  return doc;
}

Result<double> Number(std::string_view field, const Json& v) {
  if (!v.is_number()) return WrongType(field, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x)) return InvalidArgument("\"{}\" must be finite", field);
  return x;
}

Result<int64_t> Integer(std::string_view field, const Json& v) {
  if (!v.is_number_integer()) return WrongType(field, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("\"{}\" is too large", field);
  }
  return v.get<int64_t>();
}

Status InRange(std::string_view field, double x, double lo, double hi, bool lo_open = false) {
  if ((lo_open ? x <= lo : x < lo) || x > hi) {
    return InvalidArgument("\"{}\" must be in {}{}, {}], got {}", field, lo_open ? "(" : "[", lo,
                           hi, x);
  }
  return Status::Ok();
}

Status SetFloat(std::string_view field, const Json& v, float* out, double lo, double hi,
                bool lo_open = false) {
  DSV4_ASSIGN_OR_RETURN(double x, Number(field, v));
  DSV4_RETURN_IF_ERROR(InRange(field, x, lo, hi, lo_open));
  *out = static_cast<float>(x);
  return Status::Ok();
}

Status SetBool(std::string_view field, const Json& v, bool* out) {
  if (!v.is_boolean()) return WrongType(field, "true or false", v);
  *out = v.get<bool>();
  return Status::Ok();
}

Status SetStop(const Json& v, std::vector<std::string>* out) {
  out->clear();
  if (v.is_null()) return Status::Ok();
  if (!v.is_array()) return WrongType("stop", "a list of strings", v);
  for (const Json& s : v) {
    if (!s.is_string()) return WrongType("stop", "a list of strings", s);
    if (s.get_ref<const std::string&>().empty()) {
      return InvalidArgument("\"stop\" strings must not be empty");
    }
    out->push_back(s.get<std::string>());
  }
  return Status::Ok();
}

Status SetStopTokenIds(const Json& v, std::vector<int32_t>* out) {
  out->clear();
  if (v.is_null()) return Status::Ok();
  if (!v.is_array()) return WrongType("stop_token_ids", "a list of token ids", v);
  for (const Json& id : v) {
    DSV4_ASSIGN_OR_RETURN(int64_t x, Integer("stop_token_ids", id));
    if (x < 0 || x > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument("\"stop_token_ids\" must hold token ids >= 0, got {}", x);
    }
    out->push_back(static_cast<int32_t>(x));
  }
  return Status::Ok();
}

Status SetTopK(const Json& v, int32_t* out) {
  *out = 0;
  if (v.is_null()) return Status::Ok();
  DSV4_ASSIGN_OR_RETURN(int64_t k, Integer("top_k", v));
  if (k < -1 || k > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument("\"top_k\" must be -1, 0 (off) or a positive integer, got {}", k);
  }
  *out = k < 0 ? 0 : static_cast<int32_t>(k);
  return Status::Ok();
}

Status SetSeed(const Json& v, std::optional<uint64_t>* out) {
  out->reset();
  if (v.is_null()) return Status::Ok();
  if (!v.is_number_integer()) return WrongType("seed", "an integer or null", v);
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return Status::Ok();
  }
  const int64_t s = v.get<int64_t>();
  if (s < 0) return InvalidArgument("\"seed\" must be >= 0, got {}", s);
  *out = static_cast<uint64_t>(s);
  return Status::Ok();
}

Status SetLogprobs(const Json& v, int32_t* out) {
  *out = -1;
  if (v.is_null()) return Status::Ok();
  DSV4_ASSIGN_OR_RETURN(int64_t n, Integer("logprobs", v));
  DSV4_RETURN_IF_ERROR(InRange("logprobs", static_cast<double>(n), 0, 20));
  *out = static_cast<int32_t>(n);
  return Status::Ok();
}

using FieldSetter = std::function<Status(const Json&, GenerateConfig&)>;

const std::map<std::string, FieldSetter>& GenerateFields() {
  static const auto* fields = new std::map<std::string, FieldSetter>{
      {"max_new_tokens",
       [](const Json& v, GenerateConfig& c) -> Status {
         DSV4_ASSIGN_OR_RETURN(int64_t n, Integer("max_new_tokens", v));
         if (n < 1) return InvalidArgument("\"max_new_tokens\" must be >= 1, got {}", n);
         c.max_new_tokens = n;
         return Status::Ok();
       }},
      {"temperature",
       [](const Json& v, GenerateConfig& c) {
         return SetFloat("temperature", v, &c.sampling.temperature, 0,
                         std::numeric_limits<float>::max());
       }},
      {"top_p",
       [](const Json& v, GenerateConfig& c) {
         return SetFloat("top_p", v, &c.sampling.top_p, 0, 1, /*lo_open=*/true);
       }},
      {"top_k", [](const Json& v, GenerateConfig& c) { return SetTopK(v, &c.sampling.top_k); }},
      {"min_p", [](const Json& v,
                   GenerateConfig& c) { return SetFloat("min_p", v, &c.sampling.min_p, 0, 1); }},
      {"seed", [](const Json& v, GenerateConfig& c) { return SetSeed(v, &c.sampling.seed); }},
      {"stop", [](const Json& v, GenerateConfig& c) { return SetStop(v, &c.stop); }},
      {"stop_token_ids",
       [](const Json& v, GenerateConfig& c) { return SetStopTokenIds(v, &c.stop_token_ids); }},
      {"presence_penalty",
       [](const Json& v, GenerateConfig& c) {
         return SetFloat("presence_penalty", v, &c.sampling.presence_penalty, -2, 2);
       }},
      {"frequency_penalty",
       [](const Json& v, GenerateConfig& c) {
         return SetFloat("frequency_penalty", v, &c.sampling.frequency_penalty, -2, 2);
       }},
      {"repetition_penalty",
       [](const Json& v, GenerateConfig& c) {
         return SetFloat("repetition_penalty", v, &c.sampling.repetition_penalty, 0,
                         std::numeric_limits<float>::max(), /*lo_open=*/true);
       }},
      {"logprobs",
       [](const Json& v, GenerateConfig& c) { return SetLogprobs(v, &c.sampling.logprobs); }},
      {"stream", [](const Json& v, GenerateConfig& c) { return SetBool("stream", v, &c.stream); }},
      {"ignore_eos",
       [](const Json& v, GenerateConfig& c) {
         return SetBool("ignore_eos", v, &c.sampling.ignore_eos);
       }},
      {"min_tokens",
       [](const Json& v, GenerateConfig& c) -> Status {
         DSV4_ASSIGN_OR_RETURN(int64_t n, Integer("min_tokens", v));
         if (n < 0 || n > std::numeric_limits<int32_t>::max()) {
           return InvalidArgument("\"min_tokens\" must be >= 0, got {}", n);
         }
         c.sampling.min_tokens = static_cast<int32_t>(n);
         return Status::Ok();
       }},
      {"include_stop_str_in_output",
       [](const Json& v, GenerateConfig& c) {
         return SetBool("include_stop_str_in_output", v, &c.include_stop_str_in_output);
       }},
      {"thinking",
       [](const Json& v, GenerateConfig& c) { return SetBool("thinking", v, &c.thinking); }},
      {"reasoning_effort",
       [](const Json& v, GenerateConfig& c) -> Status {
         c.reasoning_effort.reset();
         if (v.is_null()) return Status::Ok();
         if (!v.is_string()) return WrongType("reasoning_effort", "a string or null", v);
         c.reasoning_effort = v.get<std::string>();
         return Status::Ok();
       }},
  };
  return *fields;
}

}  // namespace

namespace {

// min_tokens cannot exceed max_new_tokens, whichever layer set either.
Status CheckMinTokens(const GenerateConfig& config) {
  if (config.sampling.min_tokens > config.max_new_tokens) {
    return InvalidArgument("\"min_tokens\" ({}) must not exceed \"max_new_tokens\" ({})",
                           config.sampling.min_tokens, config.max_new_tokens);
  }
  return Status::Ok();
}

}  // namespace

Result<GenerateConfig> ParseGenerateConfig(std::string_view json, GenerateConfig base) {
  DSV4_ASSIGN_OR_RETURN(Json doc, ParseObject(json));
  GenerateConfig config = std::move(base);
  const auto& fields = GenerateFields();
  for (const auto& [key, value] : doc.items()) {
    auto it = fields.find(key);
    if (it == fields.end()) return InvalidArgument("unknown field \"{}\"", key);
    DSV4_RETURN_IF_ERROR(it->second(value, config));
  }
  DSV4_RETURN_IF_ERROR(CheckMinTokens(config));
  return config;
}

Status ApplySamplingFlags(const SamplingFlags& f, GenerateConfig* config) {
  // (flag, field, value): each goes through the JSON field's own setter, so
  // a flag and its field accept exactly the same values.
  std::vector<std::tuple<const char*, const char*, Json>> given;
  const auto add = [&](const char* flag, const char* field, const auto& value) {
    if (value) given.emplace_back(flag, field, Json(*value));
  };
  add("--temperature", "temperature", f.temperature);
  add("--top-p", "top_p", f.top_p);
  add("--top-k", "top_k", f.top_k);
  add("--min-p", "min_p", f.min_p);
  add("--presence-penalty", "presence_penalty", f.presence_penalty);
  add("--frequency-penalty", "frequency_penalty", f.frequency_penalty);
  add("--repetition-penalty", "repetition_penalty", f.repetition_penalty);
  add("--seed", "seed", f.seed);
  add("--max-tokens", "max_new_tokens", f.max_tokens);
  add("--min-tokens", "min_tokens", f.min_tokens);
  add("--logprobs", "logprobs", f.logprobs);
  if (!f.stop.empty()) given.emplace_back("--stop", "stop", Json(f.stop));
  if (!f.stop_token_ids.empty()) {
    given.emplace_back("--stop-token-ids", "stop_token_ids", Json(f.stop_token_ids));
  }
  if (f.ignore_eos) given.emplace_back("--ignore-eos", "ignore_eos", Json(true));
  if (f.include_stop_str_in_output) {
    given.emplace_back("--include-stop-str-in-output", "include_stop_str_in_output", Json(true));
  }
  const auto& fields = GenerateFields();
  for (const auto& [flag, field, value] : given) {
    DSV4_RETURN_IF_ERROR(fields.at(field)(value, *config).WithPrefix(flag));
  }
  return CheckMinTokens(*config);
}

Result<int32_t> ParseSpeculativeConfig(std::string_view json) {
  DSV4_ASSIGN_OR_RETURN(Json doc, ParseObject(json));
  std::optional<int64_t> k;
  bool have_method = false;
  for (const auto& [key, v] : doc.items()) {
    if (key == "method") {
      if (!v.is_string()) return WrongType("method", "a string", v);
      // "deepseek_mtp" is vLLM's name for the same method.
      const std::string& method = v.get_ref<const std::string&>();
      if (method != "mtp" && method != "deepseek_mtp") {
        return InvalidArgument(
            "\"method\" must be \"mtp\" (or vLLM's \"deepseek_mtp\"), got \"{}\"", method);
      }
      have_method = true;
    } else if (key == "num_speculative_tokens") {
      DSV4_ASSIGN_OR_RETURN(int64_t n, Integer(key, v));
      if (n < 1 || n > 64) {
        return InvalidArgument("\"num_speculative_tokens\" must be in [1, 64], got {}", n);
      }
      k = n;
    } else {
      return InvalidArgument("unknown field \"{}\"", key);
    }
  }
  if (!have_method) return InvalidArgument("\"method\" is required (\"mtp\")");
  if (!k) return InvalidArgument("\"num_speculative_tokens\" is required");
  return static_cast<int32_t>(*k);
}

}  // namespace dsv4::cli
