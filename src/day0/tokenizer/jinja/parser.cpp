#include "day0/tokenizer/jinja/parser.h"

#include <set>

#include <fmt/format.h>

namespace day0::jinja {
namespace {

// Thrown inside the parser, turned into a Status at the boundary.
struct ParseFailure {
  Pos pos;
  std::string message;
};

constexpr int kMaxNesting = 200;

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string name) : toks_(std::move(tokens)), name_(std::move(name)) {}

  Template parse() {
    Template t;
    t.name = name_;
    std::string ender;
    t.body = parse_body({}, ender);
    return t;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return toks_[std::min(i_ + ahead, toks_.size() - 1)]; }
  const Token& next() { return toks_[std::min(i_++, toks_.size() - 1)]; }
  [[noreturn]] void fail(const Pos& p, const std::string& msg) const { throw ParseFailure{p, msg}; }

  // Bounds recursion so that deeply nested input is an error, not a stack overflow.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail(p.peek().pos, "template nests too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == n;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek().pos, fmt::format("expected '{}', found {}", op, describe(peek())));
    ++i_;
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::kName)
      fail(peek().pos, fmt::format("expected a name, found {}", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Token::Kind::kBlockEnd)
      fail(peek().pos, fmt::format("expected '%}}', found {}", describe(peek())));
    ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "end of template";
      case Token::Kind::kBlockEnd:
        return "'%}'";
      case Token::Kind::kVarEnd:
        return "'}}'";
      case Token::Kind::kText:
        return "text";
      case Token::Kind::kString:
        return "a string";
      default:
        return fmt::format("'{}'", t.text);
    }
  }

  // Statements until a block whose keyword is in `enders` (consumed; its name stored in `ender`).
  Body parse_body(const std::set<std::string>& enders, std::string& ender) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == Token::Kind::kEnd) {
        if (!enders.empty())
          fail(t.pos, fmt::format("unexpected end of template, expected '{}'", *enders.begin()));
        return body;
      }
      if (t.kind == Token::Kind::kText) {
        auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::kText, t.pos});
        s->text = t.text;
        body.push_back(std::move(s));
        ++i_;
        continue;
      }
      if (t.kind == Token::Kind::kVarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::kOutput, t.pos});
        s->expr = parse_tuple_or_expr();
        if (peek().kind != Token::Kind::kVarEnd)
          fail(peek().pos, fmt::format("expected '}}}}', found {}", describe(peek())));
        ++i_;
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != Token::Kind::kBlockBegin) fail(t.pos, "unexpected token");
      const Token& kw = peek(1);
      if (kw.kind != Token::Kind::kName) fail(kw.pos, "expected a statement keyword");
      if (enders.count(kw.text)) {
        i_ += 2;
        ender = kw.text;
        return body;
      }
      i_ += 2;
      body.push_back(parse_statement(kw));
    }
  }

  StmtPtr parse_statement(const Token& kw) {
    DepthGuard guard(*this);
    const std::string& k = kw.text;
    if (k == "if") return parse_if(kw.pos);
    if (k == "for") return parse_for(kw.pos);
    if (k == "set") return parse_set(kw.pos);
    if (k == "macro") return parse_macro(kw.pos);
    if (k == "break" || k == "continue") {
      expect_block_end();
      return std::make_unique<Stmt>(Stmt{k == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, kw.pos});
    }
    if (k == "generation") {  // transformers' assistant-mask marker: renders its body unchanged
      expect_block_end();
      auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::kIf, kw.pos});
      std::string ender;
      auto lit = std::make_unique<Expr>(Expr{Expr::Kind::kLiteral, kw.pos});
      lit->literal = Value(true);
      s->branches.emplace_back(std::move(lit), parse_body({"endgeneration"}, ender));
      expect_block_end();
      return s;
    }
    fail(kw.pos, fmt::format("unsupported statement '{}'", k));
  }

  StmtPtr parse_if(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::kIf, pos});
    ExprPtr cond = parse_expr();
    expect_block_end();
    while (true) {
      std::string ender;
      Body body = parse_body({"elif", "else", "endif"}, ender);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (ender == "elif") {
        cond = parse_expr();
        expect_block_end();
        continue;
      }
      if (ender == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, ender);
      }
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::kFor, pos});
    s->targets.push_back(expect_name());
    while (is_op(",")) {
      ++i_;
      s->targets.push_back(expect_name());
    }
    if (!is_name("in")) fail(peek().pos, "expected 'in' in for loop");
    ++i_;
    s->expr = parse_or();  // no conditional expression: a trailing "if" filters the loop
    if (is_name("if")) {
      ++i_;
      s->filter = parse_expr();
    }
    if (is_name("recursive")) fail(peek().pos, "recursive loops are not supported");
    expect_block_end();
    std::string ender;
    s->body = parse_body({"else", "endfor"}, ender);
    if (ender == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, ender);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::kSet, pos});
    s->targets.push_back(expect_name());
    if (is_op(".")) {
      ++i_;
      s->attribute = expect_name();
    } else {
      while (is_op(",")) {
        ++i_;
        s->targets.push_back(expect_name());
      }
    }
    if (peek().kind == Token::Kind::kBlockEnd && s->attribute.empty() && s->targets.size() == 1) {
      ++i_;
      s->kind = Stmt::Kind::kSetBlock;
      std::string ender;
      s->body = parse_body({"endset"}, ender);
      expect_block_end();
      return s;
    }
    expect_op("=");
    s->expr = parse_tuple_or_expr();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::kMacro, pos});
    s->targets.push_back(expect_name());
    expect_op("(");
    while (!is_op(")")) {
      std::string param = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        ++i_;
        def = parse_expr();
      }
      s->params.emplace_back(std::move(param), std::move(def));
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
    expect_block_end();
    std::string ender;
    s->body = parse_body({"endmacro"}, ender);
    if (peek().kind == Token::Kind::kName) ++i_;  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  ExprPtr make(Expr::Kind kind, Pos pos) { return std::make_unique<Expr>(Expr{kind, pos}); }

  // "a, b" without brackets is a tuple (e.g. {% set a, b = 1, 2 %}).
  ExprPtr parse_tuple_or_expr() {
    const Pos pos = peek().pos;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::kTuple, pos);
    t->children.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      if (peek().kind == Token::Kind::kBlockEnd || peek().kind == Token::Kind::kVarEnd) break;
      t->children.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr() {
    DepthGuard guard(*this);
    ExprPtr value = parse_or();
    while (is_name("if")) {
      const Pos pos = next().pos;
      auto c = make(Expr::Kind::kCond, pos);
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (is_name("else")) {
        ++i_;
        otherwise = parse_expr();
      }
      c->children.push_back(std::move(cond));
      c->children.push_back(std::move(value));
      c->children.push_back(std::move(otherwise));
      value = std::move(c);
    }
    return value;
  }

  ExprPtr binary(Expr::Kind kind, const std::string& op, ExprPtr a, ExprPtr b, Pos pos) {
    auto e = make(kind, pos);
    e->name = op;
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Pos pos = next().pos;
      left = binary(Expr::Kind::kOr, "or", std::move(left), parse_and(), pos);
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Pos pos = next().pos;
      left = binary(Expr::Kind::kAnd, "and", std::move(left), parse_not(), pos);
    }
    return left;
  }
  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      const Pos pos = next().pos;
      auto e = make(Expr::Kind::kUnary, pos);
      e->name = "not";
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      const Pos pos = peek().pos;
      std::string op;
      if (peek().kind == Token::Kind::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        return left;
      }
      left = binary(Expr::Kind::kBinary, op, std::move(left), parse_math1(), pos);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(Expr::Kind::kBinary, t.text, std::move(left), parse_concat(), t.pos);
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Pos pos = next().pos;
      left = binary(Expr::Kind::kBinary, "~", std::move(left), parse_math2(), pos);
    }
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(Expr::Kind::kBinary, t.text, std::move(left), parse_pow(), t.pos);
    }
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (is_op("**")) {
      const Pos pos = next().pos;
      left = binary(Expr::Kind::kBinary, "**", std::move(left), parse_unary(), pos);
    }
    return left;
  }
  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = make(Expr::Kind::kUnary, t.pos);
      node->name = t.text;
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filters(std::move(node));
    return node;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
        std::string key = next().text;
        ++i_;
        call.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        call.children.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const Pos pos = next().pos;
        auto e = make(Expr::Kind::kGetAttr, pos);
        if (peek().kind == Token::Kind::kInt) {
          e = make(Expr::Kind::kGetItem, pos);
          e->children.push_back(std::move(node));
          auto idx = make(Expr::Kind::kLiteral, pos);
          idx->literal = next().number;
          e->children.push_back(std::move(idx));
        } else {
          e->name = expect_name();
          e->children.push_back(std::move(node));
        }
        node = std::move(e);
      } else if (is_op("[")) {
        const Pos pos = next().pos;
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            ++i_;
            if (++colons > 2) fail(pos, "too many ':' in subscript");
            continue;
          }
          if (parts[colons]) fail(peek().pos, "expected ':' or ']' in subscript");
          parts[colons] = parse_expr();
        }
        ++i_;
        if (colons == 0) {
          if (!parts[0]) fail(pos, "empty subscript");
          auto e = make(Expr::Kind::kGetItem, pos);
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(parts[0]));
          node = std::move(e);
        } else {
          auto e = make(Expr::Kind::kSlice, pos);
          e->children.push_back(std::move(node));
          for (auto& p : parts) e->children.push_back(std::move(p));
          node = std::move(e);
        }
      } else if (is_op("(")) {
        auto e = make(Expr::Kind::kCall, peek().pos);
        e->children.push_back(std::move(node));
        parse_call_args(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        const Pos pos = next().pos;
        auto e = make(Expr::Kind::kFilter, pos);
        e->name = expect_name();
        while (is_op(".")) {  // dotted filter names
          ++i_;
          e->name += '.';  // two appends: GCC 12 misreads "." + string&& as an overlapping copy (-Wrestrict)
          e->name += expect_name();
        }
        e->children.push_back(std::move(node));
        if (is_op("(")) parse_call_args(*e);
        node = std::move(e);
      } else if (is_name("is")) {
        const Pos pos = next().pos;
        auto e = make(Expr::Kind::kTest, pos);
        if (is_name("not")) {
          ++i_;
          e->negated = true;
        }
        e->name = expect_name();
        e->children.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(*e);
        } else if (takes_bare_argument()) {
          e->children.push_back(parse_primary_with_postfix());
        }
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  // `x is divisibleby 3`, `x is sameas false`: a single argument without parentheses.
  bool takes_bare_argument() const {
    const Token& t = peek();
    if (t.kind == Token::Kind::kString || t.kind == Token::Kind::kInt || t.kind == Token::Kind::kFloat)
      return true;
    if (t.kind == Token::Kind::kName) {
      static const std::set<std::string> kStop = {"else", "or", "and", "if", "in", "not", "is"};
      return !kStop.count(t.text);
    }
    return t.kind == Token::Kind::kOp && (t.text == "[" || t.text == "{");
  }
  ExprPtr parse_primary_with_postfix() { return parse_postfix(parse_primary()); }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::kString: {
        auto e = make(Expr::Kind::kLiteral, t.pos);
        std::string s;
        while (peek().kind == Token::Kind::kString) s += next().text;  // adjacent literals concatenate
        e->literal = Value(std::move(s));
        return e;
      }
      case Token::Kind::kInt:
      case Token::Kind::kFloat: {
        auto e = make(Expr::Kind::kLiteral, t.pos);
        e->literal = next().number;
        return e;
      }
      case Token::Kind::kName: {
        ++i_;
        auto e = make(Expr::Kind::kLiteral, t.pos);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          ++i_;
          if (is_op(")")) {
            ++i_;
            return make(Expr::Kind::kTuple, t.pos);
          }
          ExprPtr inner = parse_expr();
          if (is_op(",")) {
            auto tup = make(Expr::Kind::kTuple, t.pos);
            tup->children.push_back(std::move(inner));
            while (is_op(",")) {
              ++i_;
              if (is_op(")")) break;
              tup->children.push_back(parse_expr());
            }
            inner = std::move(tup);
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          ++i_;
          auto e = make(Expr::Kind::kList, t.pos);
          while (!is_op("]")) {
            e->children.push_back(parse_expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          ++i_;
          auto e = make(Expr::Kind::kDict, t.pos);
          while (!is_op("}")) {
            e->children.push_back(parse_expr());
            expect_op(":");
            e->children.push_back(parse_expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    fail(t.pos, fmt::format("unexpected {}", describe(t)));
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  std::string name_;
};

}  // namespace

Result<std::shared_ptr<const Template>> parse_template(std::string_view source, const std::string& name,
                                                       const LexOptions& options) {
  D0_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(source, name, options));
  try {
    Parser p(std::move(tokens), name);
    return std::shared_ptr<const Template>(std::make_shared<Template>(p.parse()));
  } catch (const ParseFailure& f) {
    return parse_error(fmt::format("{}:{}:{}: {}", name, f.pos.line, f.pos.col, f.message));
  }
}

}  // namespace day0::jinja
