// Small helpers for shaping responses: safe JSON text, UTF-8 repair, ids, clocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/json.h"

namespace tachyon::server {

// JSON text; invalid UTF-8 in strings is replaced (U+FFFD) instead of throwing.
std::string dump_json(const Json& j);
// Valid UTF-8: returned as is; otherwise each invalid byte becomes U+FFFD.
std::string repair_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s);
// A random lower-case hex string of n characters (request ids).
std::string random_hex(size_t n);
// Seconds since the Unix epoch.
int64_t unix_time();
// Monotonic milliseconds (for durations).
double monotonic_ms();

}  // namespace tachyon::server
