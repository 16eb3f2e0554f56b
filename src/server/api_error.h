// Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace dsv4::server {

using Json = nlohmann::ordered_json;

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty -> null
  std::string code;   // empty -> null

  Json ToJson() const;
};

ApiError BadRequest(std::string message, std::string param = "");
// Maps an engine/text Status onto an HTTP error (InvalidArgument -> 400,
// ResourceExhausted -> 429, Unavailable -> 503, else 500).
ApiError FromStatus(const Status& status);

}  // namespace dsv4::server
