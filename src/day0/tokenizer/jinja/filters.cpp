// Jinja filters and tests used by chat templates, with jinja2 3.1 semantics.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "day0/core/html_escape.h"
#include "day0/tokenizer/jinja/builtins.h"
#include "day0/tokenizer/utf8.h"

namespace day0::jinja {
namespace {

using FilterFn = Value (*)(const Value&, const Args&);
using TestFn = bool (*)(const Value&, const Args&);

Args shift_args(const Args& a, size_t n) {
  Args out;
  if (a.positional.size() > n)
    out.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(n), a.positional.end());
  out.keyword = a.keyword;
  return out;
}

// The widest indentation a template may ask for: a chat template indents by a few spaces, and a
// width from a hostile template must fail clearly instead of being clamped without a word.
constexpr int64_t kMaxIndentWidth = 1024;

int64_t indent_width(const char* filter, int64_t width) {
  if (width > kMaxIndentWidth)
    throw TemplateError(
        fmt::format("{}: indent {} is wider than the {} Day0 allows", filter, width, kMaxIndentWidth));
  return std::max<int64_t>(width, 0);  // Python repeats a string a negative number of times as ""
}

const Value* require(const Args& a, size_t i, const std::string& name, const std::string& what) {
  const Value* v = a.get(i, name);
  if (v == nullptr) throw TemplateError(fmt::format("{}: missing argument '{}'", what, name));
  return v;
}

Value f_length(const Value& v, const Args&) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return Value(int64_t{0});
    case Value::Type::kString:
      return Value(static_cast<int64_t>(tokenizer::utf8_length(v.as_string())));
    case Value::Type::kList:
      return Value(static_cast<int64_t>(v.as_list().size()));
    case Value::Type::kDict:
      return Value(static_cast<int64_t>(v.as_dict().items.size()));
    default:
      throw TemplateError(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

Value f_string(const Value& v, const Args&) {
  return Value(v.str());
}

Value f_trim(const Value& v, const Args& a) {
  Value s(v.str());
  Args inner;
  if (const Value* chars = a.get(0, "chars")) inner.positional.push_back(*chars);
  return get_attribute(s, "strip").call(inner);
}

Value f_tojson(const Value& v, const Args& a) {
  std::optional<int> indent;
  if (const Value* i = a.get(0, "indent"); i && !i->is_none()) {
    if (!i->is_int()) throw TemplateError("tojson: indent must be an integer");
    indent = static_cast<int>(indent_width("tojson", i->as_int()));
  }
  std::string item_sep = indent ? "," : ", ", key_sep = ": ";
  if (const Value* s = a.kw("separators"); s && s->is_list() && s->as_list().size() == 2) {
    item_sep = s->as_list()[0].str();
    key_sep = s->as_list()[1].str();
  }
  const Value* sort = a.kw("sort_keys");
  return Value(v.to_json(indent, item_sep, key_sep, sort && sort->truthy()));
}

Value f_join(const Value& v, const Args& a) {
  const Value* sep = a.get(0, "d");
  const Value* attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep ? sep->str() : "";
    out += attr ? get_item(item, *attr).str() : item.str();
    check_value_size(out.size());
    first = false;
  }
  return Value(std::move(out));
}

Value f_list(const Value& v, const Args&) {
  return Value(iterate(v));
}

Value f_items(const Value& v, const Args&) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict())
    throw TemplateError(fmt::format("items filter: expected a mapping, got {}", v.type_name()));
  List out;
  for (const auto& [k, x] : v.as_dict().items) out.emplace_back(List{Value(k), x});
  return Value(std::move(out));
}

// select / reject / selectattr / rejectattr share this.
Value select_impl(const Value& v, const Args& a, bool by_attr, bool keep) {
  std::string attr;
  size_t next = 0;
  if (by_attr) attr = require(a, next++, "attribute", "selectattr")->str();
  std::string test;
  if (const Value* t = a.get(next, "test")) test = t->str();
  const Args rest = shift_args(a, next + 1);
  List out;
  for (const Value& item : iterate(v)) {
    Value subject = by_attr ? get_item(item, Value(attr)) : item;
    const bool ok = test.empty() ? subject.truthy() : apply_test(test, subject, rest);
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}
Value f_select(const Value& v, const Args& a) {
  return select_impl(v, a, false, true);
}
Value f_reject(const Value& v, const Args& a) {
  return select_impl(v, a, false, false);
}
Value f_selectattr(const Value& v, const Args& a) {
  return select_impl(v, a, true, true);
}
Value f_rejectattr(const Value& v, const Args& a) {
  return select_impl(v, a, true, false);
}

Value f_map(const Value& v, const Args& a) {
  List out;
  if (const Value* attr = a.kw("attribute")) {
    const Value* def = a.kw("default");
    for (const Value& item : iterate(v)) {
      Value x = get_item(item, *attr);
      out.push_back(x.is_undefined() && def ? *def : x);
    }
    return Value(std::move(out));
  }
  const std::string filter = require(a, 0, "filter", "map")->str();
  const Args rest = shift_args(a, 1);
  for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, rest));
  return Value(std::move(out));
}

