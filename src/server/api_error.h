// Errors as the HTTP APIs report them: an HTTP status plus OpenAI's error object
// ({"error": {"message", "type", "param", "code"}}) and RTP-LLM's error codes
// ({"error_code", "error_code_str", "message"}).
#pragma once

#include <exception>
#include <string>

#include "core/json.h"

namespace tachyon::server {

// RTP-LLM's error codes (its ExceptionType values).
enum class NativeErrorCode : int {
  kConcurrencyLimit = 409,
  kTrafficLimit = 429,
  kCancelled = 499,
  kInputFormat = 507,
  kNoPrompt = 509,
  kEmptyPrompt = 510,
  kLongPrompt = 511,
  kUnknown = 514,
  kUnsupported = 515,
  kUpdateError = 601,
  kGenerateTimeout = 603,
  kGenerateConfigFormat = 604,
  kInvalidParams = 605,
};
const char* native_error_name(NativeErrorCode c);

class ApiError : public std::exception {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = {},
           std::string code = {}, NativeErrorCode native = NativeErrorCode::kUnknown)
      : status_(status),
        type_(std::move(type)),
        message_(std::move(message)),
        param_(std::move(param)),
        code_(std::move(code)),
        native_(native) {}

  const char* what() const noexcept override { return message_.c_str(); }
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  NativeErrorCode native_code() const { return native_; }

  // {"error": {"message", "type", "param", "code"}}; empty param/code become null.
  Json openai_json() const;
  // {"error_code", "error_code_str", "message"}.
  Json native_json() const;

  static ApiError bad_request(std::string message, std::string param = {});
  static ApiError unknown_field(const std::string& field);
  static ApiError unsupported(std::string message, std::string param = {});
  // param: the field that holds the prompt ("messages" for chat, "prompt" otherwise).
  static ApiError context_length(std::string message, std::string param);
  static ApiError unauthorized();
  static ApiError not_found(std::string message, std::string code = "not_found");
  static ApiError method_not_allowed(const std::string& method, const std::string& path);
  static ApiError too_many_requests(std::string message);
  static ApiError unavailable(std::string message);
  static ApiError timeout(std::string message);
  static ApiError internal(std::string message);

  // Maps any exception: ApiError as is; tachyon::Error by its code (invalid argument
  // 400, not found 404, resource exhausted 429, unavailable 503, cancelled 499,
  // deadline 408, internal 500); anything else 500.
  static ApiError from_exception(const std::exception& e);
  static ApiError from_current_exception();

 private:
  int status_;
  std::string type_;
  std::string message_;
  std::string param_;
  std::string code_;
  NativeErrorCode native_;
};

}  // namespace tachyon::server
