#pragma once
// Syntax tree of a parsed Jinja template. Every node keeps its template line and column for errors.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "day0/tokenizer/jinja/value.h"

namespace day0::jinja {

struct Pos {
  int line = 1;
  int col = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // children = items
    kTuple,    // children = items
    kDict,     // children = key, value, key, value, ...
    kGetAttr,  // children[0] . name
    kGetItem,  // children[0] [ children[1] ]
    kSlice,    // children[0] [ children[1] : children[2] : children[3] ] (null = omitted)
    kCall,     // children[0] ( children[1..], kwargs )
    kFilter,   // children[0] | name ( children[1..], kwargs )
    kTest,     // children[0] is [not] name ( children[1..] )
    kUnary,    // name ("-", "+", "not") children[0]
    kBinary,   // children[0] name children[1]  (arithmetic, comparison, in, ~)
    kAnd,
    kOr,
    kCond,  // children[1] if children[0] else children[2] (null else = undefined)
  };
  Kind kind;
  Pos pos;
  std::string name;
  Value literal;
  bool negated = false;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  Pos pos;
  std::string text;                                     // kText
  ExprPtr expr;                                         // kOutput value, kSet value, kFor iterable
  std::vector<std::pair<ExprPtr, Body>> branches;       // kIf: (condition, body)...
  Body body;                                            // kFor / kSetBlock / kMacro body
  Body else_body;                                       // kIf else, kFor else (empty iterable)
  ExprPtr filter;                                       // kFor "if" condition
  std::vector<std::string> targets;                     // kFor loop variables, kSet names, kMacro name at [0]
  std::string attribute;                                // kSet "ns.attr": targets[0] = ns, attribute = attr
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro parameters and defaults
};

struct Template {
  Body body;
  std::string name;
};

}  // namespace day0::jinja
