// Python str semantics over UTF-8 text, as the template language needs them:
// whitespace, strip/split/splitlines, case mapping, repr() and float repr().
// Indices and lengths are in code points, as Python counts them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::jinja {

// Decodes one code point at `pos` (advancing it); invalid bytes decode as U+FFFD.
char32_t utf8_next(std::string_view s, size_t& pos);
void utf8_append(std::string& out, char32_t cp);
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
bool utf8_valid(std::string_view s);
// Number of code points.
size_t utf8_length(std::string_view s);
// Byte offset of code point `index` (index <= length), or npos past the end.
size_t utf8_offset(std::string_view s, size_t index);

// str.isspace() for one code point.
bool py_isspace(char32_t cp);
bool py_isalnum(char32_t cp);
bool py_isprintable(char32_t cp);

// str.strip/lstrip/rstrip; `chars` empty optional means whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / str.rsplit; no separator splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
// str.splitlines(keepends).
std::vector<std::string> py_splitlines(std::string_view s, bool keepends = false);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_swapcase(std::string_view s);
// str.title(): upper after every uncased character.
std::string py_title(std::string_view s);
// jinja's title filter: upper the first letter of each word split at [-\s({\[<]+.
std::string jinja_title(std::string_view s);
// Predicates as str.isupper()/islower()/isdigit()/isalpha()/isalnum().
bool py_isupper(std::string_view s);
bool py_islower(std::string_view s);
bool py_isdigit(std::string_view s);
bool py_isalpha(std::string_view s);
bool py_isalnum_str(std::string_view s);

// repr() of a str: quotes and escapes chosen as Python does.
std::string py_repr_string(std::string_view s);
// repr()/str() of a float: shortest round-trip digits in Python's layout.
std::string py_float_repr(double v);
// JSON string literal as Python's json.dumps(ensure_ascii=False) writes it.
void json_quote(std::string& out, std::string_view s, bool ensure_ascii = false);

// Count of non-overlapping occurrences (Python semantics for the empty needle).
size_t py_count(std::string_view s, std::string_view needle);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);

}  // namespace tachyon::jinja
