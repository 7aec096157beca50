// Python semantics of Jinja operators, item/attribute access and iteration.
#include <cmath>

#include <fmt/format.h>

#include "day0/tokenizer/jinja/builtins.h"
#include "day0/tokenizer/utf8.h"

namespace day0::jinja {
namespace {

[[noreturn]] void undefined_error(const Value& v) {
  throw TemplateError(v.undefined_hint());
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t cp = 0;
    size_t len = tokenizer::decode_utf8(s, pos, cp);
    if (len == 0) len = 1;
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

int compare_values(const Value& a, const Value& b, const std::string& op) {
  const NestingGuard guard;
  if (a.is_number() && b.is_number()) {
    const double x = a.as_float(), y = b.as_float();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string())
    return a.as_string().compare(b.as_string()) < 0 ? -1 : (a.as_string() == b.as_string() ? 0 : 1);
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!(x[i] == y[i])) return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  throw TemplateError(
      fmt::format("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(), b.type_name()));
}

void check_size(size_t bytes) {
  check_value_size(bytes);
}

[[noreturn]] void overflow(const char* op) {
  throw TemplateError(fmt::format("integer overflow in '{}' (beyond the 64-bit range)", op));
}

int64_t checked_int(const char* op, int64_t a, int64_t b) {
  int64_t out = 0;
  bool bad = false;
  if (op[0] == '+') bad = __builtin_add_overflow(a, b, &out);
  if (op[0] == '-') bad = __builtin_sub_overflow(a, b, &out);
  if (op[0] == '*') bad = __builtin_mul_overflow(a, b, &out);  // also "**"
  if (bad) overflow(op);
  return out;
}

int64_t floor_div(int64_t a, int64_t b) {
  // INT64_MIN // -1 is the one quotient that does not fit (and traps on x86).
  if (a == INT64_MIN && b == -1) overflow("//");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

List iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
      return v.as_list();
    case Value::Type::kDict: {
      check_size(v.as_dict().items.size() * sizeof(Value));
      List keys;
      for (const auto& kv : v.as_dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Type::kString: {
      // One Value (with its string) per character: bounded like any other value, before it is built
      // (a 64 MiB string would otherwise become gigabytes of one-character strings).
      const size_t bytes = v.as_string().size();
      if (bytes > kMaxValueBytes / (sizeof(Value) + sizeof(std::string))) {
        throw TemplateError(
            fmt::format("iterating a string of {} bytes makes a list larger than 64 MiB", bytes));
      }
      List chars;
      for (auto& c : utf8_chars(v.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    default:
      throw TemplateError(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.is_string()) {
        throw TemplateError(
            fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::kList:
      for (const Value& v : container.as_list()) {
        if (v == item) return true;
      }
      return false;
    case Value::Type::kDict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      throw TemplateError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", key.as_string()));
    }
    return Value::undefined(fmt::format("'dict object' has no attribute {}", key.repr()));
  }
  if ((obj.is_list() || obj.is_string()) && key.is_int()) {
    const bool is_list = obj.is_list();
    std::vector<std::string> chars;
    if (!is_list) chars = utf8_chars(obj.as_string());
    const int64_t n =
        is_list ? static_cast<int64_t>(obj.as_list().size()) : static_cast<int64_t>(chars.size());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n)
      return Value::undefined(fmt::format("{} object has no element {}", obj.type_name(), key.as_int()));
    return is_list ? obj.as_list()[static_cast<size_t>(i)] : Value(chars[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined(fmt::format("'{}' object has no element {}", obj.type_name(), key.repr()));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj);
  const bool is_list = obj.is_list();
  if (!is_list && !obj.is_string())
    throw TemplateError(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  std::vector<std::string> chars;
  if (!is_list) chars = utf8_chars(obj.as_string());
  const int64_t n = is_list ? static_cast<int64_t>(obj.as_list().size()) : static_cast<int64_t>(chars.size());
  const int64_t st = step.is_none() || step.is_undefined() ? 1 : step.as_int();
  if (st == 0) throw TemplateError("slice step cannot be zero");
  auto norm = [&](const Value& v, int64_t def, bool upper) -> int64_t {
    if (v.is_none() || v.is_undefined()) return def;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    const int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? n : n - 1;
    (void)upper;
    return std::clamp(i, lo, hi);
  };
  const int64_t b = norm(start, st > 0 ? 0 : n - 1, false);
  const int64_t e = norm(stop, st > 0 ? n : -1, true);
  List out_list;
  std::string out_str;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (is_list) {
      out_list.push_back(obj.as_list()[static_cast<size_t>(i)]);
    } else {
      out_str += chars[static_cast<size_t>(i)];
    }
  }
  return is_list ? Value(std::move(out_list)) : Value(std::move(out_str));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = a.str();
    s += b.str();
    check_size(s.size());
    return Value(std::move(s));
  }
  if (op == "==") return Value(a == b);
  if (op == "!=") return Value(!(a == b));
  if (op == "<") return Value(compare_values(a, b, op) < 0);
  if (op == ">") return Value(compare_values(a, b, op) > 0);
  if (op == "<=") return Value(compare_values(a, b, op) <= 0);
  if (op == ">=") return Value(compare_values(a, b, op) >= 0);
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return Value(checked_int("+", a.as_int(), b.as_int()));
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      check_size((a.as_list().size() + b.as_list().size()) * sizeof(Value));
      List l = a.as_list();
      l.insert(l.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(l));
    }
    if (a.is_string())
      throw TemplateError(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
    if (a.is_list())
      throw TemplateError(fmt::format("can only concatenate list (not \"{}\") to list", b.type_name()));
  } else if (op == "-") {
    if (ints) return Value(checked_int("-", a.as_int(), b.as_int()));
    if (nums) return Value(a.as_float() - b.as_float());
  } else if (op == "*") {
    if (ints) return Value(checked_int("*", a.as_int(), b.as_int()));
    if (nums) return Value(a.as_float() * b.as_float());
    const Value* seq = a.is_int() ? &b : &a;
    const Value* count = a.is_int() ? &a : &b;
    if (count->is_int() && (seq->is_string() || seq->is_list())) {
      const int64_t n = std::max<int64_t>(0, count->as_int());
      const size_t unit = seq->is_string() ? seq->as_string().size() : seq->as_list().size() * sizeof(Value);
      if (n > 0 && unit > 0 && static_cast<uint64_t>(n) > kMaxValueBytes / unit)
        throw TemplateError("value larger than 64 MiB");
      const int64_t reps = unit == 0 ? 0 : n;
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < reps; ++i) s += seq->as_string();
        return Value(std::move(s));
      }
      List l;
      for (int64_t i = 0; i < reps; ++i) l.insert(l.end(), seq->as_list().begin(), seq->as_list().end());
      return Value(std::move(l));
    }
  } else if (op == "/") {
    if (nums) {
      if (b.as_float() == 0) throw TemplateError("division by zero");
      return Value(a.as_float() / b.as_float());
    }
  } else if (op == "//") {
    if (ints) {
      if (b.as_int() == 0) throw TemplateError("integer division or modulo by zero");
      return Value(floor_div(a.as_int(), b.as_int()));
    }
    if (nums) {
      if (b.as_float() == 0) throw TemplateError("float floor division by zero");
      return Value(std::floor(a.as_float() / b.as_float()));
    }
  } else if (op == "%") {
    if (ints) {
      if (b.as_int() == 0) throw TemplateError("integer division or modulo by zero");
      // Python's a % b (the sign of b) from C++'s truncating remainder: never forms floor(a / b) * b,
      // which overflows for a near INT64_MIN (found by make fuzz-long), nor INT64_MIN % -1.
      if (b.as_int() == -1) return Value(int64_t{0});
      const int64_t r = a.as_int() % b.as_int();  // |r| < |b|
      return Value(r != 0 && ((r < 0) != (b.as_int() < 0)) ? r + b.as_int() : r);
    }
    if (nums) {
      if (b.as_float() == 0) throw TemplateError("float modulo");
      const double r = std::fmod(a.as_float(), b.as_float());
      return Value(r != 0 && ((r < 0) != (b.as_float() < 0)) ? r + b.as_float() : r);
    }
    if (a.is_string()) throw TemplateError("printf-style string formatting ('%') is not supported");
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      const int64_t base = a.as_int(), exp = b.as_int();
      if (base == 0) return Value(int64_t{exp == 0 ? 1 : 0});
      if (base == 1) return Value(int64_t{1});
      if (base == -1) return Value(int64_t{exp % 2 == 0 ? 1 : -1});
      int64_t r = 1;
      for (int64_t i = 0; i < exp; ++i) r = checked_int("**", r, base);  // |base| >= 2: overflows by 63
      return Value(r);
    }
    if (nums) return Value(std::pow(a.as_float(), b.as_float()));
  }
  throw TemplateError(
      fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

}  // namespace day0::jinja
