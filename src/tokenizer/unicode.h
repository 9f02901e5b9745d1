// Unicode character classes with the meaning Rust's `char` methods give them, which
// is what the Hugging Face tokenizer components test (is_whitespace, is_numeric, ...),
// plus the normalization forms (utf8proc).
#pragma once

#include <string>
#include <string_view>

namespace tachyon::tok::unicode {

bool is_whitespace(char32_t c);  // the White_Space property
bool is_numeric(char32_t c);     // general categories Nd, Nl, No
bool is_alphabetic(char32_t c);  // letters, Nl and the alphabetic marks (approximation)
bool is_alphanumeric(char32_t c);
bool is_punctuation(char32_t c);      // general categories P*
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_control(char32_t c);          // Cc
bool is_other(char32_t c);            // C* (Cc, Cf, Co, Cs, Cn)
bool is_chinese_char(char32_t c);     // the CJK blocks BERT pads with spaces

// Lowercase as Rust's char::to_lowercase, one character at a time (no final-sigma rule).
void append_lowercase(std::string& out, char32_t c);
// Uppercase likewise (full mappings such as ß -> SS are single-char in utf8proc; kept).
void append_uppercase(std::string& out, char32_t c);

enum class Form { kNFC, kNFD, kNFKC, kNFKD };
// Normalizes valid UTF-8 text.
std::string normalize(std::string_view text, Form form);

}  // namespace tachyon::tok::unicode
