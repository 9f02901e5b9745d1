// UTF-8 helpers: decoding with the replacement policy of Python's and Rust's lossy
// decoders (each maximal invalid subpart becomes one U+FFFD), encoding, and
// character-boundary queries used by the tokenizer and the streaming detokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tachyon::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Decodes the code point starting at s[i]. On success returns it and sets `len` to its
// length in bytes. On invalid input returns kReplacement and sets `len` to the length of
// the maximal subpart (at least 1): the bytes a lossy decoder replaces by one U+FFFD.
char32_t decode(std::string_view s, size_t i, size_t& len);

// Like decode() for text known to be valid UTF-8 (no checks).
inline char32_t decode_valid(const char* p, size_t& len) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] < 0x80) {
    len = 1;
    return u[0];
  }
  if (u[0] < 0xE0) {
    len = 2;
    return (char32_t(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
  }
  if (u[0] < 0xF0) {
    len = 3;
    return (char32_t(u[0] & 0x0F) << 12) | (char32_t(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
  }
  len = 4;
  return (char32_t(u[0] & 0x07) << 18) | (char32_t(u[1] & 0x3F) << 12) |
         (char32_t(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

// Length in bytes of the valid character starting with lead byte `c` (1 for a stray byte).
inline size_t char_len(unsigned char c) {
  if (c < 0xC0) return 1;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  return 4;
}

// Appends the UTF-8 encoding of `cp` (a scalar value; surrogates and values above
// U+10FFFF are written as U+FFFD).
void append(std::string& out, char32_t cp);
inline std::string encode(char32_t cp) {
  std::string s;
  append(s, cp);
  return s;
}

bool is_valid(std::string_view s);

// Returns `s` with every maximal invalid subpart replaced by U+FFFD (the result of
// Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy).
std::string sanitize(std::string_view s);

// Number of trailing bytes of `s` that form an incomplete, but so far valid, UTF-8
// sequence (0 when `s` ends on a character boundary or with invalid bytes).
size_t incomplete_suffix_len(std::string_view s);

// Number of code points (invalid bytes count as the replacement characters they become).
size_t count_chars(std::string_view s);

}  // namespace tachyon::utf8
