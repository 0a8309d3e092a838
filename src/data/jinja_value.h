// The values a chat template computes with, as Jinja2 (and so Python) sees them: undefined, none,
// booleans, integers, floats, strings, lists, dicts in insertion order, namespaces and callables.
// A string keeps, for each byte range that came from a tagged input, the tag (a message's index),
// through concatenation, slicing and stripping, so the rendered text says which bytes are whose.
// Internal to data.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hpctrain::data::jinja {

// A template-side error without a place yet: the renderer adds the line and column.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TagSpan {
  size_t begin = 0;
  size_t end = 0;
  int tag = 0;
};

// UTF-8 bytes and the tagged ranges among them (sorted, disjoint).
struct Text {
  std::string bytes;
  std::vector<TagSpan> tags;

  void append(const Text& other);
  void append(std::string_view plain) { bytes.append(plain); }
  // Bytes [begin, end), with their tags.
  Text slice(size_t begin, size_t end) const;
  // Every byte tagged `tag`.
  static Text tagged(std::string bytes, int tag);
};

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined, unnamed
  static Value undefined(std::string what);
  static Value none();
  static Value boolean(bool value);
  static Value integer(std::int64_t value);
  static Value number(double value);
  static Value string(Text text);
  static Value string(std::string bytes) { return string(Text{std::move(bytes), {}}); }
  static Value list(List items);
  static Value tuple(List items);  // a list that prints as Python's tuple
  static Value dict(Dict entries);
  static Value name_space(Dict entries);
  static Value callable(std::string name, std::function<Value(const CallArgs&)> call);

  Kind kind() const { return kind_; }
  bool is(Kind kind) const { return kind_ == kind; }
  bool is_tuple() const { return tuple_; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool truthy() const;

  bool as_bool() const { return bool_; }
  std::int64_t as_int() const;  // bools and ints
  double as_double() const;     // any number
  const Text& text() const;
  const std::string& str() const { return text().bytes; }
  const List& items() const;
  const Dict& entries() const;  // dicts and namespaces
  // A dict's or namespace's value for `key`, or null.
  const Value* find(std::string_view key) const;
  // A namespace's attribute, set (the only mutation a template can make). A value that holds a
  // namespace is refused: the namespace could come to hold itself.
  void set_attribute(const std::string& key, Value value) const;
  const Callable& function() const { return *callable_; }
  // What an undefined value stands for ("'x' is undefined"), for its error.
  const std::string& undefined_what() const;

  // Python's name of the type, for messages.
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  // Containers nest at most kMaxDepth deep, so printing, comparing and freeing them cannot
  // exhaust the stack.
  static constexpr int kMaxDepth = 64;
  void set_depth(const Value& child);

  bool bool_ = false;
  bool tuple_ = false;
  bool holds_namespace_ = false;
  std::uint8_t depth_ = 0;
  std::int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const Text> text_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> callable_;
};

// Python's repr() and str(); str() of a string keeps its tags.
std::string repr(const Value& value);
Text to_text(const Value& value);
// Python's float repr (the shortest round trip: 0.1, 1e-05, 1e+16, 2.0).
std::string float_repr(double value);
// Python's ==, and <'s three-way order (an EvalError where Python has no order).
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);

// JSON in; every string inside tagged `tag` (-1: untagged).
Value from_json(const nlohmann::ordered_json& json, int tag);
// Python's json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys), as
// transformers' tojson filter calls it; indent < 0 is None.
std::string to_json(const Value& value, int indent, bool sort_keys);

// Code points of UTF-8 text: each one's byte offset, and the end.
std::vector<size_t> code_point_offsets(std::string_view utf8);

}  // namespace hpctrain::data::jinja
