// The methods of str, dict and list a chat template may call (none that mutates: transformers
// renders in Jinja2's immutable sandbox), the string work behind them, and the globals.
#include <utf8proc.h>

#include <ctime>

#include "jinja_builtins.h"
#include "jinja_lexer.h"
#include "utf8.h"

namespace hpctrain::data::jinja {
namespace {

using Kind = Value::Kind;

bool cased(char32_t c) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT;
}

// Python's full upper case of U+00DF (ß) is "SS"; other code points take utf8proc's simple mapping.
void append_upper(char32_t c, std::string& out) {
  if (c == 0xDF) {
    out += "SS";
  } else {
    append_utf8(static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))), out);
  }
}

char32_t upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

int tag_at(const Text& text, size_t offset) {
  for (const TagSpan& span : text.tags) {
    if (span.begin <= offset && offset < span.end) return span.tag;
  }
  return -1;
}

bool jinja_word_break(char32_t c) {
  return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
}

std::string text_of(const Value& v, const char* what) {
  if (!v.is(Kind::kString)) throw EvalError(std::string(what) + " must be str, not " + v.type_name());
  return v.str();
}

Value string_method(const Value& object, const std::string& name, const CallArgs& args, const Budget& budget) {
  const Text& text = object.text();
  const std::string& s = text.bytes;
  if (name == "startswith" || name == "endswith") {
    const Arguments a(args, name, {"prefix"});
    const Value& prefix = a.get_or(0, Value::none());
    List options = prefix.is(Kind::kList) ? prefix.items() : List{prefix};
    for (const Value& option : options) {
      const std::string p = text_of(option, (name + " first arg").c_str());
      const bool hit =
          p.size() <= s.size() &&
          (name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Arguments a(args, name, {"chars"});
    return Value::string(strip(text, a.get_or(0, Value::none()), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    if (name == "rsplit" && !args.positional.empty() && args.positional.size() + args.keyword.size() > 1) {
      throw EvalError("rsplit with maxsplit is not supported by this template engine");
    }
    const Arguments a(args, name, {"sep", "maxsplit"});
    return Value::list(split(text, a.get_or(0, Value::none()), a.get_or(1, Value::integer(-1)).as_int()));
  }
  static const std::pair<const char*, Case> kCases[] = {
      {"upper", Case::kUpper}, {"lower", Case::kLower}, {"capitalize", Case::kCapitalize}, {"title", Case::kTitle}};
  for (const auto& [method, to] : kCases) {
    if (name == method) {
      const Arguments a(args, name, {});
      return Value::string(change_case(text, to));
    }
  }
  if (name == "replace") {
    const Arguments a(args, name, {"old", "new", "count"});
    CallArgs forwarded;
    forwarded.positional = {a.get_or(0, Value::none()), a.get_or(1, Value::none())};
    if (a.get(2)) forwarded.positional.push_back(*a.get(2));
    return apply_filter("replace", object, forwarded, budget);
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const Arguments a(args, name, {"sub"});
    const std::string sub = text_of(a.get_or(0, Value::none()), name.c_str());
    if (name == "count") {
      if (sub.empty()) return Value::integer(length(object) + 1);
      std::int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
    if (at == std::string::npos) return Value::integer(-1);
    return Value::integer(length(Value::string(s.substr(0, at))));
  }
  if (name == "join") {
    const Arguments a(args, name, {"iterable"});
    CallArgs forwarded;
    forwarded.positional = {object};
    return apply_filter("join", a.get_or(0, Value::list({})), forwarded, budget);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
    const Arguments a(args, name, {});
    if (s.empty()) return Value::boolean(false);
    for (size_t i = 0; i < s.size();) {
      const char32_t c = next_code_point(s, i);
      const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      const bool letter = category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
      const bool digit = category == UTF8PROC_CATEGORY_ND;
      const bool ok = name == "isdigit"   ? digit
                      : name == "isalpha" ? letter
                      : name == "isalnum" ? letter || digit
                                          : is_python_space(c);
      if (!ok) return Value::boolean(false);
    }
    return Value::boolean(true);
  }
  throw EvalError("'str' object has no method '" + name + "' this template engine allows");
}

Value dict_method(const Value& object, const std::string& name, const CallArgs& args) {
  if (name == "items" || name == "keys" || name == "values") {
    const Arguments a(args, name, {});
    List out;
    for (const auto& [key, value] : object.entries()) {
      if (name == "items") out.push_back(Value::tuple({Value::string(key), value}));
      if (name == "keys") out.push_back(Value::string(key));
      if (name == "values") out.push_back(value);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    const Arguments a(args, name, {"key", "default"});
    const Value key = a.get_or(0, Value::none());
    const Value* found = key.is(Kind::kString) ? object.find(key.str()) : nullptr;
    return found ? *found : a.get_or(1, Value::none());
  }
  throw EvalError("'dict' object has no method '" + name + "' this template engine allows");
}

Value list_method(const Value& object, const std::string& name, const CallArgs& args) {
  const Arguments a(args, name, {"value"});
  const Value item = a.get_or(0, Value::none());
  if (name == "index" || name == "count") {
    std::int64_t n = 0;
    for (size_t i = 0; i < object.items().size(); ++i) {
      if (!equal(object.items()[i], item)) continue;
      if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
      ++n;
    }
    if (name == "index") throw EvalError(repr(item) + " is not in list");
    return Value::integer(n);
  }
  throw EvalError("'list' object has no method '" + name + "' this template engine allows");
}

}  // namespace

Text change_case(const Text& text, Case to) {
  Text out;
  bool previous_cased = false;
  bool word_start = true;
  bool first = true;
  for (size_t i = 0; i < text.bytes.size();) {
    const size_t start = i;
    const char32_t c = next_code_point(text.bytes, i);
    char32_t mapped = c;
    switch (to) {
      case Case::kUpper:
        mapped = upper(c);
        break;
      case Case::kLower:
        mapped = lower(c);
        break;
      case Case::kCapitalize:
        mapped = first ? title(c) : lower(c);
        break;
      case Case::kTitle:
        mapped = previous_cased ? lower(c) : title(c);
        previous_cased = cased(c);
        break;
      case Case::kJinjaTitle:
        mapped = jinja_word_break(c) ? c : word_start ? upper(c) : lower(c);
        word_start = jinja_word_break(c);
        break;
    }
    first = false;
    std::string bytes;
    if (to == Case::kUpper) {
      append_upper(c, bytes);
    } else {
      append_utf8(mapped, bytes);
    }
    out.append(Text::tagged(std::move(bytes), tag_at(text, start)));
  }
  return out;
}

Text strip(const Text& text, const Value& chars, bool left, bool right) {
  const bool whitespace = chars.is(Kind::kNone) || chars.is(Kind::kUndefined);
  const std::string set = whitespace ? std::string() : text_of(chars, "strip arg");
  const std::vector<size_t> set_offsets = code_point_offsets(set);
  const auto removable = [&](char32_t c) {
    if (whitespace) return is_python_space(c);
    for (size_t k = 0; k + 1 < set_offsets.size(); ++k) {
      size_t i = set_offsets[k];
      if (next_code_point(set, i) == c) return true;
    }
    return false;
  };
  const std::vector<size_t> offsets = code_point_offsets(text.bytes);
  size_t begin = 0;
  size_t end = offsets.size() - 1;
  const auto char_at = [&](size_t k) {
    size_t i = offsets[k];
    return next_code_point(text.bytes, i);
  };
  while (left && begin < end && removable(char_at(begin))) ++begin;
  while (right && end > begin && removable(char_at(end - 1))) --end;
  return text.slice(offsets[begin], offsets[end]);
}

List split(const Text& text, const Value& sep, std::int64_t max_split) {
  const std::string& s = text.bytes;
  List out;
  if (!sep.is(Kind::kNone) && !sep.is(Kind::kUndefined)) {
    const std::string separator = text_of(sep, "split separator");
    if (separator.empty()) throw EvalError("empty separator");
    size_t from = 0;
    for (size_t at = s.find(separator);
         at != std::string::npos && (max_split < 0 || static_cast<std::int64_t>(out.size()) < max_split);
         at = s.find(separator, from)) {
      out.push_back(Value::string(text.slice(from, at)));
      from = at + separator.size();
    }
    out.push_back(Value::string(text.slice(from, s.size())));
    return out;
  }
  const std::vector<size_t> offsets = code_point_offsets(s);
  const auto space = [&](size_t k) {
    size_t i = offsets[k];
    return is_python_space(next_code_point(s, i));
  };
  size_t k = 0;
  const size_t n = offsets.size() - 1;
  while (true) {
    while (k < n && space(k)) ++k;
    if (k == n) break;
    if (max_split >= 0 && static_cast<std::int64_t>(out.size()) == max_split) {
      out.push_back(Value::string(text.slice(offsets[k], s.size())));  // Python keeps its trailing space
      break;
    }
    const size_t begin = k;
    while (k < n && !space(k)) ++k;
    out.push_back(Value::string(text.slice(offsets[begin], offsets[k])));
  }
  return out;
}

Value call_method(const Value& object, const std::string& name, const CallArgs& args, const Budget& budget) {
  switch (object.kind()) {
    case Kind::kString:
      return string_method(object, name, args, budget);
    case Kind::kDict:
      return dict_method(object, name, args);
    case Kind::kList:
      return list_method(object, name, args);
    case Kind::kUndefined:
      throw EvalError(object.undefined_what());
    default:
      throw EvalError("'" + object.type_name() + "' object has no method '" + name + "'");
  }
}

namespace {

Value range(const CallArgs& args, const Budget& budget) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    throw EvalError("range() takes 1 to 3 integer arguments");
  }
  std::int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (!args.positional[i].is(Kind::kInt)) throw EvalError("range() takes integers");
  }
  if (args.positional.size() == 1) {
    bounds[1] = args.positional[0].as_int();
  } else {
    for (size_t i = 0; i < args.positional.size(); ++i) bounds[i] = args.positional[i].as_int();
  }
  const auto [start, stop, step] = bounds;
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  const long double count = step > 0 ? (static_cast<long double>(stop) - start + step - 1) / step
                                     : (static_cast<long double>(start) - stop - step - 1) / -step;
  if (count > static_cast<long double>(budget.max_items)) budget.check_items(budget.max_items + 1);
  List out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
  return Value::list(std::move(out));
}

Dict keyword_dict(const CallArgs& args, const std::string& function) {
  Dict entries;
  if (args.positional.size() > 1) throw EvalError(function + "() takes at most one positional argument");
  if (!args.positional.empty()) {
    if (!args.positional[0].is(Kind::kDict)) throw EvalError(function + "() takes a dict");
    entries = args.positional[0].entries();
  }
  for (const auto& entry : args.keyword) entries.push_back(entry);
  return entries;
}

}  // namespace

std::optional<Value> global(const std::string& name, const Budget& budget) {
  if (name == "range") return Value::callable("range", [budget](const CallArgs& a) { return range(a, budget); });
  if (name == "namespace") {
    return Value::callable("namespace",
                           [](const CallArgs& a) { return Value::name_space(keyword_dict(a, "namespace")); });
  }
  if (name == "dict")
    return Value::callable("dict", [](const CallArgs& a) { return Value::dict(keyword_dict(a, "dict")); });
  if (name == "raise_exception") {
    return Value::callable("raise_exception", [](const CallArgs& a) -> Value {
      const Arguments bound(a, "raise_exception", {"message"});
      throw RaisedByTemplate(to_text(bound.get_or(0, Value::string(""))).bytes);
    });
  }
  if (name == "strftime_now") {
    // transformers' global: the local time, formatted as Python's strftime would.
    return Value::callable("strftime_now", [](const CallArgs& a) {
      const Arguments bound(a, "strftime_now", {"format"});
      const std::string format = text_of(bound.get_or(0, Value::none()), "strftime_now format");
      if (format.size() > 256) throw EvalError("strftime_now format longer than 256 bytes");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[1024];
      const size_t n = std::strftime(buffer, sizeof buffer, format.c_str(), &local);
      return Value::string(std::string(buffer, n));
    });
  }
  return std::nullopt;
}

}  // namespace hpctrain::data::jinja
