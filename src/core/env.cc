#include "core/env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tachyon {

bool env_flag(const char* name, bool fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || env[0] == '\0') return fallback;
  const std::string v = env;
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  throw InvalidArgument(fmt::format("{}: '{}' is not 0 or 1", name, v));
}

long env_int(const char* name, long fallback, long lo, long hi) {
  const char* env = std::getenv(name);
  if (env == nullptr || env[0] == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env, &end, 10);
  const bool starts_ok = (env[0] >= '0' && env[0] <= '9') || env[0] == '-';  // no blanks
  if (!starts_ok || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw InvalidArgument(fmt::format("{}: '{}' is not an integer in [{}, {}]", name, env, lo, hi));
  return v;
}

}  // namespace tachyon
