#include "tokenizer/precompiled.h"

#include <utf8proc.h>

#include <array>
#include <cstring>

#include "core/base64.h"
#include "core/error.h"
#include "core/utf8.h"

namespace tachyon::tok {

PrecompiledCharsmap::PrecompiledCharsmap(std::string blob, const std::string& what) {
  if (blob.size() < 4) raise<InvalidArgument>("{}: charsmap shorter than its header", what);
  uint32_t trie_size;
  std::memcpy(&trie_size, blob.data(), 4);
  if (trie_size % 4 != 0 || trie_size > blob.size() - 4) {
    raise<InvalidArgument>("{}: trie size {} does not fit the {}-byte charsmap", what, trie_size,
                           blob.size());
  }
  units_.resize(trie_size / 4);
  std::memcpy(units_.data(), blob.data() + 4, trie_size);
  normalized_ = blob.substr(4 + trie_size);
  if (units_.empty()) raise<InvalidArgument>("{}: empty trie", what);
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  // darts-clone unit layout: label in bits 0-7 (+bit 31), has_leaf bit 8, offset above.
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  auto label = [](uint32_t u) { return u & ((1u << 31) | 0xFFu); };
  auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1u) == 1u; };
  auto value = [](uint32_t u) { return u & ((1u << 31) - 1); };
  size_t node = 0;
  uint32_t unit = units_[0];
  node ^= offset(unit);
  for (unsigned char c : chunk) {
    if (c == 0) break;
    node ^= c;
    if (node >= units_.size()) return std::nullopt;
    unit = units_[node];
    if (label(unit) != c) return std::nullopt;
    node ^= offset(unit);
    if (node >= units_.size()) return std::nullopt;
    if (has_leaf(unit)) {
      size_t index = value(units_[node]);
      if (index >= normalized_.size()) return std::nullopt;
      size_t end = normalized_.find('\0', index);
      if (end == std::string::npos) end = normalized_.size();
      return std::string_view(normalized_).substr(index, end - index);
    }
  }
  return std::nullopt;
}

void PrecompiledCharsmap::apply(std::string& s) const {
  std::string out;
  out.reserve(s.size());
  bool modified = false;
  // Walk extended grapheme clusters.
  size_t start = 0;
  utf8proc_int32_t state = 0;
  size_t i = 0;
  char32_t prev = 0;
  bool have_prev = false;
  auto flush = [&](size_t b, size_t e) {
    std::string_view g(s.data() + b, e - b);
    if (g.size() < 6) {
      if (auto r = transform(g)) {
        out.append(*r);
        modified = true;
        return;
      }
    }
    for (size_t k = 0; k < g.size();) {
      size_t len = utf8::char_len(static_cast<unsigned char>(g[k]));
      std::string_view part = g.substr(k, len);
      if (auto r = transform(part)) {
        out.append(*r);
        modified = true;
      } else {
        out.append(part);
      }
      k += len;
    }
  };
  while (i < s.size()) {
    size_t len;
    char32_t c = utf8::decode_valid(s.data() + i, len);
    if (have_prev && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                      static_cast<utf8proc_int32_t>(c), &state)) {
      flush(start, i);
      start = i;
    }
    prev = c;
    have_prev = true;
    i += len;
  }
  if (start < s.size()) flush(start, s.size());
  if (modified) s.swap(out);
}

namespace {
class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsmap m) : map_(std::move(m)) {}
  void normalize(std::string& s) const override { map_.apply(s); }

 private:
  PrecompiledCharsmap map_;
};

struct ByteTables {
  std::array<std::string, 256> encode;  // byte -> UTF-8 of its printable character
  std::array<int16_t, 0x200> decode;    // code point (< 0x200) -> byte, or -1
  ByteTables() {
    decode.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      encode[b] = utf8::encode(cp);
      decode[cp] = static_cast<int16_t>(b);
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}
}  // namespace

std::unique_ptr<Normalizer> make_precompiled_normalizer(const std::string& base64_charsmap,
                                                        const std::string& what) {
  return std::make_unique<PrecompiledNormalizer>(
      PrecompiledCharsmap(base64_decode(base64_charsmap, what), what));
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = byte_tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out.append(t.encode[b]);
  return out;
}

bool byte_level_decode(std::string_view text, std::string& out) {
  const auto& t = byte_tables();
  const size_t start = out.size();
  for (size_t i = 0; i < text.size();) {
    size_t len;
    char32_t c = utf8::decode(text, i, len);
    if (c >= 0x200 || t.decode[c] < 0) {
      out.resize(start);
      out.append(text);
      return false;
    }
    out.push_back(static_cast<char>(t.decode[c]));
    i += len;
  }
  return true;
}

}  // namespace tachyon::tok
