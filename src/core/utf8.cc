#include "core/utf8.h"

namespace tachyon::utf8 {

char32_t decode(std::string_view s, size_t i, size_t& len) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  unsigned char c = u[i];
  if (c < 0x80) {
    len = 1;
    return c;
  }
  // Lead byte: number of continuation bytes and the valid range of the first one
  // (Unicode Table 3-7: excludes overlongs, surrogates and values above U+10FFFF).
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    len = 1;
    return kReplacement;
  }
  size_t j = i + 1;
  for (int k = 0; k < need; ++k, ++j) {
    if (j >= n) {
      len = j - i;
      return kReplacement;
    }
    unsigned char b = u[j];
    if (b < lo || b > hi) {
      len = j - i;
      return kReplacement;
    }
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  len = j - i;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacement;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
// Index of the first byte that is not part of a valid sequence, or s.size().
size_t first_invalid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    if (decode(s, i, len) == kReplacement) {
      // U+FFFD itself is valid input.
      if (!(len == 3 && s.compare(i, 3, kReplacementUtf8) == 0)) return i;
    }
    i += len;
  }
  return n;
}
}  // namespace

bool is_valid(std::string_view s) {
  return first_invalid(s) == s.size();
}

std::string sanitize(std::string_view s) {
  size_t bad = first_invalid(s);
  if (bad == s.size()) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  out.append(s.substr(0, bad));
  size_t i = bad;
  while (i < s.size()) {
    size_t len;
    char32_t cp = decode(s, i, len);
    if (cp == kReplacement) {
      out.append(kReplacementUtf8);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

size_t incomplete_suffix_len(std::string_view s) {
  const size_t n = s.size();
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    if (c < 0xC2 || c > 0xF4) return 0;
    size_t need = char_len(c);
    if (need <= back) return 0;
    size_t len;
    decode(s, n - back, len);
    // A truncated-but-valid prefix consumes every remaining byte.
    return len == back ? back : 0;
  }
  return 0;
}

size_t count_chars(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    decode(s, i, len);
    i += len;
    ++count;
  }
  return count;
}

}  // namespace tachyon::utf8