Value f_first(const Value& v, const Args&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(const Value& v, const Args&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_default(const Value& v, const Args& a) {
  const Value* def = a.get(0, "default_value");
  const Value* boolean = a.get(1, "boolean");
  const bool use_default = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
  if (!use_default) return v;
  return def ? *def : Value("");
}

Value f_upper(const Value& v, const Args&) {
  return get_attribute(Value(v.str()), "upper").call({});
}
Value f_lower(const Value& v, const Args&) {
  return get_attribute(Value(v.str()), "lower").call({});
}
Value f_title(const Value& v, const Args&) {
  return get_attribute(Value(v.str()), "title").call({});
}
Value f_capitalize(const Value& v, const Args&) {
  return get_attribute(Value(v.str()), "capitalize").call({});
}
Value f_replace(const Value& v, const Args& a) {
  return get_attribute(Value(v.str()), "replace").call(a);
}

Value f_int(const Value& v, const Args& a) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return Value(v.as_int());  // as_int refuses floats beyond the int64 range
  if (v.is_string()) {
    try {
      size_t used = 0;
      const long long r = std::stoll(v.as_string(), &used, 10);
      if (used == v.as_string().size()) return Value(static_cast<int64_t>(r));
      return Value(Value(std::stod(v.as_string())).as_int());
    } catch (const std::exception&) {
    }
  }
  const Value* def = a.get(0, "default");
  return def ? *def : Value(int64_t{0});
}

Value f_float(const Value& v, const Args& a) {
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    try {
      return Value(std::stod(v.as_string()));
    } catch (const std::exception&) {
    }
  }
  const Value* def = a.get(0, "default");
  return def ? *def : Value(0.0);
}

Value f_abs(const Value& v, const Args&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_number()) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
  throw TemplateError(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_unique(const Value& v, const Args&) {
  List out;
  for (const Value& x : iterate(v)) {
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  return Value(std::move(out));
}

Value f_reverse(const Value& v, const Args&) {
  if (v.is_string()) {
    List chars = iterate(v);
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
    return Value(std::move(out));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_sort(const Value& v, const Args& a) {
  List items = iterate(v);
  const Value* rev = a.get(0, "reverse");
  const Value* attr = a.get(2, "attribute");
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = attr ? get_item(x, *attr) : x, ky = attr ? get_item(y, *attr) : y;
    return binary_op("<", kx, ky).truthy();
  });
  if (rev && rev->truthy()) std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_sum(const Value& v, const Args& a) {
  Value total = a.get(1, "start") ? *a.get(1, "start") : Value(int64_t{0});
  const Value* attr = a.get(0, "attribute");
  for (const Value& x : iterate(v)) total = binary_op("+", total, attr ? get_item(x, *attr) : x);
  return total;
}

Value f_minmax(const Value& v, bool want_max) {
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  for (const Value& x : items) {
    if (binary_op(want_max ? ">" : "<", x, best).truthy()) best = x;
  }
  return best;
}
Value f_min(const Value& v, const Args&) {
  return f_minmax(v, false);
}
Value f_max(const Value& v, const Args&) {
  return f_minmax(v, true);
}
Value f_safe(const Value& v, const Args&) {
  return v;
}

Value f_escape(const Value& v, const Args&) {
  std::string out = html_escape(v.str());
  check_value_size(out.size());
  return Value(std::move(out));
}

Value f_indent(const Value& v, const Args& a) {
  const Value* w = a.get(0, "width");
  const Value* first = a.get(1, "first");
  const Value* blank = a.get(2, "blank");
  const std::string pad =
      w && w->is_string()
          ? w->as_string()
          : std::string(static_cast<size_t>(w ? indent_width("indent", w->as_int()) : 4), ' ');
  const std::string s = v.str();
  std::string out;
  size_t pos = 0;
  bool first_line = true;
  while (pos <= s.size()) {
    size_t nl = s.find('\n', pos);
    const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    const bool add = first_line ? (first && first->truthy()) : (!line.empty() || (blank && blank->truthy()));
    if (add) out += pad;
    out += line;
    check_value_size(out.size());
    if (nl == std::string::npos) break;
    out += '\n';
    pos = nl + 1;
    first_line = false;
  }
  return Value(std::move(out));
}

Value f_dictsort(const Value& v, const Args& a) {
  if (!v.is_dict()) throw TemplateError("dictsort: expected a mapping");
  List items = f_items(v, {}).as_list();
  const Value* by = a.get(2, "by");
  const size_t idx = by && by->str() == "value" ? 1 : 0;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return binary_op("<", x.as_list()[idx], y.as_list()[idx]).truthy();
  });
  const Value* rev = a.get(3, "reverse");
  if (rev && rev->truthy()) std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_attr(const Value& v, const Args& a) {
  return get_attribute(v, require(a, 0, "name", "attr")->str());
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"length", f_length},
      {"count", f_length},
      {"string", f_string},
      {"trim", f_trim},
      {"tojson", f_tojson},
      {"join", f_join},
      {"list", f_list},
      {"items", f_items},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"map", f_map},
      {"first", f_first},
      {"last", f_last},
      {"default", f_default},
      {"d", f_default},
      {"upper", f_upper},
      {"lower", f_lower},
      {"title", f_title},
      {"capitalize", f_capitalize},
      {"replace", f_replace},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"unique", f_unique},
      {"reverse", f_reverse},
      {"sort", f_sort},
      {"sum", f_sum},
      {"min", f_min},
      {"max", f_max},
      {"safe", f_safe},
      {"escape", f_escape},
      {"e", f_escape},
      {"indent", f_indent},
      {"dictsort", f_dictsort},
      {"attr", f_attr},
  };
  return table;
}

