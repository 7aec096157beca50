#include "day0/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "day0/tokenizer/utf8.h"

namespace day0::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* Args::kw(const std::string& name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Args::get(size_t i, const std::string& name) const {
  if (i < positional.size()) return &positional[i];
  return kw(name);
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.type_ = Type::kFunction;
  v.fn_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

namespace {
thread_local int tl_value_depth = 0;
// Values whose containers are being freed by the outermost deleter on this thread (nullptr: none).
thread_local std::vector<Value>* tl_pending_frees = nullptr;

// Frees `children` (moved out of a dying container) without recursion: the outermost call drains a
// work list; nested deleters only add to it.
template <typename Container, typename TakeChildren>
void free_iteratively(Container* dying, TakeChildren take) {
  if (tl_pending_frees != nullptr) {
    take(*dying, *tl_pending_frees);
    delete dying;
    return;
  }
  std::vector<Value> pending;
  tl_pending_frees = &pending;
  take(*dying, pending);
  delete dying;
  while (!pending.empty()) {
    Value last = std::move(pending.back());
    pending.pop_back();
    // `last` dies here; if it held the final reference to a container, its deleter appends that
    // container's children to `pending` instead of recursing.
  }
  tl_pending_frees = nullptr;
}
}  // namespace

void check_value_size(size_t bytes) {
  if (bytes > kMaxValueBytes) throw TemplateError("value larger than 64 MiB");
}

NestingGuard::NestingGuard() {
  if (++tl_value_depth > kMaxValueDepth) {
    --tl_value_depth;
    throw TemplateError(
        fmt::format("value nested deeper than {} levels (or containing itself)", kMaxValueDepth));
  }
}
NestingGuard::~NestingGuard() {
  --tl_value_depth;
}

void ListDeleter::operator()(List* list) const {
  free_iteratively(list, [](List& l, std::vector<Value>& out) {
    for (Value& v : l) out.push_back(std::move(v));
  });
}
void DictDeleter::operator()(Dict* dict) const {
  free_iteratively(dict, [](Dict& d, std::vector<Value>& out) {
    for (auto& kv : d.items) out.push_back(std::move(kv.second));
  });
}

Value::Value(List l) : type_(Type::kList), list_(new List(std::move(l)), ListDeleter{}) {}
Value::Value(Dict d) : type_(Type::kDict), dict_(new Dict(std::move(d)), DictDeleter{}) {}

int64_t Value::float_to_int(double v) {
  // 2^63 is exactly representable; everything in [-2^63, 2^63) converts without overflow.
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) {
    throw TemplateError(fmt::format("cannot convert float {} to an integer", python_float_repr(v)));
  }
  return static_cast<int64_t>(v);
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  const NestingGuard guard;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.items.emplace_back(k, from_json(v));
      return Value(std::move(d));
    }
    default:
      return none();
  }
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty = "undefined value";
  return str_ ? *str_ : kEmpty;
}

Value Value::call(const Args& args) const {
  if (type_ == Type::kUndefined) throw TemplateError(undefined_hint());
  if (type_ != Type::kFunction) throw TemplateError(fmt::format("'{}' object is not callable", type_name()));
  return fn_->fn(args);
}

const std::string& Value::function_name() const {
  return fn_->name;
}

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0.0;
    case Type::kString:
      return !str_->empty();
    case Type::kList:
      return !list_->empty();
    case Type::kDict:
      return !dict_->items.empty();
    case Type::kFunction:
      return true;
  }
  return false;
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  // s = [-]d[.ddd]e(+|-)XX
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  const int exp = std::stoi(s.substr(e + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exp >= -5 && exp < 16) {
    if (exp >= 0) {
      std::string int_part = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp) + 1));
      while (int_part.size() < static_cast<size_t>(exp) + 1) int_part += '0';
      std::string frac =
          digits.size() > static_cast<size_t>(exp) + 1 ? digits.substr(static_cast<size_t>(exp) + 1) : "0";
      out = int_part;
      out.push_back('.');
      out.append(frac);
    } else {
      out.assign("0.");
      out.append(static_cast<size_t>(-exp - 1), '0');
      out.append(digits);
    }
    if (exp < -4) {
      // Python switches to scientific below 1e-4.
      out.clear();
    }
  }
  if (out.empty()) {
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) {
      mant.push_back('.');
      mant.append(digits, 1, std::string::npos);
    }
    out = fmt::format("{}e{}{:02d}", mant, exp < 0 ? '-' : '+', std::abs(exp));
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t cp = 0;
    size_t len = tokenizer::decode_utf8(s, pos, cp);
    if (len == 0) {
      cp = static_cast<unsigned char>(s[pos]);
      len = 1;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<char32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else {
      out.append(s, pos, len);
    }
    pos += len;
  }
  out += quote;
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
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
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void dump_json(const Value& v, std::optional<int> indent, const std::string& item_sep,
               const std::string& key_sep, bool sort_keys, int level, std::string& out) {
  const NestingGuard guard;
  auto newline = [&](int lvl) {
    if (!indent) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(*indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::kFloat: {
      const double f = v.as_float();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(f);
      }
      return;
    }
    case Value::Type::kString:
      out += json_string(v.as_string());
      return;
    case Value::Type::kList: {
      const List& l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        dump_json(l[i], indent, item_sep, key_sep, sort_keys, level + 1, out);
        check_value_size(out.size());
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Type::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        out += json_string(items[i]->first);
        out += key_sep;
        dump_json(items[i]->second, indent, item_sep, key_sep, sort_keys, level + 1, out);
        check_value_size(out.size());
      }
      newline(level);
      out += '}';
      return;
    }
    case Value::Type::kUndefined:
    case Value::Type::kFunction:
      throw TemplateError(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string Value::to_json(std::optional<int> indent, const std::string& item_sep, const std::string& key_sep,
                           bool sort_keys) const {
  std::string out;
  dump_json(*this, indent, item_sep, key_sep, sort_keys, 0, out);
  return out;
}

std::string Value::str() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kString:
      return *str_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  const NestingGuard guard;
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return int_ ? "True" : "False";
    case Type::kInt:
      return std::to_string(int_);
    case Type::kFloat:
      return python_float_repr(float_);
    case Type::kString:
      return repr_string(*str_);
    case Type::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        out += (i ? ", " : "") + (*list_)[i].repr();
        check_value_size(out.size());
      }
      return out + "]";
    }
    case Type::kDict: {
      std::string out = dict_->is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        out += (i ? ", " : "") + repr_string(dict_->items[i].first) + ": " + dict_->items[i].second.repr();
        check_value_size(out.size());
      }
      return out + (dict_->is_namespace ? "}>" : "}");
    }
    case Type::kFunction:
      return fmt::format("<function {}>", fn_->name);
  }
  return "";
}

std::string Value::type_name() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return "list";
    case Type::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Type::kFunction:
      return "function";
  }
  return "?";
}

bool operator==(const Value& a, const Value& b) {
  const NestingGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.as_string() == b.as_string();
    case Value::Type::kList:
      return a.as_list() == b.as_list();
    case Value::Type::kDict: {
      const auto& x = a.as_dict().items;
      const auto& y = b.as_dict().items;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.as_dict().find(k);
        if (other == nullptr || !(*other == v)) return false;
      }
      return true;
    }
    case Value::Type::kFunction:
      return a.fn_ == b.fn_;
    default:
      return false;
  }
}

}  // namespace day0::jinja
