// Renders a chat template's syntax tree as Jinja2 would, inside the sandbox's bounds.
#include "jinja_render.h"

#include "jinja_builtins.h"

namespace hpctrain::data::jinja {
namespace {

using Kind = Node::Kind;
using VKind = Value::Kind;

struct Scope {
  explicit Scope(std::shared_ptr<Scope> up) : parent(std::move(up)) {}
  std::shared_ptr<Scope> parent;
  Dict vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      for (const auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

// Filters and tests are checked when the template is read, as Jinja2 checks them when it compiles.
void check_names(const Node& node) {
  if (node.kind == Kind::kFilter && !has_filter(node.name)) {
    throw TemplateError("no filter named '" + node.name + "'", node.line, node.column);
  }
  if (node.kind == Kind::kTest && !has_test(node.name)) {
    throw TemplateError("no test named '" + node.name + "'", node.line, node.column);
  }
  for (const auto& kid : node.kids) {
    if (kid) check_names(*kid);
  }
}

class Renderer {
 public:
  explicit Renderer(const Limits& limits) : limits_(limits) {
    budget_.max_string_bytes = limits.max_output_bytes;
    budget_.max_items = static_cast<size_t>(limits.max_iterations);
  }

  Text run(const Node& root, const Dict& variables) {
    auto scope = std::make_shared<Scope>(nullptr);
    scope->vars = variables;
    Text out;
    exec(root, scope, out);
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw EvalError(message); }

  void emit(Text& out, const Text& text) {
    emitted_ += text.bytes.size();
    if (emitted_ > limits_.max_output_bytes) {
      fail("the template writes more than " + std::to_string(limits_.max_output_bytes) +
           " bytes (the engine's bound for an untrusted template)");
    }
    out.append(text);
  }

  // ---- statements ----

  Flow exec(const Node& node, const ScopePtr& scope, Text& out) {
    try {
      return exec_node(node, scope, out);
    } catch (const RaisedByTemplate& e) {
      throw RaisedError(e.what(), node.line, node.column);
    } catch (const EvalError& e) {
      throw TemplateError(e.what(), node.line, node.column);
    }
  }

  Flow exec_node(const Node& node, const ScopePtr& scope, Text& out) {
    switch (node.kind) {
      case Kind::kBody:
        for (const auto& kid : node.kids) {
          const Flow flow = exec(*kid, scope, out);
          if (flow != Flow::kNormal) return flow;
        }
        return Flow::kNormal;
      case Kind::kText:
        emit(out, Text{node.name, {}});
        return Flow::kNormal;
      case Kind::kOutput:
        emit(out, to_text(eval(*node.kids[0], scope)));
        return Flow::kNormal;
      case Kind::kIf:
        for (size_t i = 0; i + 1 < node.kids.size(); i += 2) {
          if (eval(*node.kids[i], scope).truthy()) return exec(*node.kids[i + 1], scope, out);
        }
        if (node.kids.size() % 2 == 1) return exec(*node.kids.back(), scope, out);
        return Flow::kNormal;
      case Kind::kFor:
        exec_for(node, scope, out);
        return Flow::kNormal;
      case Kind::kSet:
        exec_set(node, scope);
        return Flow::kNormal;
      case Kind::kSetBlock: {
        Text captured;
        exec(*node.kids[0], scope, captured);
        scope->set(node.names[0], Value::string(std::move(captured)));
        return Flow::kNormal;
      }
      case Kind::kMacro:
        define_macro(node, scope);
        return Flow::kNormal;
      case Kind::kBreak:
        return Flow::kBreak;
      case Kind::kContinue:
        return Flow::kContinue;
      case Kind::kGeneration:
        return exec(*node.kids[0], scope, out);
      default:
        fail("an expression where a statement belongs");
    }
  }

  void bind(const std::vector<std::string>& targets, const Value& value, Scope& scope) {
    if (targets.size() == 1) {
      scope.set(targets[0], value);
      return;
    }
    const List items = iterate(value);
    if (items.size() != targets.size()) {
      fail(items.size() < targets.size()
               ? "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                     std::to_string(items.size()) + ")"
               : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  void count_iteration() {
    if (++iterations_ > limits_.max_iterations) {
      fail("the template's loops run more than " + std::to_string(limits_.max_iterations) +
           " iterations (the engine's bound for an untrusted template)");
    }
  }

  void exec_for(const Node& node, const ScopePtr& scope, Text& out) {
    List items = iterate(eval(*node.kids[0], scope));
    if (const Node* filter = node.kids[3].get()) {
      List kept;
      for (const Value& item : items) {
        count_iteration();
        auto probe = std::make_shared<Scope>(scope);
        bind(node.names, item, *probe);
        if (eval(*filter, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      count_iteration();
      auto inner = std::make_shared<Scope>(scope);
      bind(node.names, items[static_cast<size_t>(i)], *inner);
      inner->set("loop", loop_value(items, i));
      if (exec(*node.kids[1], inner, out) == Flow::kBreak) break;
    }
    if (n == 0 && node.kids[2]) exec(*node.kids[2], scope, out);
  }

  static Value loop_value(const List& items, std::int64_t i) {
    const auto n = static_cast<std::int64_t>(items.size());
    const auto at = [&](std::int64_t k) { return items[static_cast<size_t>(k)]; };
    Dict loop = {{"index", Value::integer(i + 1)},
                 {"index0", Value::integer(i)},
                 {"revindex", Value::integer(n - i)},
                 {"revindex0", Value::integer(n - i - 1)},
                 {"first", Value::boolean(i == 0)},
                 {"last", Value::boolean(i == n - 1)},
                 {"length", Value::integer(n)},
                 {"depth", Value::integer(1)},
                 {"depth0", Value::integer(0)},
                 {"previtem", i > 0 ? at(i - 1) : Value::undefined("there is no previous item")},
                 {"nextitem", i + 1 < n ? at(i + 1) : Value::undefined("there is no next item")}};
    loop.emplace_back("cycle", Value::callable("cycle", [i](const CallArgs& args) {
                        if (args.positional.empty()) throw EvalError("no items for cycling given");
                        return args.positional[static_cast<size_t>(i) % args.positional.size()];
                      }));
    return Value::dict(std::move(loop));
  }

  void exec_set(const Node& node, const ScopePtr& scope) {
    Value value = eval(*node.kids[0], scope);
    if (node.name.empty()) {
      bind(node.names, value, *scope);
      return;
    }
    const Value* target = scope->find(node.names[0]);
    if (!target || !target->is(VKind::kNamespace)) {
      fail("cannot assign attribute on non-namespace object '" + node.names[0] + "'");
    }
    target->set_attribute(node.name, std::move(value));
  }

  void define_macro(const Node& node, const ScopePtr& scope) {
    const Node* macro = &node;
    std::weak_ptr<Scope> home = scope;  // the scope holds the macro: no cycle
    scope->set(node.name, Value::callable(node.name, [this, macro, home](const CallArgs& args) {
                 return call_macro(*macro, home.lock(), args);
               }));
  }

  Value call_macro(const Node& macro, const ScopePtr& home, const CallArgs& args) {
    if (!home) fail("macro '" + macro.name + "' called after its scope ended");
    if (args.positional.size() > macro.names.size()) {
      fail("macro '" + macro.name + "' takes not more than " + std::to_string(macro.names.size()) + " argument(s)");
    }
    struct Depth {
      explicit Depth(int& d) : d(d) { ++d; }
      ~Depth() { --d; }
      int& d;
    } depth(call_depth_);
    if (call_depth_ > limits_.max_call_depth) {
      fail("macro calls nest deeper than " + std::to_string(limits_.max_call_depth) +
           " (the engine's bound for an untrusted template)");
    }
    auto scope = std::make_shared<Scope>(home);
    std::vector<bool> given(macro.names.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      scope->set(macro.names[i], args.positional[i]);
      given[i] = true;
    }
    for (const auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < macro.names.size() && macro.names[i] != key) ++i;
      if (i == macro.names.size()) fail("macro '" + macro.name + "' takes no keyword argument '" + key + "'");
      scope->set(key, value);
      given[i] = true;
    }
    for (size_t i = 0; i < macro.names.size(); ++i) {
      if (given[i]) continue;
      const Node* fallback = macro.kids[1 + i].get();
      scope->set(macro.names[i], fallback ? eval(*fallback, scope)
                                          : Value::undefined("parameter '" + macro.names[i] + "' was not provided"));
    }
    Text out;
    exec(*macro.kids[0], scope, out);
    return Value::string(std::move(out));
  }

  // ---- expressions ----

  Value eval(const Node& node, const ScopePtr& scope) {
    try {
      Value value = eval_node(node, scope);
      // What a string costs to make or to read (a subscript scans it): the render's time bound.
      if (value.is(VKind::kString)) budget_.charge(value.str().size());
      return value;
    } catch (const RaisedByTemplate& e) {
      throw RaisedError(e.what(), node.line, node.column);
    } catch (const EvalError& e) {
      throw TemplateError(e.what(), node.line, node.column);
    }
  }

  CallArgs arguments(const Node& node, const ScopePtr& scope) {
    CallArgs args;
    const size_t keywords = node.names.size();
    const size_t count = node.kids.size() - 1;
    for (size_t i = 0; i < count; ++i) {
      Value v = eval(*node.kids[1 + i], scope);
      if (i < count - keywords) {
        args.positional.push_back(std::move(v));
      } else {
        args.keyword.emplace_back(node.names[i - (count - keywords)], std::move(v));
      }
    }
    return args;
  }

  Value lookup(const std::string& name, const Scope& scope) {
    if (const Value* v = scope.find(name)) return *v;
    if (std::optional<Value> g = global(name, budget_)) return *g;
    return Value::undefined("'" + name + "' is undefined");
  }

  Value call(const Node& node, const ScopePtr& scope) {
    const Node& callee = *node.kids[0];
    if (callee.kind == Kind::kAttribute) {
      const Value object = eval(*callee.kids[0], scope);
      static const std::vector<std::string> kDictMethods = {"items", "keys", "values", "get"};
      const bool dict_method = object.is(VKind::kDict) &&
                               std::find(kDictMethods.begin(), kDictMethods.end(), callee.name) != kDictMethods.end();
      const Value* member = (object.is(VKind::kDict) || object.is(VKind::kNamespace)) && !dict_method
                                ? object.find(callee.name)
                                : nullptr;
      if (!member) return call_method(object, callee.name, arguments(node, scope), budget_);
      return call_value(*member, node, scope);
    }
    return call_value(eval(callee, scope), node, scope);
  }

  Value call_value(const Value& function, const Node& node, const ScopePtr& scope) {
    if (function.is(VKind::kUndefined)) fail(function.undefined_what());
    if (!function.is(VKind::kCallable)) fail("'" + function.type_name() + "' object is not callable");
    return function.function().call(arguments(node, scope));
  }

  bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    const int c = compare(a, b);
    return op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
  }

  Value eval_node(const Node& node, const ScopePtr& scope) {
    switch (node.kind) {
      case Kind::kLiteral:
        return node.literal;
      case Kind::kName:
        return lookup(node.name, *scope);
      case Kind::kList: {
        List items;
        for (const auto& kid : node.kids) items.push_back(eval(*kid, scope));
        return node.tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Kind::kDict: {
        Dict entries;
        for (size_t i = 0; i + 1 < node.kids.size(); i += 2) {
          const Value key = eval(*node.kids[i], scope);
          if (!key.is(VKind::kString)) fail("this template engine's dict keys are strings, not " + key.type_name());
          entries.emplace_back(key.str(), eval(*node.kids[i + 1], scope));
        }
        return Value::dict(std::move(entries));
      }
      case Kind::kAttribute:
        return attribute(eval(*node.kids[0], scope), node.name);
      case Kind::kItem: {
        const Value target = eval(*node.kids[0], scope);
        if (target.is(VKind::kString)) budget_.charge(target.str().size());
        return subscript(target, eval(*node.kids[1], scope));
      }
      case Kind::kSlice: {
        const auto part = [&](size_t i) { return node.kids[i] ? eval(*node.kids[i], scope) : Value::none(); };
        const Value target = eval(*node.kids[0], scope);
        if (target.is(VKind::kString)) budget_.charge(target.str().size());
        return slice(target, part(1), part(2), part(3));
      }
      case Kind::kCall:
        return call(node, scope);
      case Kind::kFilter:
        return apply_filter(node.name, eval(*node.kids[0], scope), arguments(node, scope), budget_);
      case Kind::kTest:
        return Value::boolean(apply_test(node.name, eval(*node.kids[0], scope), arguments(node, scope)) !=
                              node.negated);
      case Kind::kNot:
        return Value::boolean(!eval(*node.kids[0], scope).truthy());
      case Kind::kNegate:
        return negate(eval(*node.kids[0], scope));
      case Kind::kPlus: {
        Value v = eval(*node.kids[0], scope);
        if (!v.is_number()) fail("bad operand type for unary +: '" + v.type_name() + "'");
        return v.is(VKind::kBool) ? Value::integer(v.as_int()) : v;
      }
      case Kind::kBinary:
        return binary(node.name, eval(*node.kids[0], scope), eval(*node.kids[1], scope), budget_);
      case Kind::kAnd: {
        Value left = eval(*node.kids[0], scope);
        return left.truthy() ? eval(*node.kids[1], scope) : left;
      }
      case Kind::kOr: {
        Value left = eval(*node.kids[0], scope);
        return left.truthy() ? left : eval(*node.kids[1], scope);
      }
      case Kind::kCompare: {
        Value left = eval(*node.kids[0], scope);
        for (size_t i = 0; i < node.names.size(); ++i) {
          Value right = eval(*node.kids[i + 1], scope);
          if (!compare_op(node.names[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Kind::kConditional:
        if (eval(*node.kids[1], scope).truthy()) return eval(*node.kids[0], scope);
        return node.kids[2] ? eval(*node.kids[2], scope) : Value::undefined("the conditional expression has no else");
      default:
        fail("a statement where an expression belongs");
    }
  }

  const Limits& limits_;
  Budget budget_;
  size_t emitted_ = 0;
  std::int64_t iterations_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Program::Program(std::string_view source, const Limits& limits) : limits_(limits) {
  if (source.size() > limits.max_template_bytes) {
    throw TemplateError("the template is longer than " + std::to_string(limits.max_template_bytes) + " bytes", 1, 1);
  }
  root_ = parse(lex(source), ParseLimits{limits.max_nesting});
  check_names(*root_);
}

Program::~Program() = default;

Text Program::render(const Dict& variables) const { return Renderer(limits_).run(*root_, variables); }

}  // namespace hpctrain::data::jinja
