// A chat template's source split into tokens as Jinja2's lexer splits it, with transformers'
// settings: trim_blocks (the newline after a block tag dropped), lstrip_blocks (spaces before a
// block tag on its own line dropped), `-` and `+` whitespace control, newlines normalized and one
// trailing newline dropped. Internal to data.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hpctrain::data::jinja {

// An error at a place in the template (1-based line and column, in characters).
class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& message, int line, int column)
      : std::runtime_error(message), line(line), column(column) {}
  int line;
  int column;
};

// raise_exception(message) called by the template: it refused its input.
class RaisedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

struct Token {
  enum class Kind {
    kText,
    kPrintOpen,
    kPrintClose,
    kBlockOpen,
    kBlockClose,
    kName,
    kString,
    kInt,
    kFloat,
    kOperator,
    kEnd
  };
  Kind kind;
  std::string value;  // text, name, operator, a string's decoded bytes, a number's digits
  int line = 0;
  int column = 0;
};

// Throws TemplateError for an unterminated tag, comment or string, or a character no token has.
std::vector<Token> lex(std::string_view source);

// Python's str.isspace() for one code point (what strip() and split() remove).
bool is_python_space(char32_t c);

}  // namespace hpctrain::data::jinja
