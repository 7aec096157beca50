#include <gtest/gtest.h>

#include <limits>

#include "day0/core/checked_math.h"
#include "day0/core/dtype.h"
#include "day0/core/error.h"
#include "day0/core/html_escape.h"
#include "day0/core/human.h"
#include "day0/core/status.h"

namespace day0 {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("expected a positive integer, found " + std::to_string(v));
  return v;
}

Result<int> doubled(int v) {
  D0_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status st = invalid_argument("num_attention_heads: expected a positive integer, found -3");
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(st.with_context("config.json").to_string(),
            "invalid argument: config.json: num_attention_heads: expected a positive integer, found -3");
  EXPECT_TRUE(Status::ok().with_context("x").is_ok());
}

TEST(Result, PropagatesErrorsAndValues) {
  EXPECT_EQ(*doubled(21), 42);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THROW((void)bad.value(), InternalError);
}

TEST(Result, OkStatusWithoutValueIsInternal) {
  Result<int> r{Status::ok()};
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Check, ThrowsWithFileAndLine) {
  try {
    D0_CHECK_MSG(1 + 1 == 3, "arithmetic");
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("core_test.cpp"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("arithmetic"), std::string::npos);
  }
}

TEST(DType, NamesRoundTripAndBits) {
  for (DType d : kAllDTypes) {
    auto parsed = parse_dtype(dtype_name(d));
    ASSERT_TRUE(parsed.has_value()) << dtype_name(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(dtype_bits(DType::kBF16), 16);
  EXPECT_EQ(dtype_bits(DType::kF8E4M3), 8);
  EXPECT_EQ(dtype_bits(DType::kF4), 4);
  EXPECT_FALSE(parse_dtype("F12").has_value());
}

TEST(CheckedMath, DetectsOverflow) {
  EXPECT_FALSE(checked_mul(uint64_t{1} << 40, uint64_t{1} << 30).has_value());
  EXPECT_EQ(*checked_mul(uint64_t{1} << 20, uint64_t{1} << 20), uint64_t{1} << 40);
  const int64_t dims[] = {1'000'000'000'000'000, 1'000'000};
  EXPECT_FALSE(checked_product(dims).has_value());
  const int64_t negative[] = {4, -1};
  EXPECT_FALSE(checked_product(negative).has_value());
  const int64_t ok[] = {7168, 129280};
  EXPECT_EQ(*checked_product(ok), 926679040u);
  EXPECT_FALSE(checked_add(std::numeric_limits<int64_t>::max(), int64_t{1}).has_value());
}

TEST(Human, FormatsCountsBytesAndSeconds) {
  EXPECT_EQ(human_count(671.03e9), "671.03 B");
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_bytes(12e12), "12.00 TB");
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes_binary(5.0 * 1024 * 1024), "5.00 MiB");
  EXPECT_EQ(with_commas(1026408232448), "1,026,408,232,448");
  EXPECT_EQ(with_commas(-1234), "-1,234");
  EXPECT_EQ(with_commas(0), "0");
  EXPECT_EQ(human_seconds(0.0123), "12.3 ms");
}

TEST(HtmlEscape, MatchesMarkupsafe) {
  // markupsafe.escape("<a href=\"x\">Tom & Jerry's</a>"), the Jinja `escape` filter's reference.
  EXPECT_EQ(html_escape("<a href=\"x\">Tom & Jerry's</a>"),
            "&lt;a href=&#34;x&#34;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
  EXPECT_EQ(html_escape("plain é"), "plain é");
  EXPECT_EQ(html_escape(""), "");
}

}  // namespace
}  // namespace day0
