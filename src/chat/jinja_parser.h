// Parser: tokens to syntax tree, with jinja2's grammar and operator precedence.
#pragma once

#include <memory>
#include <string_view>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace tachyon::jinja {

struct ParseOptions {
  LexerOptions lexer;
  bool loop_controls = true;  // {% break %} / {% continue %} (jinja2.ext.loopcontrols)
  bool do_statement = false;  // {% do expr %} (jinja2.ext.do; transformers does not enable it)
  int max_depth = 256;        // nesting of expressions and statements
};

// Throws TemplateError with the line and column of a syntax error.
std::shared_ptr<const Program> parse_template(std::string_view source, const ParseOptions& options);

}  // namespace tachyon::jinja
