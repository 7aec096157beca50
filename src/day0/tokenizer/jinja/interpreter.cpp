#include "day0/tokenizer/jinja/interpreter.h"

#include <unordered_map>

#include <fmt/format.h>

#include "day0/tokenizer/jinja/builtins.h"

namespace day0::jinja {
namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  const Scope* parent = nullptr;
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxCallDepth = 256;
constexpr int64_t kMaxRange = 1'000'000;
// Bounds output so that a hostile template cannot exhaust memory (RenderOptions::max_steps bounds time).
constexpr size_t kMaxOutput = 256u << 20;

class Renderer {
 public:
  Renderer(const Template& t, const RenderOptions& opt) : tmpl_(t), opt_(opt) {}

  Result<std::string> run(const Dict& variables) {
    install_globals();
    for (const auto& [k, v] : variables.items) root_.vars[k] = v;
    std::string out;
    try {
      Flow f = exec(tmpl_.body, root_, out);
      if (f != Flow::kNormal) throw TemplateError("break/continue outside a loop");
    } catch (const TemplateError& e) {
      return invalid_argument(fmt::format("{}:{}:{}: {}", tmpl_.name, pos_.line, pos_.col, e.what()));
    }
    return out;
  }

 private:
  void install_globals() {
    root_.vars["raise_exception"] = Value::function("raise_exception", [](const Args& a) -> Value {
      throw TemplateError(a.positional.empty() ? "raise_exception called" : a.positional[0].str());
    });
    root_.vars["strftime_now"] = Value::function("strftime_now", [this](const Args& a) {
      const std::time_t t = opt_.now ? *opt_.now : std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[256];
      const std::string fmt_str = a.positional.empty() ? "" : a.positional[0].str();
      const size_t n = std::strftime(buf, sizeof(buf), fmt_str.c_str(), &tm);
      return Value(std::string(buf, n));
    });
    root_.vars["range"] = Value::function("range", [](const Args& a) {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& v : a.positional) {
        if (!v.is_int())
          throw TemplateError(fmt::format("'{}' object cannot be interpreted as an integer", v.type_name()));
      }
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else if (a.positional.size() >= 2) {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() >= 3) step = a.positional[2].as_int();
      } else {
        throw TemplateError("range expected at least 1 argument");
      }
      if (step == 0) throw TemplateError("range() arg 3 must not be zero");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<int64_t>(out.size()) >= kMaxRange) throw TemplateError("range too large");
        out.emplace_back(i);
      }
      return Value(std::move(out));
    });
    auto make_dict = [](bool ns) {
      return [ns](const Args& a) {
        Dict d;
        d.is_namespace = ns;
        for (const Value& p : a.positional) {
          if (!p.is_dict()) throw TemplateError("namespace()/dict() positional argument must be a mapping");
          for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
        }
        for (const auto& [k, v] : a.keyword) d.set(k, v);
        return Value(std::move(d));
      };
    };
    root_.vars["namespace"] = Value::function("namespace", make_dict(true));
    root_.vars["dict"] = Value::function("dict", make_dict(false));
  }

  Flow exec(const Body& body, Scope& scope, std::string& out) {
    for (const StmtPtr& s : body) {
      pos_ = s->pos;
      if (++steps_ > opt_.max_steps) throw TemplateError("template exceeded its evaluation budget");
      if (out.size() > kMaxOutput) throw TemplateError("template output exceeded 256 MiB");
      switch (s->kind) {
        case Stmt::Kind::kText:
          out += s->text;
          break;
        case Stmt::Kind::kOutput:
          out += eval(*s->expr, scope).str();
          break;
        case Stmt::Kind::kIf: {
          bool taken = false;
          for (const auto& [cond, branch] : s->branches) {
            if (eval(*cond, scope).truthy()) {
              taken = true;
              const Flow f = exec(branch, scope, out);
              if (f != Flow::kNormal) return f;
              break;
            }
          }
          if (!taken) {
            const Flow f = exec(s->else_body, scope, out);
            if (f != Flow::kNormal) return f;
          }
          break;
        }
        case Stmt::Kind::kFor:
          exec_for(*s, scope, out);
          break;
        case Stmt::Kind::kSet:
          exec_set(*s, scope);
          break;
        case Stmt::Kind::kSetBlock: {
          std::string captured;
          Scope inner{{}, &scope};
          exec(s->body, inner, captured);
          scope.vars[s->targets[0]] = Value(std::move(captured));
          break;
        }
        case Stmt::Kind::kMacro:
          scope.vars[s->targets[0]] = make_macro(*s);
          break;
        case Stmt::Kind::kBreak:
          return Flow::kBreak;
        case Stmt::Kind::kContinue:
          return Flow::kContinue;
      }
    }
    return Flow::kNormal;
  }

  void assign(Scope& scope, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = value;
      return;
    }
    List items = iterate(value);
    if (items.size() != targets.size()) {
      throw TemplateError(fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
  }

  void exec_set(const Stmt& s, Scope& scope) {
    Value value = eval(*s.expr, scope);
    if (s.attribute.empty()) {
      assign(scope, s.targets, value);
      return;
    }
    const Value* ns = scope.find(s.targets[0]);
    if (ns == nullptr || !ns->is_dict() || !ns->as_dict().is_namespace) {
      throw TemplateError("cannot assign attribute on non-namespace object");
    }
    // Setting an attribute is the one way a template can make a value contain itself; a cycle of
    // shared containers would never be freed, so it is refused.
    if (reaches(value, &ns->as_dict())) throw TemplateError("a namespace cannot contain itself");
    ns->as_dict().set(s.attribute, std::move(value));
  }

  static bool reaches(const Value& v, const Dict* target) {
    const NestingGuard guard;
    if (v.is_dict()) {
      if (&v.as_dict() == target) return true;
      for (const auto& kv : v.as_dict().items) {
        if (reaches(kv.second, target)) return true;
      }
    } else if (v.is_list()) {
      for (const Value& item : v.as_list()) {
        if (reaches(item, target)) return true;
      }
    }
    return false;
  }

  void exec_for(const Stmt& s, Scope& scope, std::string& out) {
    const Value iterable = eval(*s.expr, scope);
    List items = iterate(iterable);
    if (s.filter) {
      List kept;
      for (const Value& item : items) {
        if (++steps_ > opt_.max_steps) throw TemplateError("template exceeded its evaluation budget");
        Scope probe{{}, &scope};
        assign(probe, s.targets, item);
        pos_ = s.filter->pos;
        if (eval(*s.filter, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, scope, out);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    // loop.cycle is built once per loop; it reads the current index through `index`.
    auto index = std::make_shared<int64_t>(0);
    const Value cycle = Value::function("cycle", [index](const Args& a) {
      if (a.positional.empty()) throw TemplateError("no items for cycling given");
      return a.positional[static_cast<size_t>(*index) % a.positional.size()];
    });
    for (int64_t i = 0; i < n; ++i) {
      if (++steps_ > opt_.max_steps) throw TemplateError("template exceeded its evaluation budget");
      Scope inner{{}, &scope};
      assign(inner, s.targets, items[static_cast<size_t>(i)]);
      Dict loop;
      loop.items.reserve(10);
      loop.items.emplace_back("index", Value(i + 1));
      loop.items.emplace_back("index0", Value(i));
      loop.items.emplace_back("revindex", Value(n - i));
      loop.items.emplace_back("revindex0", Value(n - i - 1));
      loop.items.emplace_back("first", Value(i == 0));
      loop.items.emplace_back("last", Value(i == n - 1));
      loop.items.emplace_back("length", Value(n));
      loop.items.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                                                : Value::undefined("there is no previous item"));
      loop.items.emplace_back("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                                    : Value::undefined("there is no next item"));
      *index = i;
      loop.items.emplace_back("cycle", cycle);
      inner.vars["loop"] = Value(std::move(loop));
      const Flow f = exec(s.body, inner, out);
      if (f == Flow::kBreak) break;
    }
  }

  Value make_macro(const Stmt& s) {
    const Stmt* def = &s;
    return Value::function(s.targets[0], [this, def](const Args& a) {
      if (++depth_ > kMaxCallDepth) throw TemplateError("macro recursion too deep");
      Scope local{{}, &root_};
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [name, default_expr] = def->params[i];
        if (const Value* v = a.get(i, name)) {
          local.vars[name] = *v;
        } else if (default_expr) {
          local.vars[name] = eval(*default_expr, local);
        } else {
          local.vars[name] = Value::undefined(fmt::format("'{}' is undefined", name));
        }
      }
      std::string out;
      const Pos saved = pos_;
      exec(def->body, local, out);
      pos_ = saved;
      --depth_;
      return Value(std::move(out));
    });
  }

  Args eval_args(const Expr& e, size_t first, Scope& scope) {
    Args args;
    for (size_t i = first; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i], scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  Value eval(const Expr& e, Scope& scope) {
    pos_ = e.pos;
    if (++steps_ > opt_.max_steps) throw TemplateError("template exceeded its evaluation budget");
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName: {
        if (const Value* v = scope.find(e.name)) return *v;
        return Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List l;
        for (const auto& c : e.children) l.push_back(eval(*c, scope));
        return Value(std::move(l));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i], scope);
          if (!k.is_string()) throw TemplateError("only string keys are supported in dict literals");
          d.set(k.as_string(), eval(*e.children[i + 1], scope));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::kGetAttr: {
        Value obj = eval(*e.children[0], scope);
        pos_ = e.pos;
        return get_attribute(obj, e.name);
      }
      case Expr::Kind::kGetItem: {
        Value obj = eval(*e.children[0], scope);
        Value key = eval(*e.children[1], scope);
        pos_ = e.pos;
        return get_item(obj, key);
      }
      case Expr::Kind::kSlice: {
        Value obj = eval(*e.children[0], scope);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          parts[i] = e.children[static_cast<size_t>(i) + 1]
                         ? eval(*e.children[static_cast<size_t>(i) + 1], scope)
                         : Value::none();
        pos_ = e.pos;
        return get_slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        Value callee = eval(*e.children[0], scope);
        Args args = eval_args(e, 1, scope);
        pos_ = e.pos;
        return callee.call(args);
      }
      case Expr::Kind::kFilter: {
        Value v = eval(*e.children[0], scope);
        Args args = eval_args(e, 1, scope);
        pos_ = e.pos;
        return apply_filter(e.name, v, args);
      }
      case Expr::Kind::kTest: {
        Value v = eval(*e.children[0], scope);
        Args args = eval_args(e, 1, scope);
        pos_ = e.pos;
        return Value(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.children[0], scope);
        pos_ = e.pos;
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) throw TemplateError(v.undefined_hint());
        if (!v.is_number())
          throw TemplateError(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
        if (e.name == "+") return v.is_float() ? Value(v.as_float()) : Value(v.as_int());
        if (!v.is_float() && v.as_int() == INT64_MIN) throw TemplateError("integer overflow in unary '-'");
        return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
      }
      case Expr::Kind::kBinary: {
        Value a = eval(*e.children[0], scope);
        Value b = eval(*e.children[1], scope);
        pos_ = e.pos;
        return binary_op(e.name, a, b);
      }
      case Expr::Kind::kAnd: {
        Value a = eval(*e.children[0], scope);
        return a.truthy() ? eval(*e.children[1], scope) : a;
      }
      case Expr::Kind::kOr: {
        Value a = eval(*e.children[0], scope);
        return a.truthy() ? a : eval(*e.children[1], scope);
      }
      case Expr::Kind::kCond: {
        if (eval(*e.children[0], scope).truthy()) return eval(*e.children[1], scope);
        if (e.children[2]) return eval(*e.children[2], scope);
        return Value::undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
    }
    return {};
  }

  const Template& tmpl_;
  const RenderOptions& opt_;
  Scope root_;
  Pos pos_;
  int depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

Result<std::string> render(const Template& tmpl, const Dict& variables, const RenderOptions& options) {
  Renderer r(tmpl, options);
  return r.run(variables);
}

}  // namespace day0::jinja
