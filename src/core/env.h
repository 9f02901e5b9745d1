// Settings from the environment, parsed strictly: a value that is set but malformed
// throws InvalidArgument naming the variable instead of being ignored.
#pragma once

namespace tachyon {

// A switch: unset or empty gives fallback; 1/true and 0/false.
bool env_flag(const char* name, bool fallback);
// An integer: unset or empty gives fallback; a decimal integer in [lo, hi].
long env_int(const char* name, long fallback, long lo, long hi);

}  // namespace tachyon
