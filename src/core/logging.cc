#include "core/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

#include "core/error.h"
#include "core/settings.h"

namespace tachyon {
namespace {

LogLevel initial_level() {
  const std::optional<std::string> env = setting_env("log-level");
  if (!env) return LogLevel::kInfo;
  try {
    return parse_log_level(*env);
  } catch (const Error&) {
    return LogLevel::kInfo;
  }
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{initial_level()};
  return level;
}

}  // namespace

LogLevel log_level() {
  return level_ref().load(std::memory_order_relaxed);
}
void set_log_level(LogLevel level) {
  level_ref().store(level, std::memory_order_relaxed);
}

LogLevel parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  raise<InvalidArgument>("unknown log level '{}' (debug, info, warning, error, off)", name);
}

void log_message(LogLevel level, std::string_view message) {
  static std::mutex mu;
  static const char* kNames[] = {"D", "I", "W", "E", "?"};
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%s %s.%03d %.*s\n", kNames[static_cast<int>(level)], stamp,
               static_cast<int>(ms.count()), static_cast<int>(message.size()), message.data());
}

}  // namespace tachyon
