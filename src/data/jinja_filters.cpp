// Jinja2's filters and tests that chat templates use, with tojson as transformers defines it
// (json.dumps with ensure_ascii=False).
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "jinja_builtins.h"
#include "utf8.h"

namespace hpctrain::data::jinja {
namespace {

using Kind = Value::Kind;
using Filter = std::function<Value(const Value&, const CallArgs&, const Budget&)>;
using Test = std::function<bool(const Value&, const Arguments&)>;

std::string str_of(const Value& v) { return to_text(v).bytes; }

// seq's items, for filters that take a sequence (a string's characters, a dict's keys).
List items_of(const Value& v) { return iterate(v); }

Value attribute_path(const Value& item, const Value& path) {
  Value current = item;
  const std::string p = str_of(path);
  size_t from = 0;
  while (true) {
    const size_t dot = p.find('.', from);
    const std::string part = p.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    const bool index = !part.empty() && part.size() < 19 && part.find_first_not_of("0123456789") == std::string::npos;
    current = index ? subscript(current, Value::integer(std::stoll(part))) : subscript(current, Value::string(part));
    if (dot == std::string::npos) return current;
    from = dot + 1;
  }
}

// Jinja2 counts the matches of \w+: runs of letters, numbers and underscores.
std::int64_t word_count(const std::string& s) {
  std::int64_t words = 0;
  bool inside = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_code_point(s, i);
    const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    const bool word = c == '_' || (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
                      (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
    if (word && !inside) ++words;
    inside = word;
  }
  return words;
}

Value do_trim(const Value& v, const CallArgs& args, const Budget&) {
  const Arguments a(args, "trim", {"chars"});
  return Value::string(strip(to_text(v), a.get_or(0, Value::none()), true, true));
}

Value do_tojson(const Value& v, const CallArgs& args, const Budget& budget) {
  const Arguments a(args, "tojson", {"indent", "separators", "sort_keys"});
  const Value indent = a.get_or(0, Value::none());
  if (a.get(1) && !a.get(1)->is(Kind::kNone))
    throw EvalError("tojson's separators are not supported by this template engine");
  if (!indent.is(Kind::kNone) && !indent.is(Kind::kInt)) throw EvalError("tojson's indent must be an integer");
  const std::string json =
      to_json(v, indent.is(Kind::kInt) ? static_cast<int>(std::clamp<std::int64_t>(indent.as_int(), 0, 64)) : -1,
              a.get_or(2, Value::boolean(false)).truthy());
  budget.check_string(json.size());
  return Value::string(json);
}

Value do_replace(const Value& v, const CallArgs& args, const Budget& budget) {
  const Arguments a(args, "replace", {"old", "new", "count"});
  const Text text = to_text(v);
  const std::string old = str_of(a.get_or(0, Value::string("")));
  const Text replacement = to_text(a.get_or(1, Value::string("")));
  const Value count_value = a.get_or(2, Value::none());
  std::int64_t count = count_value.is(Kind::kNone) ? -1 : count_value.as_int();
  Text out;
  size_t from = 0;
  if (old.empty()) {  // Python inserts the replacement between every character
    const std::vector<size_t> offsets = code_point_offsets(text.bytes);
    for (size_t k = 0; k + 1 < offsets.size() && count != 0; ++k, --count) {
      out.append(replacement);
      out.append(text.slice(offsets[k], offsets[k + 1]));
      from = offsets[k + 1];
      budget.check_string(out.bytes.size());
    }
    if (count != 0) out.append(replacement);
  } else {
    for (size_t at = text.bytes.find(old); at != std::string::npos && count != 0;
         at = text.bytes.find(old, from), --count) {
      out.append(text.slice(from, at));
      out.append(replacement);
      from = at + old.size();
      budget.check_string(out.bytes.size());
    }
  }
  out.append(text.slice(from, text.bytes.size()));
  budget.check_string(out.bytes.size());
  return Value::string(std::move(out));
}

Value do_join(const Value& v, const CallArgs& args, const Budget& budget) {
  const Arguments a(args, "join", {"d", "attribute"});
  const Text separator = to_text(a.get_or(0, Value::string("")));
  Text out;
  bool first = true;
  for (const Value& item : items_of(v)) {
    if (!first) out.append(separator);
    out.append(to_text(a.get(1) ? attribute_path(item, *a.get(1)) : item));
    first = false;
    budget.check_string(out.bytes.size());
  }
  return Value::string(std::move(out));
}

Value do_default(const Value& v, const CallArgs& args, const Budget&) {
  const Arguments a(args, "default", {"default_value", "boolean"});
  const bool boolean = a.get_or(1, Value::boolean(false)).truthy();
  if (v.is(Kind::kUndefined) || (boolean && !v.truthy())) return a.get_or(0, Value::string(""));
  return v;
}

Value do_int(const Value& v, const CallArgs& args, const Budget&) {
  const Arguments a(args, "int", {"default", "base"});
  const Value fallback = a.get_or(0, Value::integer(0));
  if (v.is(Kind::kFloat)) {
    if (!std::isfinite(v.as_double()) || std::fabs(v.as_double()) > 9.2e18) return fallback;
    return Value::integer(static_cast<std::int64_t>(v.as_double()));
  }
  if (v.is_number()) return Value::integer(v.as_int());
  if (!v.is(Kind::kString)) return fallback;
  const std::string s = strip(v.text(), Value::none(), true, true).bytes;
  const int base = static_cast<int>(a.get_or(1, Value::integer(10)).as_int());
  if (s.empty() || base < 2 || base > 36) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(s.c_str(), &end, base);
  if (errno == 0 && end == s.c_str() + s.size()) return Value::integer(parsed);
  const double d = std::strtod(s.c_str(), &end);
  if (end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) {
    return Value::integer(static_cast<std::int64_t>(d));
  }
  return fallback;
}

Value do_float(const Value& v, const CallArgs& args, const Budget&) {
  const Arguments a(args, "float", {"default"});
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is(Kind::kString)) {
    const std::string s = strip(v.text(), Value::none(), true, true).bytes;
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::number(d);
  }
  return a.get_or(0, Value::number(0));
}

Value do_round(const Value& v, const CallArgs& args, const Budget&) {
  const Arguments a(args, "round", {"precision", "method"});
  const double scale = std::pow(10.0, static_cast<double>(a.get_or(0, Value::integer(0)).as_int()));
  const std::string method = str_of(a.get_or(1, Value::string("common")));
  const double x = v.as_double() * scale;
  const double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::nearbyint(x);  // half to even, as Python
  if (method != "common" && method != "ceil" && method != "floor")
    throw EvalError("method must be common, ceil or floor");
  return Value::number(r / scale);
}

Value do_escape(const Value& v, const CallArgs&, const Budget& budget) {
  std::string out;
  for (const char c : str_of(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  budget.check_string(out.size());
  return Value::string(out);
}

Value do_indent(const Value& v, const CallArgs& args, const Budget& budget) {
  const Arguments a(args, "indent", {"width", "first", "blank"});
  const Value width = a.get_or(0, Value::integer(4));
  const std::string pad = width.is(Kind::kString)
                              ? width.str()
                              : std::string(static_cast<size_t>(std::clamp<std::int64_t>(width.as_int(), 0, 256)), ' ');
  const bool first = a.get_or(1, Value::boolean(false)).truthy();
  const bool blank = a.get_or(2, Value::boolean(false)).truthy();
  const Text text = to_text(v);
  Text out;
  size_t from = 0;
  bool first_line = true;
  while (from <= text.bytes.size()) {
    const size_t newline = text.bytes.find('\n', from);
    const size_t end = newline == std::string::npos ? text.bytes.size() : newline;
    if ((!first_line || first) && (blank || end > from)) out.append(pad);
    out.append(text.slice(from, newline == std::string::npos ? end : end + 1));
    budget.check_string(out.bytes.size());
    if (newline == std::string::npos) break;
    from = newline + 1;
    first_line = false;
  }
  return Value::string(std::move(out));
}

Value do_items(const Value& v, const CallArgs&, const Budget& budget) {
  if (v.is(Kind::kUndefined)) return Value::list({});
  if (!v.is(Kind::kDict)) throw EvalError("can only get item pairs from a mapping");
  return call_method(v, "items", {}, budget);
}

// select/reject: the items for which a test (or truthiness) holds, or does not.
Value select(const Value& v, const CallArgs& args, bool by_attribute, bool keep) {
  List out;
  const size_t first_test_arg = by_attribute ? 2 : 1;
  for (const Value& item : items_of(v)) {
    const Value subject = by_attribute && !args.positional.empty() ? attribute_path(item, args.positional[0]) : item;
    bool holds;
    if (args.positional.size() >= first_test_arg) {
      CallArgs test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first_test_arg),
                                  args.positional.end());
      holds = apply_test(str_of(args.positional[first_test_arg - 1]), subject, test_args);
    } else {
      holds = subject.truthy();
    }
    if (holds == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value do_map(const Value& v, const CallArgs& args, const Budget& budget) {
  List out;
  for (const Value& item : items_of(v)) {
    if (!args.positional.empty()) {
      CallArgs filter_args;
      filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
      filter_args.keyword = args.keyword;
      out.push_back(apply_filter(str_of(args.positional[0]), item, filter_args, budget));
      continue;
    }
    const Arguments a(args, "map", {"attribute", "default"});
    if (!a.get(0)) throw EvalError("map() needs a filter name or attribute=");
    Value value = attribute_path(item, *a.get(0));
    if (value.is(Kind::kUndefined) && a.get(1)) value = *a.get(1);
    out.push_back(value);
  }
  return Value::list(std::move(out));
}

// The order sort, min and max use: by attribute, strings folded to lower case unless asked.
std::function<int(const Value&, const Value&)> ordering(const Arguments& a, size_t case_index, size_t attribute_index) {
  const bool case_sensitive = a.get_or(case_index, Value::boolean(false)).truthy();
  const Value* attribute = a.get(attribute_index);
  const Value path = attribute ? *attribute : Value::none();
  return [case_sensitive, path](const Value& x, const Value& y) {
    Value l = path.is(Kind::kNone) ? x : attribute_path(x, path);
    Value r = path.is(Kind::kNone) ? y : attribute_path(y, path);
    if (!case_sensitive && l.is(Kind::kString)) l = Value::string(change_case(l.text(), Case::kLower));
    if (!case_sensitive && r.is(Kind::kString)) r = Value::string(change_case(r.text(), Case::kLower));
    return compare(l, r);
  };
}

Value do_sort(const Value& v, const CallArgs& args, const Budget&) {
  const Arguments a(args, "sort", {"reverse", "case_sensitive", "attribute"});
  const auto order = ordering(a, 1, 2);
  const bool reverse = a.get_or(0, Value::boolean(false)).truthy();
  List items = items_of(v);
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& x, const Value& y) { return reverse ? order(y, x) < 0 : order(x, y) < 0; });
  return Value::list(std::move(items));
}

Value extreme(const Value& v, const CallArgs& args, bool largest) {
  const Arguments a(args, largest ? "max" : "min", {"case_sensitive", "attribute"});
  const auto order = ordering(a, 0, 1);
  const List items = items_of(v);
  if (items.empty()) return Value::undefined("no " + std::string(largest ? "max" : "min") + " of an empty sequence");
  const Value* best = &items[0];
  for (const Value& item : items) {
    if (largest ? order(item, *best) > 0 : order(item, *best) < 0) best = &item;
  }
  return *best;
}

Value do_sum(const Value& v, const CallArgs& args, const Budget& budget) {
  const Arguments a(args, "sum", {"attribute", "start"});
  Value total = a.get_or(1, Value::integer(0));
  for (const Value& item : items_of(v))
    total = binary("+", total, a.get(0) ? attribute_path(item, *a.get(0)) : item, budget);
  return total;
}

Value do_reverse(const Value& v, const CallArgs&, const Budget&) {
  if (v.is(Kind::kString)) return slice(v, Value::none(), Value::none(), Value::integer(-1));
  List items = items_of(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value do_dictsort(const Value& v, const CallArgs& args, const Budget& budget) {
  const Arguments a(args, "dictsort", {"case_sensitive", "by", "reverse"});
  const std::string by = str_of(a.get_or(1, Value::string("key")));
  if (by != "key" && by != "value") throw EvalError("You can only sort by either \"key\" or \"value\"");
  CallArgs sort_args;
  sort_args.keyword = {{"reverse", a.get_or(2, Value::boolean(false))},
                       {"case_sensitive", a.get_or(0, Value::boolean(false))},
                       {"attribute", Value::string(by == "key" ? "0" : "1")}};
  return do_sort(do_items(v, {}, budget), sort_args, budget);
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {
      {"abs",
       [](const Value& v, const CallArgs&, const Budget&) {
         return v.is(Kind::kFloat) ? Value::number(std::fabs(v.as_double()))
                : v.as_int() < 0   ? negate(v)
                                   : Value::integer(v.as_int());
       }},
      {"capitalize", [](const Value& v, const CallArgs&,
                        const Budget&) { return Value::string(change_case(to_text(v), Case::kCapitalize)); }},
      {"count", [](const Value& v, const CallArgs&, const Budget&) { return Value::integer(length(v)); }},
      {"d", do_default},
      {"default", do_default},
      {"dictsort", do_dictsort},
      {"e", do_escape},
      {"escape", do_escape},
      {"first",
       [](const Value& v, const CallArgs&, const Budget&) {
         const List items = items_of(v);
         return items.empty() ? Value::undefined("no first item of an empty sequence") : items.front();
       }},
      {"float", do_float},
      {"indent", do_indent},
      {"int", do_int},
      {"items", do_items},
      {"join", do_join},
      {"last",
       [](const Value& v, const CallArgs&, const Budget&) {
         const List items = items_of(v);
         return items.empty() ? Value::undefined("no last item of an empty sequence") : items.back();
       }},
      {"length", [](const Value& v, const CallArgs&, const Budget&) { return Value::integer(length(v)); }},
      {"list", [](const Value& v, const CallArgs&, const Budget&) { return Value::list(items_of(v)); }},
      {"lower", [](const Value& v, const CallArgs&,
                   const Budget&) { return Value::string(change_case(to_text(v), Case::kLower)); }},
      {"map", do_map},
      {"max", [](const Value& v, const CallArgs& a, const Budget&) { return extreme(v, a, true); }},
      {"min", [](const Value& v, const CallArgs& a, const Budget&) { return extreme(v, a, false); }},
      {"reject", [](const Value& v, const CallArgs& a, const Budget&) { return select(v, a, false, false); }},
      {"rejectattr", [](const Value& v, const CallArgs& a, const Budget&) { return select(v, a, true, false); }},
      {"replace", do_replace},
      {"reverse", do_reverse},
      {"round", do_round},
      {"safe", [](const Value& v, const CallArgs&, const Budget&) { return v; }},
      {"select", [](const Value& v, const CallArgs& a, const Budget&) { return select(v, a, false, true); }},
      {"selectattr", [](const Value& v, const CallArgs& a, const Budget&) { return select(v, a, true, true); }},
      {"sort", do_sort},
      {"string", [](const Value& v, const CallArgs&, const Budget&) { return Value::string(to_text(v)); }},
      {"sum", do_sum},
      {"title", [](const Value& v, const CallArgs&,
                   const Budget&) { return Value::string(change_case(to_text(v), Case::kJinjaTitle)); }},
      {"tojson", do_tojson},
      {"trim", do_trim},
      {"upper", [](const Value& v, const CallArgs&,
                   const Budget&) { return Value::string(change_case(to_text(v), Case::kUpper)); }},
      {"wordcount",
       [](const Value& v, const CallArgs&, const Budget&) { return Value::integer(word_count(str_of(v))); }},
  };
  return table;
}

bool is_integer(const Value& v) { return v.is(Kind::kInt); }

const Value& arg(const Arguments& a, const char* test) {
  if (!a.get(0)) throw EvalError(std::string("the test '") + test + "' takes an argument");
  return *a.get(0);
}

const std::map<std::string, Test>& tests() {
  static const auto eq = [](const Value& v, const Arguments& a) { return equal(v, arg(a, "eq")); };
  static const auto ne = [](const Value& v, const Arguments& a) { return !equal(v, arg(a, "ne")); };
  static const auto lt = [](const Value& v, const Arguments& a) { return compare(v, arg(a, "lt")) < 0; };
  static const auto le = [](const Value& v, const Arguments& a) { return compare(v, arg(a, "le")) <= 0; };
  static const auto gt = [](const Value& v, const Arguments& a) { return compare(v, arg(a, "gt")) > 0; };
  static const auto ge = [](const Value& v, const Arguments& a) { return compare(v, arg(a, "ge")) >= 0; };
  static const std::map<std::string, Test> table = {
      {"defined", [](const Value& v, const Arguments&) { return !v.is(Kind::kUndefined); }},
      {"undefined", [](const Value& v, const Arguments&) { return v.is(Kind::kUndefined); }},
      {"none", [](const Value& v, const Arguments&) { return v.is(Kind::kNone); }},
      {"boolean", [](const Value& v, const Arguments&) { return v.is(Kind::kBool); }},
      {"true", [](const Value& v, const Arguments&) { return v.is(Kind::kBool) && v.as_bool(); }},
      {"false", [](const Value& v, const Arguments&) { return v.is(Kind::kBool) && !v.as_bool(); }},
      {"integer", [](const Value& v, const Arguments&) { return is_integer(v); }},
      {"float", [](const Value& v, const Arguments&) { return v.is(Kind::kFloat); }},
      {"number", [](const Value& v, const Arguments&) { return v.is_number(); }},
      {"string", [](const Value& v, const Arguments&) { return v.is(Kind::kString); }},
      {"mapping", [](const Value& v, const Arguments&) { return v.is(Kind::kDict); }},
      {"sequence",
       [](const Value& v, const Arguments&) { return v.is(Kind::kString) || v.is(Kind::kList) || v.is(Kind::kDict); }},
      {"iterable",
       [](const Value& v, const Arguments&) {
         return v.is(Kind::kString) || v.is(Kind::kList) || v.is(Kind::kDict) || v.is(Kind::kUndefined);
       }},
      {"callable", [](const Value& v, const Arguments&) { return v.is(Kind::kCallable); }},
      {"odd", [](const Value& v, const Arguments&) { return is_integer(v) && (v.as_int() % 2 != 0); }},
      {"even", [](const Value& v, const Arguments&) { return is_integer(v) && v.as_int() % 2 == 0; }},
      {"divisibleby",
       [](const Value& v, const Arguments& a) {
         const std::int64_t n = arg(a, "divisibleby").as_int();
         if (n == 0) throw EvalError("integer division or modulo by zero");
         return v.as_int() % n == 0;
       }},
      {"eq", eq},
      {"equalto", eq},
      {"==", eq},
      {"ne", ne},
      {"!=", ne},
      {"lt", lt},
      {"lessthan", lt},
      {"<", lt},
      {"le", le},
      {"<=", le},
      {"gt", gt},
      {"greaterthan", gt},
      {">", gt},
      {"ge", ge},
      {">=", ge},
      {"in", [](const Value& v, const Arguments& a) { return contains(arg(a, "in"), v); }},
      {"sameas",
       [](const Value& v, const Arguments& a) {
         const Value& other = arg(a, "sameas");
         if (v.kind() != other.kind()) return false;
         if (v.is(Kind::kNone) || v.is(Kind::kUndefined)) return true;
         if (v.is(Kind::kBool)) return v.as_bool() == other.as_bool();
         return equal(v, other) && (v.is_number() || &v.entries() == &other.entries());
       }},
      {"lower",
       [](const Value& v, const Arguments&) {
         return v.is(Kind::kString) && change_case(v.text(), Case::kLower).bytes == v.str();
       }},
      {"upper",
       [](const Value& v, const Arguments&) {
         return v.is(Kind::kString) && change_case(v.text(), Case::kUpper).bytes == v.str();
       }},
      {"escaped", [](const Value&, const Arguments&) { return false; }},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args, const Budget& budget) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw EvalError("no filter named '" + name + "'");
  return it->second(operand, args, budget);
}

bool apply_test(const std::string& name, const Value& operand, const CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw EvalError("no test named '" + name + "'");
  return it->second(operand, Arguments(args, name, {"other"}));
}

}  // namespace hpctrain::data::jinja
