#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "core/utf8.h"

namespace tachyon::tok {
namespace {

constexpr std::string_view kSpace = "\\p{White_Space}";
constexpr std::string_view kNotSpace = "\\P{White_Space}";
// Oniguruma's Unicode word class (UTS #18): Alphabetic, marks, decimal digits,
// connector punctuation and the joiners.
constexpr std::string_view kWordItems = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";

// Per-thread match state: the match data (one pair is all we read) and a JIT stack
// large enough for long subjects.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string translate_onig_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      ++i;
      if (n == 's') {
        out.append(class_depth > 0 ? kSpace : std::string("[") + std::string(kSpace) + "]");
      } else if (n == 'S') {
        out.append(class_depth > 0 ? kNotSpace : std::string("[") + std::string(kNotSpace) + "]");
      } else if (n == 'w') {
        if (class_depth > 0) {
          out.append(kWordItems);
        } else {
          out.append("[").append(kWordItems).append("]");
        }
      } else if (n == 'W' && class_depth == 0) {
        out.append("[^").append(kWordItems).append("]");
      } else {
        out.push_back('\\');
        out.push_back(n);
      }
      continue;
    }
    if (c == '[') {
      // POSIX classes like [:alpha:] inside a class.
      if (class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {
        size_t close = p.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(p.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      }
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out.append("\\]");
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) {
      --class_depth;
      out.push_back(c);
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ \t\n\r\f\v").find(c) != std::string_view::npos) {
      if (c == '\t') {
        out.append("\\t");
      } else if (c == '\n') {
        out.append("\\n");
      } else if (c == '\r') {
        out.append("\\r");
      } else if (c == '\f') {
        out.append("\\f");
      } else if (c == '\v') {
        out.append("\\x0B");
      } else if (c == ' ') {
        out.append("\\x20");
      } else {
        out.push_back('\\');
        out.push_back(c);
      }
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Regex::Regex(std::string_view pattern, std::string_view what) : pattern_(pattern) {
  if (!utf8::is_valid(pattern)) raise<InvalidArgument>("{}: pattern is not valid UTF-8", what);
  std::string translated = translate_onig_pattern(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    raise<InvalidArgument>("{}: invalid regex '{}' at offset {}: {}", what, pattern, offset,
                           reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation: a pattern it cannot compile still runs interpreted.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

size_t Regex::char_step(std::string_view text, size_t i) {
  return utf8::char_len(static_cast<unsigned char>(text[i]));
}

bool Regex::find(std::string_view text, size_t start, size_t& b, size_t& e) const {
  auto& st = match_state();
  int rc = pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()),
                       text.size(), start, PCRE2_NO_UTF_CHECK, st.data, st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    raise<InvalidArgument>("regex '{}' failed on a {}-byte input: {}", pattern_, text.size(),
                           reinterpret_cast<const char*>(msg));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  b = ov[0];
  e = ov[1];
  if (e < b) e = b;  // \K tricks; never produce inverted ranges
  return true;
}

std::vector<std::pair<std::pair<size_t, size_t>, bool>> Regex::find_matches(
    std::string_view text) const {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> out;
  if (text.empty()) {
    out.push_back({{0, 0}, false});
    return out;
  }
  size_t prev = 0;
  for_each_match(text, [&](size_t b, size_t e) {
    if (prev != b) out.push_back({{prev, b}, false});
    out.push_back({{b, e}, true});
    prev = e;
  });
  if (prev != text.size()) out.push_back({{prev, text.size()}, false});
  return out;
}

}  // namespace tachyon::tok
