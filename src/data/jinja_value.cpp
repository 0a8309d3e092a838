// Jinja2's values with Python's semantics for printing, equality, order and JSON.
#include "jinja_value.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "utf8.h"

namespace hpctrain::data::jinja {

void Text::append(const Text& other) {
  const size_t shift = bytes.size();
  bytes += other.bytes;
  for (const TagSpan& span : other.tags) {
    if (!tags.empty() && tags.back().end == span.begin + shift && tags.back().tag == span.tag) {
      tags.back().end = span.end + shift;
    } else {
      tags.push_back({span.begin + shift, span.end + shift, span.tag});
    }
  }
}

Text Text::slice(size_t begin, size_t end) const {
  Text out{bytes.substr(begin, end - begin), {}};
  for (const TagSpan& span : tags) {
    const size_t b = std::max(span.begin, begin);
    const size_t e = std::min(span.end, end);
    if (b < e) out.tags.push_back({b - begin, e - begin, span.tag});
  }
  return out;
}

Text Text::tagged(std::string bytes, int tag) {
  Text out{std::move(bytes), {}};
  if (tag >= 0 && !out.bytes.empty()) out.tags.push_back({0, out.bytes.size(), tag});
  return out;
}

Value Value::undefined(std::string what) {
  Value v;
  v.text_ = std::make_shared<const Text>(Text{std::move(what), {}});
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool value) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = value;
  v.int_ = value ? 1 : 0;
  return v;
}

Value Value::integer(std::int64_t value) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = value;
  return v;
}

Value Value::number(double value) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = value;
  return v;
}

Value Value::string(Text text) {
  Value v;
  v.kind_ = Kind::kString;
  v.text_ = std::make_shared<const Text>(std::move(text));
  return v;
}

void Value::set_depth(const Value& child) {
  if (child.depth_ + 1 > kMaxDepth) {
    throw EvalError("a value nests deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  depth_ = std::max<std::uint8_t>(depth_, static_cast<std::uint8_t>(child.depth_ + 1));
  holds_namespace_ = holds_namespace_ || child.holds_namespace_ || child.is(Kind::kNamespace);
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  for (const Value& item : items) v.set_depth(item);
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::dict(Dict entries) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& entry : entries) v.set_depth(entry.second);
  v.dict_ = std::make_shared<Dict>(std::move(entries));
  return v;
}

Value Value::name_space(Dict entries) {
  Value v = dict(std::move(entries));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::callable(std::string name, std::function<Value(const CallArgs&)> call) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_;
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !text_->bytes.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    default:
      return true;
  }
}

std::int64_t Value::as_int() const { return kind_ == Kind::kFloat ? static_cast<std::int64_t>(float_) : int_; }
double Value::as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }

const Text& Value::text() const {
  static const Text empty;
  return kind_ == Kind::kString ? *text_ : empty;
}

const List& Value::items() const {
  static const List empty;
  return kind_ == Kind::kList ? *list_ : empty;
}

const Dict& Value::entries() const {
  static const Dict empty;
  return dict_ ? *dict_ : empty;
}

const Value* Value::find(std::string_view key) const {
  if (!dict_) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set_attribute(const std::string& key, Value value) const {
  if (value.holds_namespace_ || value.is(Kind::kNamespace)) {
    throw EvalError("a namespace attribute cannot hold a namespace in this template engine");
  }
  if (value.depth_ + 1 > kMaxDepth)
    throw EvalError("a value nests deeper than " + std::to_string(kMaxDepth) + " levels");
  for (auto& [k, v] : *dict_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  dict_->emplace_back(key, std::move(value));
}

const std::string& Value::undefined_what() const {
  static const std::string unnamed = "a value is undefined";
  return text_ ? text_->bytes : unnamed;
}

std::string Value::type_name() const {
  static const char* const kNames[] = {"Undefined", "NoneType", "bool", "int",       "float",
                                       "str",       "list",     "dict", "Namespace", "function"};
  return kNames[static_cast<int>(kind_)];
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*e", precision - 1, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  // buffer: [-]d[.ddd]e[+-]XX
  std::string s(buffer);
  const size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) digits += s[i];
  }
  const std::string sign = value < 0 || std::signbit(value) ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp;
  }
  std::string fixed;
  if (exponent < 0) {
    fixed = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const size_t point = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= point) {
      fixed = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      fixed = digits.substr(0, point) + "." + digits.substr(point);
    }
  }
  return sign + fixed;
}

