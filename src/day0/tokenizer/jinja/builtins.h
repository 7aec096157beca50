#pragma once
// Jinja filters and tests, Python methods of str/dict/list, attribute and item access, operators.
#include <string>

#include "day0/tokenizer/jinja/value.h"

namespace day0::jinja {

Value apply_filter(const std::string& name, const Value& value, const Args& args);
bool apply_test(const std::string& name, const Value& value, const Args& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// obj.name: Python attribute first (methods), then item; Undefined when missing.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: item first, then attribute; Undefined when missing.
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // Python "in"
// Items a for loop visits (dict: keys; str: characters); throws for non-iterables.
List iterate(const Value& v);

}  // namespace day0::jinja
