// What a chat template can do with values: Python's operators, subscripts and slices, Jinja2's
// filters and tests, the methods of str, dict and list that real templates call, and the globals
// transformers gives them (range, namespace, raise_exception). All throw EvalError, which the
// renderer places. Nothing here touches a file, the environment or the clock but strftime_now.
// Internal to data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jinja_value.h"

namespace hpctrain::data::jinja {

// raise_exception(message): the template refuses its input.
class RaisedByTemplate : public EvalError {
 public:
  using EvalError::EvalError;
};

// The sizes one render may make: a string's bytes, a list's items (range()'s too), and the bytes
// of strings it makes and reads all together, which bounds its time.
struct Budget {
  size_t max_string_bytes = size_t{16} << 20;
  size_t max_items = 1'000'000;
  size_t max_work_bytes = size_t{1} << 30;
  void check_string(size_t bytes) const;
  void check_items(size_t count) const;
  void charge(size_t bytes) const;

 private:
  mutable size_t work_ = 0;
};

// Arguments bound to a signature by position or keyword; an unknown keyword, a repeat or one too
// many is an EvalError naming `function`.
class Arguments {
 public:
  Arguments(const CallArgs& args, const std::string& function, const std::vector<std::string>& parameters);
  const Value* get(size_t index) const { return bound_[index] ? &*bound_[index] : nullptr; }
  Value get_or(size_t index, Value fallback) const { return bound_[index] ? *bound_[index] : std::move(fallback); }

 private:
  std::vector<std::optional<Value>> bound_;
};

// Operators: + - * / // % ** ~ (`op`), `in`, -x.
Value binary(const std::string& op, const Value& a, const Value& b, const Budget& budget);
bool contains(const Value& container, const Value& item);
Value negate(const Value& a);
// x[key] (an index, negative ones too, or a dict key) and x.name as Jinja2 reads them: a missing
// item is undefined, not an error.
Value subscript(const Value& target, const Value& key);
Value attribute(const Value& target, const std::string& name);
Value slice(const Value& target, const Value& start, const Value& stop, const Value& step);
// What `for` walks: a list's items, a dict's keys, a string's characters; undefined is empty.
List iterate(const Value& value);
// Python's len().
std::int64_t length(const Value& value);

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args, const Budget& budget);
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);
// object.name(args): str, dict and list methods.
Value call_method(const Value& object, const std::string& name, const CallArgs& args, const Budget& budget);
// range, namespace, dict, raise_exception, strftime_now.
std::optional<Value> global(const std::string& name, const Budget& budget);

// String work the filters and the methods share; each keeps the tags of the bytes it keeps.
enum class Case { kUpper, kLower, kCapitalize, kTitle, kJinjaTitle };
Text change_case(const Text& text, Case to);
// str.strip(chars) (left, right or both); `chars` none or undefined: whitespace.
Text strip(const Text& text, const Value& chars, bool left, bool right);
// str.split(sep, maxsplit); `sep` none: runs of whitespace.
List split(const Text& text, const Value& sep, std::int64_t max_split);

}  // namespace hpctrain::data::jinja
