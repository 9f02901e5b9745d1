#include "core/error.h"

namespace tachyon {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

namespace detail {
void check_failed(const char* file, int line, const char* expr, const std::string& detail) {
  std::string msg = fmt::format("check failed at {}:{}: {}", file, line, expr);
  if (!detail.empty()) msg += fmt::format(" ({})", detail);
  throw Internal(msg);
}
}  // namespace detail

}  // namespace tachyon
