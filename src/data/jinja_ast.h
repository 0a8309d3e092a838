// A chat template's syntax tree, and the parser that builds it from the lexer's tokens with
// Jinja2's grammar and precedence (filters bind tighter than arithmetic; `**` is left-assoc).
// Statements outside the subset (include, import, extends, block, call, filter, with, raw, ...) are
// a TemplateError at their place. Internal to data.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja_lexer.h"
#include "jinja_value.h"

namespace hpctrain::data::jinja {

// One node; `kids`, `names` and `name` mean what the comment at each kind says (null kids are
// parts left out).
struct Node {
  enum class Kind {
    kBody,        // kids: statements
    kText,        // name: the text
    kOutput,      // {{ kids[0] }}
    kIf,          // kids: cond, body, [cond, body]..., [else body]
    kFor,         // names: targets; kids: iterable, body, else body, filter condition
    kSet,         // names: targets; name: the namespace attribute set, if any; kids: value
    kSetBlock,    // names[0]: target; kids: body
    kMacro,       // name; names: parameters; kids: body, then each parameter's default
    kBreak,       //
    kContinue,    //
    kGeneration,  // kids: body (transformers' {% generation %}: rendered as it is)
    kLiteral,     // literal
    kName,        // name
    kList,        // kids: items (tuples too)
    kDict,        // kids: key, value, key, value, ...
    kAttribute,   // kids[0].name
    kItem,        // kids[0][kids[1]]
    kSlice,       // kids[0][kids[1]:kids[2]:kids[3]]
    kCall,        // kids[0](kids[1..]); names: the keywords of the last args
    kFilter,      // kids[0] | name(kids[1..]); names: as kCall
    kTest,        // kids[0] is [not] name(kids[1..]); negated
    kNot,         // not kids[0]
    kNegate,      // -kids[0]
    kPlus,        // +kids[0]
    kBinary,      // kids[0] name kids[1]: + - * / // % ** ~
    kAnd,         // kids[0] and kids[1]
    kOr,          // kids[0] or kids[1]
    kCompare,     // kids[0] names[0] kids[1] names[1] kids[2] ...: == != < > <= >= in notin
    kConditional  // kids[0] if kids[1] else kids[2]
  };

  Kind kind;
  int line = 0;
  int column = 0;
  std::string name;
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Node>> kids;
  Value literal;
  bool negated = false;
  bool tuple = false;  // a kList written as a tuple
};

struct ParseLimits {
  int max_nesting = 64;  // brackets, operators and statements inside each other
};

// The template's statements; throws TemplateError at the offending token.
std::unique_ptr<Node> parse(const std::vector<Token>& tokens, const ParseLimits& limits);

}  // namespace hpctrain::data::jinja
