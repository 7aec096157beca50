// The Jinja interpreter on small templates: jinja2 whitespace control, Python value semantics, filters,
// scoping, and errors that name the template line and column.
#include <gtest/gtest.h>

#include "day0/tokenizer/chat_template.h"
#include "day0/tokenizer/jinja/interpreter.h"
#include "day0/tokenizer/jinja/parser.h"
#include "tokenizer/tokenizer_test_util.h"

namespace day0::testing {
namespace {

using ojson = nlohmann::ordered_json;

Result<std::string> render(const std::string& source, const std::string& vars_json = "{}",
                           int64_t max_steps = 100'000) {
  D0_ASSIGN_OR_RETURN(auto tmpl, jinja::parse_template(source, "t.jinja"));
  jinja::Value vars = jinja::Value::from_json(ojson::parse(vars_json));
  jinja::RenderOptions options;
  options.max_steps = max_steps;
  return jinja::render(*tmpl, vars.as_dict(), options);
}

std::string ok(const std::string& source, const std::string& vars_json = "{}") {
  auto r = render(source, vars_json);
  EXPECT_TRUE(r.is_ok()) << source << " -> " << r.status().to_string();
  return r.is_ok() ? *r : "<error>";
}

TEST(Jinja, WhitespaceControlLikeTransformers) {
  // trim_blocks eats the newline after a tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(ok("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(ok("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(ok("{{ 'a' }}\n{{- 'b' }}"), "ab");
  EXPECT_EQ(ok("a\n    {# comment #}\nb"), "a\nb");
  EXPECT_EQ(ok("{%+ if true %}x{% endif %}"), "x");
}

TEST(Jinja, PythonValueSemantics) {
  EXPECT_EQ(ok("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(ok("{{ {'k': \"it's\"} }}"), "{'k': \"it's\"}");
  EXPECT_EQ(ok("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1e20 }} {{ 0.0001 }}"),
            "3 -4 3.5 2 1024 1e+20 0.0001");
  // Python's modulo at the int64 edges (Python prints 20 -8 -21 -2 2); floor(a / b) * b overflowed here.
  EXPECT_EQ(ok("{{ (-9223372036854775807 - 1) % 28 }} {{ (-9223372036854775807 - 1) % -28 }} "
               "{{ 9223372036854775807 % -28 }} {{ 7 % -3 }} {{ -7 % 3 }}"),
            "20 -8 -21 -2 2");
  EXPECT_EQ(ok("{{ 'abc'[::-1] }}{{ [1,2,3][1:] }}{{ [1,2,3][-1] }}"), "cba[2, 3]3");
  EXPECT_EQ(ok("{{ '  a b  '.strip() }}|{{ 'x\\n'.rstrip('\\n') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b "
               "'.split() }}"),
            "a b|x|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(ok("{{ 'x' if false }}|{{ missing }}|{{ none }}"), "||None");
  EXPECT_EQ(ok("{{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "True True True True");
}

TEST(Jinja, FiltersTestsAndTojson) {
  const std::string vars =
      R"({"d": {"b": 1, "a": [1, 2.5, "é\n"]}, "xs": [{"n": "x", "on": true}, {"n": "y", "on": false}]})";
  EXPECT_EQ(ok("{{ d | tojson }}", vars), R"({"b": 1, "a": [1, 2.5, "é\n"]})");
  EXPECT_EQ(ok("{{ d | tojson(indent=2) }}", vars),
            "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2.5,\n    \"é\\n\"\n  ]\n}");
  EXPECT_EQ(ok("{{ d | tojson(sort_keys=true) }}", vars), R"({"a": [1, 2.5, "é\n"], "b": 1})");
  EXPECT_EQ(ok("{{ xs | selectattr('on') | map(attribute='n') | join(',') }}", vars), "x");
  EXPECT_EQ(ok("{{ xs | rejectattr('on') | list | length }}", vars), "1");
  EXPECT_EQ(ok("{{ ['a', 'b', 'c'] | reject('equalto', 'b') | join }}"), "ac");
  EXPECT_EQ(ok("{% for k, v in d | items %}{{ k }}{% endfor %}", vars), "ba");
  EXPECT_EQ(ok("{{ d is mapping }}{{ 'x' is string }}{{ 3 is divisibleby 3 }}{{ u is not defined }}", vars),
            "TrueTrueTrueTrue");
  EXPECT_EQ(ok("{{ missing | default('dflt') }} {{ '  t ' | trim }} {{ 'ab' | upper }}"), "dflt t AB");
  // Jinja2's escape is markupsafe's: numeric references for both quotes.
  EXPECT_EQ(ok("{{ s | escape }}|{{ s | e }}", R"({"s": "<b a=\"1\">&'"})"),
            "&lt;b a=&#34;1&#34;&gt;&amp;&#39;|&lt;b a=&#34;1&#34;&gt;&amp;&#39;");
}

TEST(Jinja, ScopingLoopsMacrosNamespace) {
  EXPECT_EQ(ok("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(ok("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = i %}{% endfor %}{{ ns.x }}"),
            "2");
  EXPECT_EQ(ok("{% for i in 'abc' %}{{ loop.cycle('x', 'y') }}{{ loop.previtem }}{% endfor %}"), "xyaxb");
  EXPECT_EQ(ok("{% for i in range(5) if i is odd %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last "
               "}}{% endfor %}"),
            "1/2,2/2");
  EXPECT_EQ(ok("{% for i in range(9) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% "
               "endif %}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(ok("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(ok("{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}"), "[1B][23]");
  EXPECT_EQ(ok("{% set s %}in{{ 1 + 1 }}{% endset %}{{ s }}"), "in2");
  EXPECT_EQ(ok("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
}

TEST(Jinja, ErrorsCarryLineAndColumn) {
  auto r = render("line1\n{{ x + }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("t.jinja:2:"), std::string::npos) << r.status().to_string();
  r = render("{% include 'other.jinja' %}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("unsupported statement 'include'"), std::string::npos)
      << r.status().to_string();
  r = render("{% if x %}never closed");
  EXPECT_FALSE(r.is_ok());
  r = render("ok\n  {{ raise_exception('bad role') }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("t.jinja:2:"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("bad role"), std::string::npos);
  EXPECT_FALSE(render("{{ 'a' + {} }}").is_ok());         // str + dict is a TypeError
  EXPECT_FALSE(render("{{ 'x' in none }}").is_ok());      // NoneType is not iterable
  EXPECT_FALSE(render("{{ none.split(',') }}").is_ok());  // calling an undefined method
  EXPECT_FALSE(render("{{ missing.attr }}").is_ok());     // attribute of an undefined
  EXPECT_FALSE(render("{{ missing | tojson }}").is_ok());
  EXPECT_FALSE(render("{{ x | no_such_filter }}").is_ok());
}

TEST(Jinja, HostileTemplatesFailCleanly) {
  EXPECT_FALSE(render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").is_ok());
  EXPECT_FALSE(render("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}").is_ok());
  auto slow = render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}");
  ASSERT_FALSE(slow.is_ok());
  EXPECT_NE(slow.status().message().find("budget"), std::string::npos) << slow.status().to_string();
  EXPECT_FALSE(render("{{ 'ab' * 100000000000 }}").is_ok());
  // An indentation wider than any template needs fails with the width, never clamped in silence.
  for (const char* t :
       {"{{ 'a\\nb' | indent(1000000000000) }}", "{{ [1] | tojson(indent=1000000000000) }}"}) {
    auto wide = render(t);
    ASSERT_FALSE(wide.is_ok()) << t;
    EXPECT_NE(wide.status().message().find("indent 1000000000000 is wider than"), std::string::npos)
        << wide.status().to_string();
  }
  EXPECT_EQ(ok("{{ 'a\\nb' | indent(-3) }}|{{ 'a\\nb' | indent(2) }}"), "a\nb|a\n  b");
}

TEST(Jinja, ApplyChatTemplateUsesTheFolderTemplateAndSpecialTokens) {
  D0_SKIP_WITHOUT_SHARED();
  auto tok = shared_tokenizer("llama-3");
  ASSERT_NE(tok, nullptr);
  tokenizer::ChatRequest req;
  req.messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  auto out = tokenizer::apply_chat_template(*tok, req);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->rfind("<|begin_of_text|>", 0), 0u) << *out;
  EXPECT_NE(out->find("Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"), std::string::npos)
      << *out;
  auto kimi = shared_tokenizer("kimi-k2");
  ASSERT_NE(kimi, nullptr);
  EXPECT_EQ(tokenizer::apply_chat_template(*kimi, req).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tok->special_tokens().bos_id, 128000);
  EXPECT_TRUE(tok->special_tokens().add_bos);
  auto deepseek = shared_tokenizer("deepseek-v3");
  ASSERT_NE(deepseek, nullptr);
  EXPECT_EQ(deepseek->special_tokens().bos_id, 0);
  EXPECT_EQ(deepseek->special_tokens().eos_id, 1);
}

}  // namespace
}  // namespace day0::testing
