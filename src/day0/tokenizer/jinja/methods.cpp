// Python methods the chat templates call on str, dict and list values (obj.name resolves them first).
#include <utf8proc.h>

#include <fmt/format.h>

#include "day0/tokenizer/jinja/builtins.h"
#include "day0/tokenizer/text_util.h"
#include "day0/tokenizer/utf8.h"

namespace day0::jinja {
namespace {

bool py_space(char32_t cp) {
  return tokenizer::is_unicode_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

std::string arg_string(const Args& a, size_t i, const std::string& name, const std::string& method) {
  const Value* v = a.get(i, name);
  if (v == nullptr) throw TemplateError(fmt::format("{}() missing argument '{}'", method, name));
  if (!v->is_string())
    throw TemplateError(fmt::format("{}() argument must be str, not {}", method, v->type_name()));
  return v->as_string();
}

// str.strip / lstrip / rstrip with Python's optional character set.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::pair<size_t, char32_t>> cps;  // (offset, code point)
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t cp = 0;
    size_t len = tokenizer::decode_utf8(s, pos, cp);
    if (len == 0) len = 1, cp = static_cast<unsigned char>(s[pos]);
    cps.emplace_back(pos, cp);
    pos += len;
  }
  std::u32string set;
  const bool whitespace = chars == nullptr || chars->is_none();
  if (!whitespace) {
    if (!chars->is_string()) throw TemplateError("strip arg must be None or str");
    const std::string& c = chars->as_string();
    size_t p = 0;
    while (p < c.size()) {
      char32_t cp = 0;
      size_t len = tokenizer::decode_utf8(c, p, cp);
      if (len == 0) len = 1, cp = static_cast<unsigned char>(c[p]);
      set.push_back(cp);
      p += len;
    }
  }
  auto strip_it = [&](char32_t cp) {
    return whitespace ? py_space(cp) : set.find(cp) != std::u32string::npos;
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b].second)) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1].second)) --e;
  }
  const size_t from = b < cps.size() ? cps[b].first : s.size();
  const size_t to = e < cps.size() ? cps[e].first : s.size();
  return s.substr(from, to - from);
}

Value py_split(const std::string& s, const Value* sep, const Value* maxsplit_v) {
  int64_t maxsplit = maxsplit_v && maxsplit_v->is_int() ? maxsplit_v->as_int() : -1;
  List out;
  if (sep == nullptr || sep->is_none()) {
    size_t pos = 0;
    auto skip_space = [&] {
      while (pos < s.size()) {
        char32_t cp = 0;
        const size_t len = tokenizer::decode_utf8(s, pos, cp);
        if (len == 0 || !py_space(cp)) break;
        pos += len;
      }
    };
    skip_space();
    while (pos < s.size()) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(py_strip(s.substr(pos), nullptr, false, true));
        return Value(std::move(out));
      }
      const size_t start = pos;
      while (pos < s.size()) {
        char32_t cp = 0;
        size_t len = tokenizer::decode_utf8(s, pos, cp);
        if (len == 0) len = 1;
        if (py_space(cp)) break;
        pos += len;
      }
      out.emplace_back(s.substr(start, pos - start));
      skip_space();
    }
    return Value(std::move(out));
  }
  if (!sep->is_string()) throw TemplateError("split() separator must be str or None");
  const std::string& d = sep->as_string();
  if (d.empty()) throw TemplateError("empty separator");
  size_t pos = 0;
  while (true) {
    const size_t found = s.find(d, pos);
    if (found == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(pos));
      break;
    }
    out.emplace_back(s.substr(pos, found - pos));
    pos = found + d.size();
  }
  return Value(std::move(out));
}

