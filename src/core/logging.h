// Leveled logging to stderr. The level comes from TACHYON_LOG_LEVEL
// (debug, info, warning, error; default info) or set_log_level().
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace tachyon {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
// Parses "debug"/"info"/"warning"/"error"/"off"; throws InvalidArgument otherwise.
LogLevel parse_log_level(std::string_view name);
void log_message(LogLevel level, std::string_view message);

template <typename... Args>
void log_at(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_message(level, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::kDebug, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::kInfo, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_warning(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::kWarning, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::kError, f, std::forward<Args>(args)...);
}

}  // namespace tachyon
