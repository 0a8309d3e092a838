// Jinja2's lexer for the delimiters {{ }}, {% %} and {# #}, with transformers' whitespace settings.
#include "jinja_lexer.h"

#include <algorithm>
#include <cstring>

#include "utf8.h"

namespace hpctrain::data::jinja {

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

// Jinja2 reads the source by str.splitlines() and joins it with "\n": every line boundary Python
// knows becomes "\n", and a trailing one disappears (keep_trailing_newline is false).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size();) {
    const size_t start = i;
    const char32_t c = next_code_point(source, i);
    if (c == '\r' && i < source.size() && source[i] == '\n') ++i;
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                          c == 0x2028 || c == 0x2029;
    if (boundary) {
      out += '\n';
    } else {
      out.append(source, start, i - start);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Removes trailing (Python) whitespace from `text`.
void rstrip(std::string& text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_python_space(next_code_point(text, i))) break;
    end = start;
  }
  text.resize(end);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t text_start = 0;
    while (pos_ < src_.size()) {
      const size_t open = find_open(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_next_) skip_leading_space(text);
      strip_next_ = false;
      if (open == src_.size()) {
        emit_text(std::move(text), text_start);
        break;
      }
      const char kind = src_[open + 1];
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        rstrip(text);
      } else if (modifier != '+' && kind != '{') {
        lstrip_block(text, text_start);
      }
      emit_text(std::move(text), text_start);
      pos_ = open + 2 + (modifier == '-' || (modifier == '+' && kind != '{') ? 1 : 0);
      if (kind == '#') {
        comment(open);
      } else {
        tag(kind == '{', open);
      }
      text_start = pos_;
    }
    tokens_.push_back({Token::Kind::kEnd, "", place(src_.size()).first, place(src_.size()).second});
    return std::move(tokens_);
  }

 private:
  std::pair<int, int> place(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_start = *(it - 1);
    int column = 1;
    for (size_t i = line_start; i < offset && i < src_.size();) {
      next_code_point(src_, i);
      ++column;
    }
    return {static_cast<int>(it - line_starts_.begin()), column};
  }

  [[noreturn]] void fail(const std::string& message, size_t offset) const {
    const auto [line, column] = place(offset);
    throw TemplateError(message, line, column);
  }

  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void skip_leading_space(std::string& text) const {
    size_t i = 0;
    while (i < text.size()) {
      size_t next = i;
      if (!is_python_space(next_code_point(text, next))) break;
      i = next;
    }
    text.erase(0, i);
  }

  // lstrip_blocks: spaces and tabs between the line's start and a block tag go.
  void lstrip_block(std::string& text, size_t text_start) const {
    const size_t newline = text.rfind('\n');
    const size_t line_pos = newline == std::string::npos ? 0 : newline + 1;
    const bool line_starting = text_start == 0 || src_[text_start - 1] == '\n';
    if (line_pos == 0 && !line_starting) return;
    if (text.find_first_not_of(" \t", line_pos) == std::string::npos) text.resize(line_pos);
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    const auto [line, column] = place(offset);
    tokens_.push_back({Token::Kind::kText, std::move(text), line, column});
  }

  // After a block tag or comment: `-` strips what follows, trim_blocks drops one newline.
  void after_block(char modifier) {
    if (modifier == '-') {
      strip_next_ = true;
    } else if (modifier != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  void comment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail("the comment is not closed by #}", open);
    const char modifier = close > pos_ ? src_[close - 1] : '\0';
    pos_ = close + 2;
    after_block(modifier);
  }

  void tag(bool print, size_t open) {
    const auto [line, column] = place(open);
    tokens_.push_back({print ? Token::Kind::kPrintOpen : Token::Kind::kBlockOpen, "", line, column});
    brackets_ = 0;
    const char closer = print ? '}' : '%';
    while (true) {
      while (pos_ < src_.size() && std::strchr(" \t\n\r", src_[pos_]) && src_[pos_] != '\0') ++pos_;
      if (pos_ >= src_.size()) fail(print ? "the expression is not closed by }}" : "the tag is not closed by %}", open);
      char modifier = '\0';
      size_t at = pos_;
      if (brackets_ > 0) {  // as Jinja2's lexer: `}}` inside {...} closes brackets, not the tag
        expression_token();
        continue;
      }
      if ((src_[at] == '-' || src_[at] == '+') && at + 2 < src_.size() && src_[at + 1] == closer &&
          src_[at + 2] == '}') {
        modifier = src_[at];
        ++at;
      }
      if (at + 1 < src_.size() && src_[at] == closer && src_[at + 1] == '}') {
        const auto [l, c] = place(pos_);
        tokens_.push_back({print ? Token::Kind::kPrintClose : Token::Kind::kBlockClose, "", l, c});
        pos_ = at + 2;
        if (print) {
          strip_next_ = modifier == '-';
        } else {
          after_block(modifier);
        }
        return;
      }
      expression_token();
    }
  }

  void expression_token() {
    const auto [line, column] = place(pos_);
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      tokens_.push_back({Token::Kind::kName, src_.substr(start, pos_ - start), line, column});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      number(line, column);
    } else if (c == '\'' || c == '"') {
      tokens_.push_back({Token::Kind::kString, string_literal(), line, column});
    } else {
      static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                               ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
      for (const char* op : kOperators) {
        if (src_.compare(pos_, std::strlen(op), op) == 0) {
          if (std::strchr("([{", op[0]) && op[1] == '\0') ++brackets_;
          if (std::strchr(")]}", op[0]) && op[1] == '\0' && brackets_ > 0) --brackets_;
          tokens_.push_back({Token::Kind::kOperator, op, line, column});
          pos_ += std::strlen(op);
          return;
        }
      }
      fail(std::string("unexpected character '") + c + "'", pos_);
    }
  }

  std::string digits() {
    std::string out;
    while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                  (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                   std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))))) {
      if (src_[pos_] != '_') out += src_[pos_];
      ++pos_;
    }
    return out;
  }

  void number(int line, int column) {
    std::string text = digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      ++pos_;
      text += "." + digits();
      is_float = true;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t at = pos_ + 1;
      if (at < src_.size() && (src_[at] == '+' || src_[at] == '-')) ++at;
      if (at < src_.size() && std::isdigit(static_cast<unsigned char>(src_[at]))) {
        text += "e" + src_.substr(pos_ + 1, at - pos_ - 1);
        pos_ = at;
        text += digits();
        is_float = true;
      }
    }
    tokens_.push_back({is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, line, column});
  }

  // A quoted string with Python's escapes decoded.
  std::string string_literal() {
    const size_t open = pos_;
    const char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) fail("the string is not closed", open);
      const char c = src_[pos_++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) fail("the string is not closed", open);
      escape(out);
    }
  }

  void escape(std::string& out) {
    const char e = src_[pos_++];
    static const char kFrom[] = "\\'\"abfnrtv\n";
    static const char kTo[] = "\\'\"\a\b\f\n\r\t\v";
    if (const char* at = std::strchr(kFrom, e); at && e != '\0') {
      if (e != '\n') out += kTo[at - kFrom];  // a backslash before a newline joins the lines
      return;
    }
    const int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (width > 0) {
      if (pos_ + static_cast<size_t>(width) > src_.size()) fail("a truncated \\" + std::string(1, e) + " escape", pos_);
      const std::string hex = src_.substr(pos_, static_cast<size_t>(width));
      if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        fail("a bad \\" + std::string(1, e) + " escape", pos_);
      }
      const unsigned long code = std::stoul(hex, nullptr, 16);
      if (code > 0x10FFFF) fail("an escape beyond U+10FFFF", pos_);
      append_utf8(static_cast<char32_t>(code), out);
      pos_ += static_cast<size_t>(width);
      return;
    }
    if (e >= '0' && e <= '7') {
      unsigned code = static_cast<unsigned>(e - '0');
      for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k) {
        code = code * 8 + static_cast<unsigned>(src_[pos_++] - '0');
      }
      append_utf8(code, out);
      return;
    }
    out += '\\';  // Python keeps an unknown escape as it is
    out += e;
  }

  std::string src_;
  std::vector<size_t> line_starts_{0};
  size_t pos_ = 0;
  bool strip_next_ = false;
  int brackets_ = 0;  // open ( [ { inside the current tag
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace hpctrain::data::jinja
