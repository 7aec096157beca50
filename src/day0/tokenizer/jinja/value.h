#pragma once
// Values of the Jinja interpreter with Python semantics: None, bool, int, float, str, list, dict (insertion
// ordered), callables and Jinja's Undefined. Lists and dicts are shared by reference, as in Python.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace day0::jinja {

// A template error at runtime (converted to a Status with the template position by the renderer).
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& what) : std::runtime_error(what) {}
};

class Value;
using List = std::vector<Value>;
struct Dict;

// Values nested deeper than this (or containing themselves) are a template error wherever they are
// walked (printing, tojson, comparison), so no walk recurses without bound.
inline constexpr int kMaxValueDepth = 256;

// Every value a template builds (strings, lists, JSON text) stays under this; each growing operation
// checks as it grows, so a hostile template fails fast instead of exhausting memory.
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
// Throws TemplateError("value larger than 64 MiB") when bytes > kMaxValueBytes.
void check_value_size(size_t bytes);

// Counts the nesting of a recursive walk over values on this thread; throws TemplateError past
// kMaxValueDepth. Construct one per level of recursion.
class NestingGuard {
 public:
  NestingGuard();
  ~NestingGuard();
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
};

// Containers are freed iteratively: a chain of a million nested lists built by a loop must not
// recurse a million frames deep in the destructor.
struct ListDeleter {
  void operator()(List* list) const;
};
struct DictDeleter {
  void operator()(Dict* dict) const;
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* kw(const std::string& name) const;
  // Positional i, else keyword `name`, else nullptr.
  const Value* get(size_t i, const std::string& name) const;
};

using NativeFunction = std::function<Value(const Args&)>;

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;                                   // Undefined
  Value(bool b) : type_(Type::kBool), int_(b) {}       // NOLINT
  Value(int v) : type_(Type::kInt), int_(v) {}         // NOLINT
  Value(int64_t v) : type_(Type::kInt), int_(v) {}     // NOLINT
  Value(double v) : type_(Type::kFloat), float_(v) {}  // NOLINT
  Value(std::string s) : type_(Type::kString), str_(std::make_shared<std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                                    // NOLINT
  Value(List l);                                                                                     // NOLINT
  Value(Dict d);                                                                                     // NOLINT

  static Value none() {
    Value v;
    v.type_ = Type::kNone;
    return v;
  }
  // An Undefined that remembers why (for the error when it is used).
  static Value undefined(std::string hint) {
    Value v;
    v.str_ = std::make_shared<std::string>(std::move(hint));
    return v;
  }
  static Value function(std::string name, NativeFunction fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_function() const { return type_ == Type::kFunction; }

  bool as_bool() const { return int_ != 0; }
  // A float outside the int64 range (or NaN) is a TemplateError, not undefined behaviour.
  int64_t as_int() const { return type_ == Type::kFloat ? float_to_int(float_) : int_; }
  double as_float() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return *str_; }
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  const std::string& undefined_hint() const;
  Value call(const Args& args) const;
  const std::string& function_name() const;

  bool truthy() const;
  // Python's str(): what {{ value }} prints.
  std::string str() const;
  // Python's repr().
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...).
  std::string to_json(std::optional<int> indent, const std::string& item_sep, const std::string& key_sep,
                      bool sort_keys) const;
  std::string type_name() const;  // Python's type name, for error messages

  friend bool operator==(const Value& a, const Value& b);

 private:
  static int64_t float_to_int(double v);
  struct Function {
    std::string name;
    NativeFunction fn;
  };
  Type type_ = Type::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Python's repr() of a float (shortest round-trip digits, "1.0", "1e-05", "inf").
std::string python_float_repr(double v);

}  // namespace day0::jinja
