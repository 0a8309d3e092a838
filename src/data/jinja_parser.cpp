// Jinja2's grammar for the statements and expressions chat templates use, by recursive descent.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "jinja_ast.h"

namespace hpctrain::data::jinja {
namespace {

using NodePtr = std::unique_ptr<Node>;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const ParseLimits& limits) : tokens_(tokens), limits_(limits) {}

  NodePtr run() {
    NodePtr body = parse_body({});
    if (!at(Token::Kind::kEnd)) fail("unexpected '" + peek().value + "'");
    return body;
  }

 private:
  // Counts how deep the parser is, to refuse a template that would exhaust the stack.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.depth_ > p_.limits_.max_nesting) {
        p_.fail("the template nests deeper than " + std::to_string(p_.limits_.max_nesting) +
                " levels (the engine's bound for an untrusted template)");
      }
    }
    ~Nest() { --p_.depth_; }

   private:
    Parser& p_;
  };

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  bool at(Token::Kind kind) const { return peek().kind == kind; }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).value == name;
  }
  bool at_op(const char* op) const { return peek().kind == Token::Kind::kOperator && peek().value == op; }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool skip_name(const char* name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  bool skip_op(const char* op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const std::string& message) const { throw TemplateError(message, peek().line, peek().column); }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "the end of the template";
      case Token::Kind::kText:
        return "text";
      case Token::Kind::kBlockClose:
        return "'%}'";
      case Token::Kind::kPrintClose:
        return "'}}'";
      case Token::Kind::kString:
        return "a string";
      default:
        return "'" + t.value + "'";
    }
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', found " + describe(peek()));
  }
  void expect(Token::Kind kind, const char* what) {
    if (!at(kind)) fail(std::string("expected ") + what + ", found " + describe(peek()));
    next();
  }
  std::string expect_name() {
    if (!at(Token::Kind::kName)) fail("expected a name, found " + describe(peek()));
    return next().value;
  }

  NodePtr make(Node::Kind kind, const Token& at_token) const {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = at_token.line;
    node->column = at_token.column;
    return node;
  }
  NodePtr make(Node::Kind kind) const { return make(kind, peek()); }

  // ---- statements ----

  // Text, outputs and statements up to a block tag whose name is in `stops` (not consumed).
  NodePtr parse_body(const std::set<std::string>& stops) {
    Nest nest(*this);
    NodePtr body = make(Node::Kind::kBody);
    while (true) {
      if (at(Token::Kind::kEnd)) {
        if (!stops.empty()) {
          const auto end =
              std::find_if(stops.begin(), stops.end(), [](const std::string& s) { return s.rfind("end", 0) == 0; });
          fail("the template ends before its '" + (end == stops.end() ? *stops.begin() : *end) + "'");
        }
        return body;
      }
      if (at(Token::Kind::kText)) {
        NodePtr text = make(Node::Kind::kText);
        text->name = next().value;
        body->kids.push_back(std::move(text));
      } else if (at(Token::Kind::kPrintOpen)) {
        NodePtr output = make(Node::Kind::kOutput);
        next();
        output->kids.push_back(parse_tuple(true));
        expect(Token::Kind::kPrintClose, "'}}'");
        body->kids.push_back(std::move(output));
      } else if (at(Token::Kind::kBlockOpen)) {
        if (peek(1).kind == Token::Kind::kName && stops.count(peek(1).value)) return body;
        next();
        body->kids.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(peek()));
      }
    }
  }

  void end_tag() { expect(Token::Kind::kBlockClose, "'%}'"); }

  // `{% name` of a closing or middle tag, then its `%}`.
  void closing(const char* name) {
    expect(Token::Kind::kBlockOpen, "'{%'");
    if (!skip_name(name)) fail(std::string("expected '") + name + "', found " + describe(peek()));
    end_tag();
  }

  NodePtr parse_statement() {
    if (!at(Token::Kind::kName)) fail("expected a statement's name, found " + describe(peek()));
    const std::string name = peek().value;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "generation") return parse_generation();
    if (name == "break" || name == "continue") {
      if (loops_ == 0) fail("'" + name + "' outside a loop");
      NodePtr node = make(name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue);
      next();
      end_tag();
      return node;
    }
    static const std::set<std::string> kFiles = {"include", "import", "from", "extends"};
    if (kFiles.count(name)) fail("the statement '" + name + "' is not supported (a chat template may not read files)");
    static const std::set<std::string> kOutside = {"block", "call",       "filter", "with", "raw",
                                                   "do",    "autoescape", "trans",  "print"};
    if (kOutside.count(name)) fail("the statement '" + name + "' is not supported by this template engine");
    fail("unknown statement '" + name + "'");
  }

  NodePtr parse_if() {
    NodePtr node = make(Node::Kind::kIf);
    next();
    node->kids.push_back(parse_tuple(true));
    end_tag();
    while (true) {
      node->kids.push_back(parse_body({"elif", "else", "endif"}));
      next();  // {%
      const std::string which = next().value;
      if (which == "elif") {
        node->kids.push_back(parse_tuple(true));
        end_tag();
      } else if (which == "else") {
        end_tag();
        node->kids.push_back(parse_body({"endif"}));
        closing("endif");
        return node;
      } else {
        end_tag();
        return node;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    const bool parens = skip_op("(");
    std::vector<std::string> names{expect_name()};
    while (skip_op(",")) {
      if (at_name("in") || at_op("=") || at_op(")")) break;
      names.push_back(expect_name());
    }
    if (parens) expect_op(")");
    return names;
  }

  NodePtr parse_for() {
    NodePtr node = make(Node::Kind::kFor);
    next();
    node->names = parse_targets();
    if (!skip_name("in")) fail("expected 'in', found " + describe(peek()));
    node->kids.push_back(parse_tuple(false));
    NodePtr filter = skip_name("if") ? parse_expression(true) : nullptr;
    if (at_name("recursive")) fail("recursive loops are not supported by this template engine");
    end_tag();
    ++loops_;
    node->kids.push_back(parse_body({"else", "endfor"}));
    --loops_;
    next();  // {%
    NodePtr otherwise;
    if (next().value == "else") {
      end_tag();
      otherwise = parse_body({"endfor"});
      closing("endfor");
    } else {
      end_tag();
    }
    node->kids.push_back(std::move(otherwise));
    node->kids.push_back(std::move(filter));
    return node;
  }

  NodePtr parse_set() {
    const Token& start = next();
    std::vector<std::string> targets{expect_name()};
    std::string attribute;
    if (skip_op(".")) {
      attribute = expect_name();
    } else {
      while (skip_op(",")) targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      NodePtr node = make(Node::Kind::kSet, start);
      node->names = std::move(targets);
      node->name = attribute;
      node->kids.push_back(parse_tuple(true));
      end_tag();
      return node;
    }
    if (targets.size() != 1 || !attribute.empty()) fail("a block 'set' assigns one name");
    if (at_op("|")) fail("a filtered block 'set' is not supported by this template engine");
    end_tag();
    NodePtr node = make(Node::Kind::kSetBlock, start);
    node->names = std::move(targets);
    node->kids.push_back(parse_body({"endset"}));
    closing("endset");
    return node;
  }

  NodePtr parse_macro() {
    NodePtr node = make(Node::Kind::kMacro);
    next();
    node->name = expect_name();
    expect_op("(");
    std::vector<NodePtr> defaults;
    while (!skip_op(")")) {
      if (!node->names.empty()) expect_op(",");
      if (skip_op(")")) break;
      node->names.push_back(expect_name());
      defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
      if (!defaults.back() && defaults.size() > 1 && defaults[defaults.size() - 2]) {
        fail("a parameter without a default follows one with a default");
      }
    }
    end_tag();
    const int loops = loops_;
    loops_ = 0;
    node->kids.push_back(parse_body({"endmacro"}));
    loops_ = loops;
    closing("endmacro");
    for (NodePtr& d : defaults) node->kids.push_back(std::move(d));
    return node;
  }

  NodePtr parse_generation() {
    NodePtr node = make(Node::Kind::kGeneration);
    next();
    end_tag();
    node->kids.push_back(parse_body({"endgeneration"}));
    closing("endgeneration");
    return node;
  }

  // ---- expressions ----

  // An expression, or a bare tuple `a, b` (as a list).
  NodePtr parse_tuple(bool with_condition) {
    const Token& start = peek();
    NodePtr first = parse_expression(with_condition);
    if (!at_op(",")) return first;
    NodePtr list = make(Node::Kind::kList, start);
    list->tuple = true;
    list->kids.push_back(std::move(first));
    while (skip_op(",")) {
      if (at(Token::Kind::kBlockClose) || at(Token::Kind::kPrintClose) || at_name("if")) break;
      list->kids.push_back(parse_expression(with_condition));
    }
    return list;
  }

  NodePtr parse_expression(bool with_condition) {
    Nest nest(*this);
    NodePtr value = parse_or();
    while (with_condition && at_name("if")) {
      NodePtr node = make(Node::Kind::kConditional);
      next();
      node->kids.push_back(std::move(value));
      node->kids.push_back(parse_or());
      node->kids.push_back(skip_name("else") ? parse_expression(true) : nullptr);
      value = std::move(node);
    }
    return value;
  }

  NodePtr binary(Node::Kind kind, NodePtr left, NodePtr right, const Token& at_token, std::string op = "") {
    NodePtr node = make(kind, at_token);
    node->name = std::move(op);
    node->kids.push_back(std::move(left));
    node->kids.push_back(std::move(right));
    return node;
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (at_name("or")) {
      const Token& op = next();
      left = binary(Node::Kind::kOr, std::move(left), parse_and(), op);
    }
    return left;
  }

  NodePtr parse_and() {
    NodePtr left = parse_not();
    while (at_name("and")) {
      const Token& op = next();
      left = binary(Node::Kind::kAnd, std::move(left), parse_not(), op);
    }
    return left;
  }

  NodePtr parse_not() {
    if (at_name("not")) {
      Nest nest(*this);
      NodePtr node = make(Node::Kind::kNot);
      next();
      node->kids.push_back(parse_not());
      return node;
    }
    return parse_compare();
  }

  NodePtr parse_compare() {
    const Token& start = peek();
    NodePtr first = parse_math1();
    NodePtr node;
    static const std::set<std::string> kOps = {"==", "!=", "<", ">", "<=", ">="};
    while (true) {
      std::string op;
      if (at(Token::Kind::kOperator) && kOps.count(peek().value)) {
        op = next().value;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!node) {
        node = make(Node::Kind::kCompare, start);
        node->kids.push_back(std::move(first));
      }
      node->names.push_back(op);
      node->kids.push_back(parse_math1());
    }
    return node ? std::move(node) : std::move(first);
  }

  template <class Next>
  NodePtr left_assoc(const std::set<std::string>& ops, Next next_level) {
    NodePtr left = (this->*next_level)();
    while (at(Token::Kind::kOperator) && ops.count(peek().value)) {
      const Token& op = next();
      left = binary(Node::Kind::kBinary, std::move(left), (this->*next_level)(), op, op.value);
    }
    return left;
  }

  NodePtr parse_math1() { return left_assoc({"+", "-"}, &Parser::parse_concat); }
  NodePtr parse_concat() { return left_assoc({"~"}, &Parser::parse_math2); }
  NodePtr parse_math2() { return left_assoc({"*", "/", "//", "%"}, &Parser::parse_pow); }
  NodePtr parse_pow() { return left_assoc({"**"}, &Parser::parse_unary_filtered); }
  NodePtr parse_unary_filtered() { return parse_unary(true); }

  NodePtr parse_unary(bool with_filter) {
    Nest nest(*this);
    NodePtr node;
    if (at_op("-") || at_op("+")) {
      node = make(at_op("-") ? Node::Kind::kNegate : Node::Kind::kPlus);
      next();
      node->kids.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    return with_filter ? parse_filters(std::move(node)) : std::move(node);
  }

  NodePtr parse_primary() {
    const Token& t = peek();
    if (t.kind == Token::Kind::kName) {
      next();
      NodePtr node = make(Node::Kind::kLiteral, t);
      if (t.value == "true" || t.value == "True") {
        node->literal = Value::boolean(true);
      } else if (t.value == "false" || t.value == "False") {
        node->literal = Value::boolean(false);
      } else if (t.value == "none" || t.value == "None") {
        node->literal = Value::none();
      } else {
        node->kind = Node::Kind::kName;
        node->name = t.value;
      }
      return node;
    }
    if (t.kind == Token::Kind::kString) {
      std::string text;
      while (at(Token::Kind::kString)) text += next().value;  // adjacent strings join
      NodePtr node = make(Node::Kind::kLiteral, t);
      node->literal = Value::string(std::move(text));
      return node;
    }
    if (t.kind == Token::Kind::kInt || t.kind == Token::Kind::kFloat) {
      next();
      NodePtr node = make(Node::Kind::kLiteral, t);
      if (t.kind == Token::Kind::kFloat) {
        node->literal = Value::number(std::strtod(t.value.c_str(), nullptr));
      } else {
        errno = 0;
        const long long value = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) fail("the integer " + t.value + " does not fit in 64 bits");
        node->literal = Value::integer(value);
      }
      return node;
    }
    if (skip_op("(")) {
      if (skip_op(")")) {
        NodePtr node = make(Node::Kind::kList, t);
        node->tuple = true;
        return node;
      }
      NodePtr inner = parse_tuple(true);
      expect_op(")");
      return inner;
    }
    if (skip_op("[")) return parse_sequence(Node::Kind::kList, "]", t);
    if (skip_op("{")) return parse_sequence(Node::Kind::kDict, "}", t);
    fail("unexpected " + describe(t));
  }

  NodePtr parse_sequence(Node::Kind kind, const char* close, const Token& start) {
    NodePtr node = make(kind, start);
    while (!skip_op(close)) {
      if (!node->kids.empty()) {
        expect_op(",");
        if (skip_op(close)) break;
      }
      node->kids.push_back(parse_expression(true));
      if (kind == Node::Kind::kDict) {
        expect_op(":");
        node->kids.push_back(parse_expression(true));
      }
    }
    return node;
  }

  NodePtr parse_postfix(NodePtr node) {
    while (true) {
      const Token& t = peek();
      if (skip_op(".")) {
        if (at(Token::Kind::kInt)) {
          NodePtr item = make(Node::Kind::kItem, t);
          item->kids.push_back(std::move(node));
          item->kids.push_back(parse_primary());
          node = std::move(item);
          continue;
        }
        NodePtr attribute = make(Node::Kind::kAttribute, t);
        attribute->name = expect_name();
        attribute->kids.push_back(std::move(node));
        node = std::move(attribute);
      } else if (skip_op("[")) {
        node = parse_subscript(std::move(node), t);
      } else if (at_op("(")) {
        node = parse_call(Node::Kind::kCall, std::move(node), t);
      } else {
        return node;
      }
    }
  }

  NodePtr parse_subscript(NodePtr target, const Token& start) {
    Nest nest(*this);
    NodePtr parts[3];
    bool slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!at_op(":") && !at_op("]")) parts[i] = parse_expression(true);
      if (i == 2 || !skip_op(":")) break;
      slice = true;
    }
    expect_op("]");
    NodePtr node = make(slice ? Node::Kind::kSlice : Node::Kind::kItem, start);
    node->kids.push_back(std::move(target));
    if (!slice && !parts[0]) fail("an empty subscript");
    for (int i = 0; i < (slice ? 3 : 1); ++i) node->kids.push_back(std::move(parts[i]));
    return node;
  }

  // `(args)` for a call, a filter or a test; the operand (or callee) first.
  NodePtr parse_call(Node::Kind kind, NodePtr operand, const Token& start) {
    NodePtr node = make(kind, start);
    node->kids.push_back(std::move(operand));
    expect_op("(");
    while (!skip_op(")")) {
      if (node->kids.size() > 1) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      if (at_op("*") || at_op("**")) fail("*args and **kwargs are not supported by this template engine");
      if (at(Token::Kind::kName) && peek(1).kind == Token::Kind::kOperator && peek(1).value == "=") {
        node->names.push_back(next().value);
        next();
      } else if (!node->names.empty()) {
        fail("a positional argument follows a keyword argument");
      }
      node->kids.push_back(parse_expression(true));
    }
    return node;
  }

  NodePtr parse_filters(NodePtr node) {
    while (true) {
      const Token& t = peek();
      if (skip_op("|")) {
        const std::string name = expect_name();
        if (at_op("(")) {
          node = parse_call(Node::Kind::kFilter, std::move(node), t);
        } else {
          NodePtr filter = make(Node::Kind::kFilter, t);
          filter->kids.push_back(std::move(node));
          node = std::move(filter);
        }
        node->name = name;
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(Node::Kind::kCall, std::move(node), t);
      } else {
        return node;
      }
    }
  }

  NodePtr parse_test(NodePtr operand) {
    const Token& t = next();  // is
    const bool negated = skip_name("not");
    const std::string name = expect_name();
    NodePtr node;
    if (at_op("(")) {
      node = parse_call(Node::Kind::kTest, std::move(operand), t);
    } else {
      node = make(Node::Kind::kTest, t);
      node->kids.push_back(std::move(operand));
      const Token& a = peek();
      const bool argument = a.kind == Token::Kind::kName || a.kind == Token::Kind::kString ||
                            a.kind == Token::Kind::kInt || a.kind == Token::Kind::kFloat || at_op("[") || at_op("{");
      if (argument && !at_name("else") && !at_name("or") && !at_name("and") && !at_name("is") && !at_name("if") &&
          !at_name("in") && !at_name("not")) {
        node->kids.push_back(parse_postfix(parse_primary()));
      }
    }
    node->name = name;
    node->negated = negated;
    return node;
  }

  const std::vector<Token>& tokens_;
  const ParseLimits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

}  // namespace

std::unique_ptr<Node> parse(const std::vector<Token>& tokens, const ParseLimits& limits) {
  return Parser(tokens, limits).run();
}

}  // namespace hpctrain::data::jinja
