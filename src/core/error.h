// Typed errors. Every failure the project reports is one of these; the server maps
// the code to an HTTP status (400/404/429/503/500) and the CLI to a message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace tachyon {

enum class ErrorCode {
  kInvalidArgument,    // bad input: malformed file, request, config (HTTP 400)
  kNotFound,           // missing file, tensor, model, route (HTTP 404)
  kResourceExhausted,  // over a limit: queue full, KV cache too small (HTTP 429)
  kUnavailable,        // not ready or shutting down (HTTP 503)
  kCancelled,          // the caller gave up (client disconnect, cancel)
  kDeadlineExceeded,   // a timeout expired
  kInternal,           // a bug or a device fault (HTTP 500)
};

std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

#define TACHYON_DEFINE_ERROR(Name)                                                    \
  class Name : public Error {                                                         \
   public:                                                                            \
    explicit Name(const std::string& message) : Error(ErrorCode::k##Name, message) {} \
  };
TACHYON_DEFINE_ERROR(InvalidArgument)
TACHYON_DEFINE_ERROR(NotFound)
TACHYON_DEFINE_ERROR(ResourceExhausted)
TACHYON_DEFINE_ERROR(Unavailable)
TACHYON_DEFINE_ERROR(Cancelled)
TACHYON_DEFINE_ERROR(DeadlineExceeded)
TACHYON_DEFINE_ERROR(Internal)
#undef TACHYON_DEFINE_ERROR

// Throws the error type E with a fmt-formatted message.
template <typename E, typename... Args>
[[noreturn]] void raise(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr,
                               const std::string& detail);
}  // namespace detail

}  // namespace tachyon

// Internal invariants (never for untrusted input: validate that and throw
// InvalidArgument). A failure throws Internal naming the place and the operands.
#define TACHYON_CHECK(cond, ...)                                                                 \
  do {                                                                                           \
    if (!(cond)) [[unlikely]]                                                                    \
      ::tachyon::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)

#define TACHYON_CHECK_OP(a, op, b)                                                        \
  do {                                                                                    \
    const auto& tachyon_a_ = (a);                                                         \
    const auto& tachyon_b_ = (b);                                                         \
    if (!(tachyon_a_ op tachyon_b_)) [[unlikely]]                                         \
      ::tachyon::detail::check_failed(__FILE__, __LINE__, #a " " #op " " #b,              \
                                      ::fmt::format("{} vs {}", tachyon_a_, tachyon_b_)); \
  } while (0)

#define TACHYON_CHECK_EQ(a, b) TACHYON_CHECK_OP(a, ==, b)
#define TACHYON_CHECK_NE(a, b) TACHYON_CHECK_OP(a, !=, b)
#define TACHYON_CHECK_LT(a, b) TACHYON_CHECK_OP(a, <, b)
#define TACHYON_CHECK_LE(a, b) TACHYON_CHECK_OP(a, <=, b)
#define TACHYON_CHECK_GT(a, b) TACHYON_CHECK_OP(a, >, b)
#define TACHYON_CHECK_GE(a, b) TACHYON_CHECK_OP(a, >=, b)
