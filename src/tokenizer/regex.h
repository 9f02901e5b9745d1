// Regular expressions for tokenizer patterns: PCRE2 (UTF + Unicode properties + JIT)
// with the class semantics of Oniguruma, the engine Hugging Face `tokenizers` uses:
// `\s`/`\S` mean the Unicode White_Space property, `\w`/`\W` the Unicode word class.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tachyon::tok {

// Rewrites an Oniguruma-flavoured pattern into the PCRE2 pattern with the same meaning.
std::string translate_onig_pattern(std::string_view pattern);

// Escapes every regex metacharacter of `literal`.
std::string regex_escape(std::string_view literal);

class Regex {
 public:
  // Compiles `pattern` (Oniguruma flavour, translated); throws InvalidArgument naming
  // `what` and the error position when it does not compile.
  Regex(std::string_view pattern, std::string_view what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Finds the next match at or after byte `start` of valid UTF-8 `text`. Returns false
  // when there is none. Throws InvalidArgument when a match limit is hit.
  bool find(std::string_view text, size_t start, size_t& match_begin, size_t& match_end) const;

  // All non-overlapping matches, left to right, with the iteration rule of Rust's
  // regex crates (an empty match right where the previous match ended is skipped).
  // Calls fn(begin, end) for each.
  template <typename Fn>
  void for_each_match(std::string_view text, Fn&& fn) const {
    size_t pos = 0;
    size_t last_end = std::string_view::npos;
    while (pos <= text.size()) {
      size_t b, e;
      if (!find(text, pos, b, e)) break;
      if (b == e && last_end == e) {
        // Step over one character and search again.
        if (b >= text.size()) break;
        pos = b + char_step(text, b);
        continue;
      }
      fn(b, e);
      last_end = e;
      pos = e;
    }
  }

  // Matches of `text` as (begin, end, is_match) ranges covering all of it, like the
  // `find_matches` of `tokenizers` (an empty text gives one empty non-match).
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> find_matches(std::string_view text) const;

 private:
  static size_t char_step(std::string_view text, size_t i);
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
};

}  // namespace tachyon::tok