bool affix_match(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw TemplateError("startswith/endswith argument must be str or a tuple of str");
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_list()) {
    for (const Value& v : arg.as_list()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(arg);
}

std::string case_map(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::string out;
  size_t pos = 0;
  bool prev_cased = false;
  bool first = true;
  while (pos < s.size()) {
    char32_t cp = 0;
    size_t len = tokenizer::decode_utf8(s, pos, cp);
    if (len == 0) {
      out.push_back(s[pos++]);
      continue;
    }
    char32_t mapped = cp;
    const char32_t lower = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
    const char32_t upper = static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
    if (mode == 0) mapped = lower;
    if (mode == 1) mapped = upper;
    if (mode == 2) mapped = prev_cased ? lower : upper;
    if (mode == 3) mapped = first ? upper : lower;
    const bool cased = lower != upper || tokenizer::is_word_char(cp);
    prev_cased = mode == 2 ? (lower != upper) : cased;
    first = false;
    tokenizer::append_utf8(out, mapped);
    pos += len;
  }
  return out;
}

Value method(const std::string& name, NativeFunction fn) {
  return Value::function(name, std::move(fn));
}

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return method(name, [s, l, r](const Args& a) { return Value(py_strip(s, a.get(0, "chars"), l, r)); });
  }
  if (name == "split")
    return method(name, [s](const Args& a) { return py_split(s, a.get(0, "sep"), a.get(1, "maxsplit")); });
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return method(name, [s, prefix, name](const Args& a) {
      const Value* arg = a.get(0, "prefix");
      if (arg == nullptr) throw TemplateError(name + "() takes at least 1 argument");
      return Value(affix_match(s, *arg, prefix));
    });
  }
  if (name == "lower") return method(name, [s](const Args&) { return Value(case_map(s, 0)); });
  if (name == "upper") return method(name, [s](const Args&) { return Value(case_map(s, 1)); });
  if (name == "title") return method(name, [s](const Args&) { return Value(case_map(s, 2)); });
  if (name == "capitalize") return method(name, [s](const Args&) { return Value(case_map(s, 3)); });
  if (name == "replace") {
    return method(name, [s](const Args& a) {
      const std::string from = arg_string(a, 0, "old", "replace"), to = arg_string(a, 1, "new", "replace");
      const Value* count_v = a.get(2, "count");
      int64_t count = count_v && count_v->is_int() ? count_v->as_int() : -1;
      std::string out;
      size_t pos = 0;
      if (from.empty()) return Value(s);
      while (count != 0) {
        const size_t f = s.find(from, pos);
        if (f == std::string::npos) break;
        out.append(s, pos, f - pos);
        out += to;
        check_value_size(out.size());
        pos = f + from.size();
        --count;
      }
      out.append(s, pos);
      return Value(std::move(out));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return method(name, [s, name](const Args& a) {
      const std::string sub = arg_string(a, 0, "sub", name);
      if (name == "count") {
        int64_t n = 0;
        if (sub.empty()) return Value(static_cast<int64_t>(tokenizer::utf8_length(s) + 1));
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value(n);
      }
      const size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
      return Value(p == std::string::npos ? int64_t{-1}
                                          : static_cast<int64_t>(tokenizer::utf8_length(s.substr(0, p))));
    });
  }
  if (name == "join") {
    return method(name, [s](const Args& a) {
      const Value* items = a.get(0, "iterable");
      if (items == nullptr) throw TemplateError("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*items)) {
        if (!v.is_string())
          throw TemplateError(fmt::format("sequence item: expected str instance, {} found", v.type_name()));
        if (!first) out += s;
        out += v.as_string();
        check_value_size(out.size());
        first = false;
      }
      return Value(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    return method(name, [s, name](const Args&) {
      if (s.empty()) return Value(false);
      size_t pos = 0;
      while (pos < s.size()) {
        char32_t cp = 0;
        size_t len = tokenizer::decode_utf8(s, pos, cp);
        if (len == 0) return Value(false);
        const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
        const bool is_alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        const bool is_digit = cat == UTF8PROC_CATEGORY_ND;
        bool ok = false;
        if (name == "isdigit") ok = is_digit;
        if (name == "isspace") ok = py_space(cp);
        if (name == "isalpha") ok = is_alpha;
        if (name == "isalnum") ok = is_alpha || tokenizer::is_word_char(cp);
        if (!ok) return Value(false);
        pos += len;
      }
      return Value(true);
    });
  }
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "get") {
    return method(name, [d](const Args& a) {
      const Value* key = a.get(0, "key");
      if (key == nullptr) throw TemplateError("get expected at least 1 argument");
      if (key->is_string()) {
        if (const Value* v = d.as_dict().find(key->as_string())) return *v;
      }
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    });
  }
  if (name == "items") {
    return method(name, [d](const Args&) {
      List out;
      for (const auto& [k, v] : d.as_dict().items) out.emplace_back(List{Value(k), v});
      return Value(std::move(out));
    });
  }
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return method(name, [d, keys](const Args&) {
      List out;
      for (const auto& [k, v] : d.as_dict().items) out.push_back(keys ? Value(k) : v);
      return Value(std::move(out));
    });
  }
  return {};
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      throw TemplateError(obj.undefined_hint());
    case Value::Type::kString:
      return string_method(obj.as_string(), name);
    case Value::Type::kDict: {
      if (!obj.as_dict().is_namespace) {
        Value m = dict_method(obj, name);
        if (!m.is_undefined()) return m;
      }
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return Value::undefined(fmt::format("'{}' has no attribute '{}'",
                                          obj.as_dict().is_namespace ? "Namespace" : "dict object", name));
    }
    case Value::Type::kList:
      if (name == "index" || name == "count") {
        return method(name, [obj, name](const Args& a) {
          const Value* x = a.get(0, "value");
          if (x == nullptr) throw TemplateError(name + "() takes exactly one argument");
          int64_t n = 0;
          for (size_t i = 0; i < obj.as_list().size(); ++i) {
            if (obj.as_list()[i] == *x) {
              if (name == "index") return Value(static_cast<int64_t>(i));
              ++n;
            }
          }
          if (name == "index") throw TemplateError(fmt::format("{} is not in list", x->repr()));
          return Value(n);
        });
      }
      return Value::undefined(fmt::format("'list object' has no attribute '{}'", name));
    case Value::Type::kNone:
      return Value::undefined(fmt::format("'None' has no attribute '{}'", name));
    default:
      return Value::undefined(fmt::format("'{}' object has no attribute '{}'", obj.type_name(), name));
  }
}

}  // namespace day0::jinja
