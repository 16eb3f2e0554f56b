#include "server/api_error.h"

namespace dsv4::server {

Json ApiError::ToJson() const {
  Json err = Json::object();
  err["message"] = message;
  err["type"] = type;
  err["param"] = param.empty() ? Json(nullptr) : Json(param);
  err["code"] = code.empty() ? Json(nullptr) : Json(code);
  return Json{{"error", std::move(err)}};
}

ApiError BadRequest(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError FromStatus(const Status& status) {
  ApiError e;
  e.message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      break;
    case StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "service_unavailable";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

}  // namespace dsv4::server
