#include "core/base64.h"

#include <array>
#include <cstdint>

#include "core/error.h"

namespace tachyon {
namespace {

constexpr const char* kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_decode(std::string_view input, std::string_view what) {
  std::string compact;
  if (input.find_first_of(" \t\r\n") != std::string_view::npos) {
    compact.reserve(input.size());
    for (char c : input)
      if (c != ' ' && c != '\t' && c != '\r' && c != '\n') compact += c;
    input = compact;
  }
  static const auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i)
      t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  size_t n = input.size();
  size_t pad = 0;
  while (n > 0 && input[n - 1] == '=' && pad < 2) --n, ++pad;
  if ((pad > 0 && (n + pad) % 4 != 0) || n % 4 == 1)
    raise<InvalidArgument>("{}: bad base64 (length {})", what, input.size());
  std::string out;
  out.reserve(n / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = table[static_cast<unsigned char>(input[i])];
    if (v < 0)
      raise<InvalidArgument>("{}: bad base64 (byte {:#04x} at offset {})", what,
                             static_cast<unsigned char>(input[i]), i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>(acc >> bits));
      acc &= (1u << bits) - 1;
    }
  }
  return out;
}

std::string base64_encode(std::string_view b) {
  std::string out;
  out.reserve((b.size() + 2) / 3 * 4);
  for (size_t i = 0; i < b.size(); i += 3) {
    uint32_t v = uint32_t{static_cast<uint8_t>(b[i])} << 16;
    if (i + 1 < b.size()) v |= uint32_t{static_cast<uint8_t>(b[i + 1])} << 8;
    if (i + 2 < b.size()) v |= static_cast<uint8_t>(b[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < b.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < b.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

}  // namespace tachyon
