// Tokenizer for the template language, following jinja2's lexer rules: data, {{ }},
// {% %}, {# #}, raw blocks, whitespace control with -/+, trim_blocks, lstrip_blocks,
// newline normalisation and the dropped trailing newline.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::jinja {

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

enum class Tok : uint8_t {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,  // text holds the operator
  kEof,
};

struct Token {
  Tok type;
  std::string text;  // data, name, decoded string, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Throws TemplateError (with line and column) on lexical errors.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

std::string describe(const Token& t);

}  // namespace tachyon::jinja