namespace {

// Python's str.isprintable() for one code point.
bool printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = next_code_point(s, i);
    char escape[16];
    if (c == '\\' || c == static_cast<char32_t>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c)) {
      out.append(s, start, i - start);
    } else {
      std::snprintf(escape, sizeof escape,
                    c < 0x100     ? "\\x%02x"
                    : c < 0x10000 ? "\\u%04x"
                                  : "\\U%08x",
                    static_cast<unsigned>(c));
      out += escape;
    }
  }
  return out + quote;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof escape, "\\u%04x", c);
          out += escape;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void json_value(const Value& value, int indent, bool sort_keys, int level, std::string& out) {
  const auto newline = [&](int depth) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * depth), ' ');
  };
  const std::string comma = indent >= 0 ? "," : ", ";
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += value.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(value.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = value.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::kString:
      json_string(value.str(), out);
      return;
    case Value::Kind::kList: {
      if (value.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out += comma;
        newline(level + 1);
        json_value(value.items()[i], indent, sort_keys, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (value.entries().empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.entries()) entries.push_back(&entry);
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += comma;
        newline(level + 1);
        json_string(entries[i]->first, out);
        out += ": ";
        json_value(entries[i]->second, indent, sort_keys, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      throw EvalError("Object of type " + value.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.as_int());
    case Value::Kind::kFloat:
      return float_repr(value.as_double());
    case Value::Kind::kString:
      return string_repr(value.str());
    case Value::Kind::kList: {
      const List& items = value.items();
      std::string out = value.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) out += (i > 0 ? ", " : "") + repr(items[i]);
      if (value.is_tuple()) return out + (items.size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out = value.is(Value::Kind::kNamespace) ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : value.entries()) {
        out += (first ? "" : ", ") + string_repr(k) + ": " + repr(v);
        first = false;
      }
      return out + (value.is(Value::Kind::kNamespace) ? "}>" : "}");
    }
    case Value::Kind::kCallable:
      return "<function " + value.function().name + ">";
  }
  return "";
}

Text to_text(const Value& value) {
  if (value.is(Value::Kind::kString)) return value.text();
  return Text{repr(value), {}};
}

bool equal(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is(Kind::kFloat) || b.is(Kind::kFloat)) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList:
      return a.items().size() == b.items().size() &&
             std::equal(a.items().begin(), a.items().end(), b.items().begin(), equal);
    case Kind::kDict:
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [k, v] : a.entries()) {
        const Value* other = b.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    default:
      return &a.entries() == &b.entries() && (!a.is(Kind::kCallable) || &a.function() == &b.function());
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double();
    const double y = b.as_double();
    if (!a.is(Value::Kind::kFloat) && !b.is(Value::Kind::kFloat))
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    return x < y ? -1 : x > y;
  }
  if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) {
    const int c = a.str().compare(b.str());  // UTF-8 keeps code point order
    return c < 0 ? -1 : c > 0;
  }
  if (a.is(Value::Kind::kList) && b.is(Value::Kind::kList)) {
    const List& x = a.items();
    const List& y = b.items();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!equal(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  throw EvalError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

namespace {

Value from_json_at(const nlohmann::ordered_json& json, int tag, int depth) {
  constexpr int kMaxDepth = 64;
  if (depth > kMaxDepth) throw EvalError("a value nests deeper than " + std::to_string(kMaxDepth) + " levels");
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      if (json.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return Value::number(json.get<double>());
      return Value::integer(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(Text::tagged(json.get<std::string>(), tag));
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& item : json) items.push_back(from_json_at(item, tag, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict entries;
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, from_json_at(item, tag, depth + 1));
      return Value::dict(std::move(entries));
    }
    default:
      return Value::none();
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& json, int tag) { return from_json_at(json, tag, 0); }

std::string to_json(const Value& value, int indent, bool sort_keys) {
  std::string out;
  json_value(value, indent, sort_keys, 0, out);
  return out;
}

std::vector<size_t> code_point_offsets(std::string_view utf8) {
  std::vector<size_t> offsets;
  offsets.reserve(utf8.size() + 1);
  for (size_t i = 0; i < utf8.size();) {
    offsets.push_back(i);
    next_code_point(utf8, i);
  }
  offsets.push_back(utf8.size());
  return offsets;
}

}  // namespace hpctrain::data::jinja
