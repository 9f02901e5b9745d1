#include "server/api_error.h"

#include "core/error.h"

namespace tachyon::server {

const char* native_error_name(NativeErrorCode c) {
  switch (c) {
    case NativeErrorCode::kConcurrencyLimit:
      return "CONCURRENCY_LIMIT_ERROR";
    case NativeErrorCode::kTrafficLimit:
      return "TRAFFIC_LIMIT_ERROR";
    case NativeErrorCode::kCancelled:
      return "CANCELLED_ERROR";
    case NativeErrorCode::kInputFormat:
      return "ERROR_INPUT_FORMAT_ERROR";
    case NativeErrorCode::kNoPrompt:
      return "NO_PROMPT_ERROR";
    case NativeErrorCode::kEmptyPrompt:
      return "EMPTY_PROMPT_ERROR";
    case NativeErrorCode::kLongPrompt:
      return "LONG_PROMPT_ERROR";
    case NativeErrorCode::kUnknown:
      return "UNKNOWN_ERROR";
    case NativeErrorCode::kUnsupported:
      return "UNSUPPORTED_OPERATION";
    case NativeErrorCode::kUpdateError:
      return "UPDATE_ERROR";
    case NativeErrorCode::kGenerateTimeout:
      return "GENERATE_TIMEOUT";
    case NativeErrorCode::kGenerateConfigFormat:
      return "ERROR_GENERATE_CONFIG_FORMAT";
    case NativeErrorCode::kInvalidParams:
      return "INVALID_PARAMS";
  }
  return "UNKNOWN_ERROR";
}

Json ApiError::openai_json() const {
  Json err = Json::object();
  err["message"] = message_;
  err["type"] = type_;
  err["param"] = param_.empty() ? Json(nullptr) : Json(param_);
  err["code"] = code_.empty() ? Json(nullptr) : Json(code_);
  return Json{{"error", err}};
}

Json ApiError::native_json() const {
  int code = static_cast<int>(native_);
  return Json{{"error_code", code},
              {"error_code_str", std::to_string(code) + "_" + native_error_name(native_)},
              {"message", message_}};
}

ApiError ApiError::bad_request(std::string message, std::string param) {
  return ApiError(400, "invalid_request_error", std::move(message), std::move(param), {},
                  NativeErrorCode::kInputFormat);
}

ApiError ApiError::unknown_field(const std::string& field) {
  return ApiError(400, "invalid_request_error", "Unrecognized request argument supplied: " + field,
                  field, "unknown_parameter", NativeErrorCode::kInputFormat);
}

ApiError ApiError::unsupported(std::string message, std::string param) {
  return ApiError(400, "invalid_request_error", std::move(message), std::move(param),
                  "unsupported_parameter", NativeErrorCode::kUnsupported);
}

ApiError ApiError::context_length(std::string message, std::string param) {
  return ApiError(400, "invalid_request_error", std::move(message), std::move(param),
                  "context_length_exceeded", NativeErrorCode::kLongPrompt);
}

ApiError ApiError::unauthorized() {
  return ApiError(401, "invalid_request_error", "Incorrect or missing API key.", {},
                  "invalid_api_key", NativeErrorCode::kInputFormat);
}

ApiError ApiError::not_found(std::string message, std::string code) {
  return ApiError(404, "invalid_request_error", std::move(message), {}, std::move(code),
                  NativeErrorCode::kInputFormat);
}

ApiError ApiError::method_not_allowed(const std::string& method, const std::string& path) {
  return ApiError(405, "invalid_request_error", "Method " + method + " not allowed on " + path, {},
                  "method_not_allowed", NativeErrorCode::kUnsupported);
}

ApiError ApiError::too_many_requests(std::string message) {
  return ApiError(429, "rate_limit_error", std::move(message), {}, "rate_limit_exceeded",
                  NativeErrorCode::kConcurrencyLimit);
}

ApiError ApiError::unavailable(std::string message) {
  return ApiError(503, "service_unavailable_error", std::move(message), {}, "service_unavailable",
                  NativeErrorCode::kUnknown);
}

ApiError ApiError::timeout(std::string message) {
  return ApiError(408, "timeout_error", std::move(message), {}, "timeout",
                  NativeErrorCode::kGenerateTimeout);
}

ApiError ApiError::internal(std::string message) {
  return ApiError(500, "server_error", std::move(message), {}, {}, NativeErrorCode::kUnknown);
}

ApiError ApiError::from_exception(const std::exception& e) {
  if (const auto* api = dynamic_cast<const ApiError*>(&e)) return *api;
  if (const auto* err = dynamic_cast<const Error*>(&e)) {
    switch (err->code()) {
      case ErrorCode::kInvalidArgument:
        return bad_request(err->what());
      case ErrorCode::kNotFound:
        return not_found(err->what());
      case ErrorCode::kResourceExhausted:
        return too_many_requests(err->what());
      case ErrorCode::kUnavailable:
        return unavailable(err->what());
      case ErrorCode::kCancelled:
        return ApiError(499, "cancelled", err->what(), {}, "cancelled",
                        NativeErrorCode::kCancelled);
      case ErrorCode::kDeadlineExceeded:
        return timeout(err->what());
      case ErrorCode::kInternal:
        return internal(err->what());
    }
  }
  return internal(std::string("internal error: ") + e.what());
}

ApiError ApiError::from_current_exception() {
  try {
    throw;
  } catch (const std::exception& e) {
    return from_exception(e);
  } catch (...) {
    return internal("internal error");
  }
}

}  // namespace tachyon::server
