// Plain ranges of a text to encode: where special tokens are not matched (see backend.h).
#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/backend.h"

namespace tachyon::tok {

Regions::Regions(std::span<const TextRange> plain, size_t size) : plain_(plain), size_(size) {
  size_t last = 0;
  for (const TextRange& r : plain) {
    if (r.begin > r.end || r.end > size || r.begin < last)
      raise<InvalidArgument>(
          "plain text ranges must be sorted, disjoint and inside the text ({} bytes); got "
          "[{}, {}) after {}",
          size, r.begin, r.end, last);
    last = r.end;
  }
}

Regions::Region Regions::at(size_t pos) const {
  // The first range that ends after pos.
  auto it = std::upper_bound(plain_.begin(), plain_.end(), pos,
                             [](size_t p, const TextRange& r) { return p < r.end; });
  if (it == plain_.end()) {
    const size_t begin = plain_.empty() ? 0 : plain_.back().end;
    return {begin, size_, false};
  }
  if (it->begin <= pos) return {it->begin, it->end, true};
  const size_t begin = it == plain_.begin() ? 0 : std::prev(it)->end;
  return {begin, it->begin, false};
}

void sanitize_ranges(std::string_view input, std::span<const TextRange> plain, std::string& text,
                     std::vector<TextRange>& ranges) {
  Regions check(plain, input.size());
  ranges.clear();
  text = utf8::sanitize(input);
  if (text == input) {
    for (const TextRange& r : plain)
      if (r.begin < r.end) ranges.push_back(r);
    return;
  }
  text.clear();
  size_t at = 0;
  for (const TextRange& r : plain) {
    text += utf8::sanitize(input.substr(at, r.begin - at));
    const size_t begin = text.size();
    text += utf8::sanitize(input.substr(r.begin, r.end - r.begin));
    if (text.size() > begin) ranges.push_back({begin, text.size()});
    at = r.end;
  }
  text += utf8::sanitize(input.substr(at));
}

}  // namespace tachyon::tok
