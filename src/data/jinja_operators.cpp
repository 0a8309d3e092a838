// Python's operators, subscripts and slices over chat-template values, as Jinja2 evaluates them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "jinja_builtins.h"
#include "utf8.h"

namespace hpctrain::data::jinja {

void Budget::check_string(size_t bytes) const {
  charge(bytes);
  if (bytes > max_string_bytes) {
    throw EvalError("a string of more than " + std::to_string(max_string_bytes) +
                    " bytes (the engine's bound for an untrusted template)");
  }
}

void Budget::charge(size_t bytes) const {
  work_ += bytes;
  if (work_ > max_work_bytes) {
    throw EvalError("the template handles more than " + std::to_string(max_work_bytes) +
                    " bytes of strings (the engine's bound for an untrusted template)");
  }
}

void Budget::check_items(size_t count) const {
  if (count > max_items) {
    throw EvalError("a list of more than " + std::to_string(max_items) +
                    " items (the engine's bound for an untrusted template)");
  }
}

Arguments::Arguments(const CallArgs& args, const std::string& function, const std::vector<std::string>& parameters)
    : bound_(parameters.size()) {
  if (args.positional.size() > parameters.size()) {
    throw EvalError(function + "() takes at most " + std::to_string(parameters.size()) + " arguments (" +
                    std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < parameters.size() && parameters[i] != key) ++i;
    if (i == parameters.size()) throw EvalError(function + "() got an unexpected keyword argument '" + key + "'");
    if (bound_[i]) throw EvalError(function + "() got multiple values for argument '" + key + "'");
    bound_[i] = value;
  }
}

namespace {

using Kind = Value::Kind;

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is(Kind::kUndefined)) throw EvalError(a.undefined_what());
  if (b.is(Kind::kUndefined)) throw EvalError(b.undefined_what());
  if (op == "+" && a.is(Kind::kString)) {
    throw EvalError("can only concatenate str (not \"" + b.type_name() + "\") to str");
  }
  throw EvalError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::int64_t checked(long double exact, const std::string& op) {
  if (exact > static_cast<long double>(std::numeric_limits<std::int64_t>::max()) ||
      exact < static_cast<long double>(std::numeric_limits<std::int64_t>::min())) {
    throw EvalError("integer overflow in " + op + " (this engine's integers have 64 bits)");
  }
  return static_cast<std::int64_t>(exact);
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool floats = a.is(Kind::kFloat) || b.is(Kind::kFloat);
  if (op == "/") {
    if (b.as_double() == 0) throw EvalError("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (floats) {
    const double x = a.as_double();
    const double y = b.as_double();
    if ((op == "//" || op == "%") && y == 0) throw EvalError("float division by zero");
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") return Value::number(x - std::floor(x / y) * y);
    return Value::number(std::pow(x, y));
  }
  const std::int64_t x = a.as_int();
  const std::int64_t y = b.as_int();
  const auto lx = static_cast<long double>(x);
  const auto ly = static_cast<long double>(y);
  if (op == "+") return Value::integer(checked(lx + ly, op));
  if (op == "-") return Value::integer(checked(lx - ly, op));
  if (op == "*") return Value::integer(checked(lx * ly, op));
  if (op == "//" || op == "%") {
    if (y == 0) throw EvalError("integer division or modulo by zero");
    if (x == std::numeric_limits<std::int64_t>::min() && y == -1) throw EvalError("integer overflow in " + op);
    std::int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
    return Value::integer(op == "//" ? q : x - q * y);
  }
  if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
  if (x == 0 || x == 1) return Value::integer(y == 0 ? 1 : x);
  if (x == -1) return Value::integer(y % 2 == 0 ? 1 : -1);
  long double power = 1;  // |x| >= 2: at most 64 multiplications before it overflows
  for (std::int64_t i = 0; i < y && power != 0 && std::fabs(power) < 1e19L; ++i) power *= lx;
  return Value::integer(checked(power, op));
}

Value repeat(const Value& sequence, std::int64_t times, const Budget& budget) {
  const size_t n = times > 0 ? static_cast<size_t>(times) : 0;
  const size_t unit = sequence.is(Kind::kString) ? sequence.str().size() : sequence.items().size();
  const size_t total = unit > 0 && n > SIZE_MAX / unit ? SIZE_MAX : unit * n;
  if (sequence.is(Kind::kString)) {
    budget.check_string(total);
    Text out;
    for (size_t i = 0; i < n; ++i) out.append(sequence.text());
    return Value::string(std::move(out));
  }
  budget.check_items(total);
  List out;
  for (size_t i = 0; i < n; ++i) out.insert(out.end(), sequence.items().begin(), sequence.items().end());
  return Value::list(std::move(out));
}

}  // namespace

Value binary(const std::string& op, const Value& a, const Value& b, const Budget& budget) {
  if (op == "~") {
    Text out = to_text(a);
    out.append(to_text(b));
    budget.check_string(out.bytes.size());
    return Value::string(std::move(out));
  }
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+" && a.is(Kind::kString) && b.is(Kind::kString)) {
    Text out = a.text();
    out.append(b.text());
    budget.check_string(out.bytes.size());
    return Value::string(std::move(out));
  }
  if (op == "+" && a.is(Kind::kList) && b.is(Kind::kList)) {
    List out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    budget.check_items(out.size());
    return Value::list(std::move(out));
  }
  if (op == "*") {
    const bool sequence_a = a.is(Kind::kString) || a.is(Kind::kList);
    const bool sequence_b = b.is(Kind::kString) || b.is(Kind::kList);
    if (sequence_a && (b.is(Kind::kInt) || b.is(Kind::kBool))) return repeat(a, b.as_int(), budget);
    if (sequence_b && (a.is(Kind::kInt) || a.is(Kind::kBool))) return repeat(b, a.as_int(), budget);
  }
  unsupported(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is(Kind::kString)) {
        throw EvalError("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.items()) {
        if (equal(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      return item.is(Kind::kString) && container.find(item.str()) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value negate(const Value& a) {
  if (a.is(Kind::kFloat)) return Value::number(-a.as_double());
  if (a.is_number()) return Value::integer(checked(-static_cast<long double>(a.as_int()), "-"));
  if (a.is(Kind::kUndefined)) throw EvalError(a.undefined_what());
  throw EvalError("bad operand type for unary -: '" + a.type_name() + "'");
}

Value subscript(const Value& target, const Value& key) {
  if (target.is(Kind::kUndefined)) throw EvalError(target.undefined_what());
  if (target.is(Kind::kDict) || target.is(Kind::kNamespace)) {
    const Value* found = key.is(Kind::kString) ? target.find(key.str()) : nullptr;
    return found ? *found : Value::undefined("'dict object' has no attribute " + repr(key));
  }
  if ((target.is(Kind::kList) || target.is(Kind::kString)) && (key.is(Kind::kInt) || key.is(Kind::kBool))) {
    const bool is_string = target.is(Kind::kString);
    const std::vector<size_t> offsets = is_string ? code_point_offsets(target.str()) : std::vector<size_t>{};
    const std::int64_t size =
        is_string ? static_cast<std::int64_t>(offsets.size()) - 1 : static_cast<std::int64_t>(target.items().size());
    const std::int64_t i = key.as_int() < 0 ? key.as_int() + size : key.as_int();
    if (i < 0 || i >= size) {
      return Value::undefined(std::string(is_string ? "str" : "list") + " object has no element " + repr(key));
    }
    const auto k = static_cast<size_t>(i);
    return is_string ? Value::string(target.text().slice(offsets[k], offsets[k + 1])) : target.items()[k];
  }
  if (key.is(Kind::kString)) return attribute(target, key.str());
  return Value::undefined("'" + target.type_name() + " object' has no attribute " + repr(key));
}

Value attribute(const Value& target, const std::string& name) {
  if (target.is(Kind::kUndefined)) throw EvalError(target.undefined_what());
  if (target.is(Kind::kDict) || target.is(Kind::kNamespace)) {
    if (const Value* found = target.find(name)) return *found;
  }
  return Value::undefined("'" + target.type_name() + " object' has no attribute '" + name + "'");
}

namespace {

std::int64_t slice_bound(const Value& v, std::int64_t fallback, std::int64_t size, bool negative_step) {
  if (v.is(Kind::kUndefined) || v.is(Kind::kNone)) return fallback;
  if (!v.is(Kind::kInt) && !v.is(Kind::kBool)) throw EvalError("slice indices must be integers or None");
  std::int64_t i = v.as_int();
  if (i < 0) i += size;
  const std::int64_t low = negative_step ? -1 : 0;
  const std::int64_t high = negative_step ? size - 1 : size;
  return std::max(low, std::min(i, high));
}

}  // namespace

Value slice(const Value& target, const Value& start, const Value& stop, const Value& step) {
  if (target.is(Kind::kUndefined)) throw EvalError(target.undefined_what());
  const bool is_string = target.is(Kind::kString);
  if (!is_string && !target.is(Kind::kList)) {
    return Value::undefined("'" + target.type_name() + "' object is not subscriptable");
  }
  const std::vector<size_t> offsets = is_string ? code_point_offsets(target.str()) : std::vector<size_t>{};
  const std::int64_t size =
      is_string ? static_cast<std::int64_t>(offsets.size()) - 1 : static_cast<std::int64_t>(target.items().size());
  std::int64_t by = 1;
  if (!step.is(Kind::kUndefined) && !step.is(Kind::kNone)) {
    if (!step.is(Kind::kInt)) throw EvalError("slice indices must be integers or None");
    by = std::max(step.as_int(), -std::numeric_limits<std::int64_t>::max());  // -by must exist
    if (by == 0) throw EvalError("slice step cannot be zero");
  }
  const bool back = by < 0;
  const std::int64_t from = slice_bound(start, back ? size - 1 : 0, size, back);
  const std::int64_t to = slice_bound(stop, back ? -1 : size, size, back);
  Text text;
  List items;
  for (std::int64_t i = from; back ? i > to : i < to; i += by) {
    const auto k = static_cast<size_t>(i);
    if (is_string) {
      text.append(target.text().slice(offsets[k], offsets[k + 1]));
    } else {
      items.push_back(target.items()[k]);
    }
    if (back ? i - to <= -by : to - i <= by) break;  // the next step would pass `to` (or overflow)
  }
  return is_string ? Value::string(std::move(text)) : Value::list(std::move(items));
}

List iterate(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      return value.items();
    case Kind::kDict: {
      List keys;
      for (const auto& entry : value.entries()) keys.push_back(Value::string(entry.first));
      return keys;
    }
    case Kind::kString: {
      const std::vector<size_t> offsets = code_point_offsets(value.str());
      List chars;
      for (size_t k = 0; k + 1 < offsets.size(); ++k) {
        chars.push_back(Value::string(value.text().slice(offsets[k], offsets[k + 1])));
      }
      return chars;
    }
    default:
      throw EvalError("'" + value.type_name() + "' object is not iterable");
  }
}

std::int64_t length(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<std::int64_t>(code_point_offsets(value.str()).size()) - 1;
    case Kind::kList:
      return static_cast<std::int64_t>(value.items().size());
    case Kind::kDict:
    case Kind::kNamespace:
      return static_cast<std::int64_t>(value.entries().size());
    default:
      throw EvalError("object of type '" + value.type_name() + "' has no len()");
  }
}

}  // namespace hpctrain::data::jinja