bool t_defined(const Value& v, const Args&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, const Args&) {
  return v.is_undefined();
}
bool t_none(const Value& v, const Args&) {
  return v.is_none();
}
bool t_boolean(const Value& v, const Args&) {
  return v.is_bool();
}
bool t_true(const Value& v, const Args&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(const Value& v, const Args&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(const Value& v, const Args&) {
  return v.is_int();
}
bool t_float(const Value& v, const Args&) {
  return v.is_float();
}
bool t_number(const Value& v, const Args&) {
  return v.is_number();
}
bool t_string(const Value& v, const Args&) {
  return v.is_string();
}
bool t_mapping(const Value& v, const Args&) {
  return v.is_dict() && !v.as_dict().is_namespace;
}
bool t_iterable(const Value& v, const Args&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(const Value& v, const Args&) {
  return v.is_string() || v.is_list() || v.is_dict();
}
bool t_callable(const Value& v, const Args&) {
  return v.is_function();
}
bool t_odd(const Value& v, const Args&) {
  return v.is_int() && v.as_int() % 2 != 0;
}
bool t_even(const Value& v, const Args&) {
  return v.is_int() && v.as_int() % 2 == 0;
}
bool t_lower(const Value& v, const Args&) {
  return v.is_string() && f_lower(v, {}).as_string() == v.as_string();
}
bool t_upper(const Value& v, const Args&) {
  return v.is_string() && f_upper(v, {}).as_string() == v.as_string();
}
bool t_divisibleby(const Value& v, const Args& a) {
  const Value* n = require(a, 0, "num", "divisibleby");
  return n->as_int() != 0 && v.as_int() % n->as_int() == 0;
}
bool t_eq(const Value& v, const Args& a) {
  return v == *require(a, 0, "other", "eq");
}
bool t_ne(const Value& v, const Args& a) {
  return !(v == *require(a, 0, "other", "ne"));
}
bool t_lt(const Value& v, const Args& a) {
  return binary_op("<", v, *require(a, 0, "other", "lt")).truthy();
}
bool t_le(const Value& v, const Args& a) {
  return binary_op("<=", v, *require(a, 0, "other", "le")).truthy();
}
bool t_gt(const Value& v, const Args& a) {
  return binary_op(">", v, *require(a, 0, "other", "gt")).truthy();
}
bool t_ge(const Value& v, const Args& a) {
  return binary_op(">=", v, *require(a, 0, "other", "ge")).truthy();
}
bool t_in(const Value& v, const Args& a) {
  return contains(*require(a, 0, "seq", "in"), v);
}
bool t_sameas(const Value& v, const Args& a) {
  const Value& o = *require(a, 0, "other", "sameas");
  if (v.type() != o.type()) return false;
  if (v.is_none() || v.is_bool()) return v == o;
  return false;  // identity of containers cannot be observed through JSON values
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"odd", t_odd},
      {"even", t_even},
      {"lower", t_lower},
      {"upper", t_upper},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) > 0;
}
bool has_test(const std::string& name) {
  return tests().count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& value, const Args& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError(fmt::format("no filter named '{}'", name));
  return it->second(value, args);
}

bool apply_test(const std::string& name, const Value& value, const Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError(fmt::format("no test named '{}'", name));
  return it->second(value, args);
}

}  // namespace day0::jinja
