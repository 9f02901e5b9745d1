// Overflow-checked integer arithmetic for parsing untrusted sizes and offsets.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "core/error.h"

namespace tachyon {

template <typename T>
std::optional<T> checked_add(T a, T b) {
  T r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

template <typename T>
std::optional<T> checked_mul(T a, T b) {
  T r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// As above, but throws InvalidArgument naming `what` on overflow.
template <typename T>
T add_or_throw(T a, T b, std::string_view what) {
  auto r = checked_add(a, b);
  if (!r) raise<InvalidArgument>("{}: integer overflow in {} + {}", what, a, b);
  return *r;
}

template <typename T>
T mul_or_throw(T a, T b, std::string_view what) {
  auto r = checked_mul(a, b);
  if (!r) raise<InvalidArgument>("{}: integer overflow in {} * {}", what, a, b);
  return *r;
}

}  // namespace tachyon
