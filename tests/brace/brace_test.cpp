// Tests for wds::brace_expand and wds::expand_urls against the behaviour of Python's braceexpand
// 0.1.7 and webdataset's expand_urls (shared/reference/webdataset-behaviour.md, section 2).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "wds/brace.hpp"
#include "wds/error.hpp"

namespace {

using Names = std::vector<std::string>;

struct Case {
  std::string pattern;
  Names expected;
};

// Section 2.3 of the reference first, in its order, then cases derived from the rules in 2.2.
const Case kCases[] = {
    // Integer ranges.
    {"shard-{000..003}.tar", {"shard-000.tar", "shard-001.tar", "shard-002.tar", "shard-003.tar"}},
    {"shard-{0..3}.tar", {"shard-0.tar", "shard-1.tar", "shard-2.tar", "shard-3.tar"}},
    {"shard-{00..10..5}.tar", {"shard-00.tar", "shard-05.tar", "shard-10.tar"}},
    {"shard-{1..10..3}.tar", {"shard-1.tar", "shard-4.tar", "shard-7.tar", "shard-10.tar"}},
    {"shard-{10..1..3}.tar", {"shard-10.tar", "shard-7.tar", "shard-4.tar", "shard-1.tar"}},
    {"shard-{1..10..-3}.tar", {"shard-1.tar", "shard-4.tar", "shard-7.tar", "shard-10.tar"}},
    {"shard-{5..1}.tar",
     {"shard-5.tar", "shard-4.tar", "shard-3.tar", "shard-2.tar", "shard-1.tar"}},
    {"{0..10..4}", {"0", "4", "8"}},
    {"{10..0..4}", {"10", "6", "2"}},
    {"{1..3..0}", {"1", "2", "3"}},
    {"{1..1..5}", {"1"}},
    {"{-2..2}", {"-2", "-1", "0", "1", "2"}},
    {"{-02..2}", {"-02", "-01", "000", "001", "002"}},
    {"{-05..05..5}", {"-05", "000", "005"}},
    {"{0..-3..2}", {"0", "-2"}},
    {"{08..11}", {"08", "09", "10", "11"}},
    {"{8..011}", {"008", "009", "010", "011"}},
    {"{0001..3}", {"0001", "0002", "0003"}},
    {"{01..1}", {"01"}},
    {"{0..0}", {"0"}},
    // Letter ranges.
    {"{a..e}", {"a", "b", "c", "d", "e"}},
    {"{a..e..2}", {"a", "c", "e"}},
    {"{e..a}", {"e", "d", "c", "b", "a"}},
    {"{Y..b}", {"Y", "Z", "a", "b"}},
    {"{b..Y}", {"b", "a", "Z", "Y"}},
    {"{Z..a}", {"Z", "a"}},
    {"{A..z..10}", {"A", "K", "U", "e", "o", "y"}},
    {"{a..z..0}", {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
                   "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z"}},
    // Not ranges: kept literally.
    {"{aa..c}", {"{aa..c}"}},
    {"{1.5..3}", {"{1.5..3}"}},
    {"{1..3..}", {"{1..3..}"}},
    {"{ 1..3}", {"{ 1..3}"}},
    {"{1...3}", {"{1...3}"}},
    // Lists and products.
    {"{a,b,c}.tar", {"a.tar", "b.tar", "c.tar"}},
    {"{a,b}{1,2}", {"a1", "a2", "b1", "b2"}},
    {"{1..3}{a..b}", {"1a", "1b", "2a", "2b", "3a", "3b"}},
    {"a{1..2}{b,c}{.tar,.tgz}",
     {"a1b.tar", "a1b.tgz", "a1c.tar", "a1c.tgz", "a2b.tar", "a2b.tgz", "a2c.tar", "a2c.tgz"}},
    {"x{,_val}.tar", {"x.tar", "x_val.tar"}},
    {"{a,}", {"a", ""}},
    {"{,}", {"", ""}},
    {"{a, b}", {"a", " b"}},
    {"{a}", {"{a}"}},
    {"{}", {"{}"}},
    {"a{}b", {"a{}b"}},
    // Nesting.
    {"python{2.{5..7},3.{2,3}}", {"python2.5", "python2.6", "python2.7", "python3.2", "python3.3"}},
    {"{{a,b},c}", {"a", "b", "c"}},
    {"{x{1..2},y}", {"x1", "x2", "y"}},
    {"{{1..2}}", {"{1}", "{2}"}},
    {"{{1,2}}", {"{1}", "{2}"}},
    // Escapes.
    {R"(a\{b,c\})", {"a{b,c}"}},
    {R"(\{1..3\})", {"{1..3}"}},
    {R"(a\,b{1,2})", {"a,b1", "a,b2"}},
    {R"({a\,b,c})", {"a,b", "c"}},
    {R"(a\\b{1,2})", {R"(a\b1)", R"(a\b2)"}},
    // Empty pattern and URL-shaped patterns.
    {"", {""}},
    {"s3://b/{a,b}/{0..1}.tar",
     {"s3://b/a/0.tar", "s3://b/a/1.tar", "s3://b/b/0.tar", "s3://b/b/1.tar"}},
    // brace_expand itself does not split on "::", so this is a 3 x 2 product.
    {"gs://p/t-{000000..000002}.tar::http://h/x-{0..1}.tar",
     {"gs://p/t-000000.tar::http://h/x-0.tar", "gs://p/t-000000.tar::http://h/x-1.tar",
      "gs://p/t-000001.tar::http://h/x-0.tar", "gs://p/t-000001.tar::http://h/x-1.tar",
      "gs://p/t-000002.tar::http://h/x-0.tar", "gs://p/t-000002.tar::http://h/x-1.tar"}},

    // Derived: products of three groups, leftmost slowest.
    {"{a,b}{1..2}{x,y}", {"a1x", "a1y", "a2x", "a2y", "b1x", "b1y", "b2x", "b2y"}},
    {"d{A..B}/{0..1}-{p,q}.tar",
     {"dA/0-p.tar", "dA/0-q.tar", "dA/1-p.tar", "dA/1-q.tar", "dB/0-p.tar", "dB/0-q.tar",
      "dB/1-p.tar", "dB/1-q.tar"}},
    // Derived: deeper nesting and lists with empty items.
    {"{a{b{c,d},e},f}", {"abc", "abd", "ae", "f"}},
    {"{,a,}", {"", "a", ""}},
    {"x{{a,b}{1,2}}y", {"x{a1}y", "x{a2}y", "x{b1}y", "x{b2}y"}},
    {"{}{a,b}", {"{}a", "{}b"}},
    {"{{}}", {"{{}}"}},
    {"{a,{b,{c,d}},e}", {"a", "b", "c", "d", "e"}},
    {"{a,{b,c}x,{d,e}}", {"a", "bx", "cx", "d", "e"}},
    // Derived: negative and padded negative ranges.
    {"{-3..-1}", {"-3", "-2", "-1"}},
    {"{-1..-3}", {"-1", "-2", "-3"}},
    {"{-003..2..2}", {"-003", "-001", "0001"}},
    {"{-10..-08}", {"-10", "-09", "-08"}},
    {"{-0..2}", {"0", "1", "2"}},
    {"{-0..02}", {"00", "01", "02"}},
    {"{0..0..0}", {"0"}},
    {"{9223372036854775806..9223372036854775807}", {"9223372036854775806", "9223372036854775807"}},
    {"{1..3..99999999999999999999999}", {"1"}},
    {"{1..3..2..4}", {"{1..3..2..4}"}},
    {"{a..}", {"{a..}"}},
    // Derived: letter ranges with steps.
    {"{A..E..2}", {"A", "C", "E"}},
    {"{z..a..5}", {"z", "u", "p", "k", "f", "a"}},
    {"{Z..A..-12}", {"Z", "N", "B"}},
    {"{c..c}", {"c"}},
    // Derived: escapes inside lists and literal braces.
    {R"({a\},b})", {"a}", "b"}},
    {R"({a,b\,c})", {"a", "b,c"}},
    {R"({\{,\}})", {"{", "}"}},
    {"a b{1,2}", {"a b1", "a b2"}},
    // braceexpand 0.1.7 unescapes once per nesting level, so doubled backslashes inside a group
    // vanish entirely.
    {R"({a\\b,c})", {"ab", "c"}},
    {R"({a\\\\b,c})", {R"(a\b)", "c"}},
    {R"(x{{a\\b}})", {"x{{ab}}"}},
    {R"({a\\,b}c)", {"ac", "bc"}},
    // A lone trailing backslash and a backslash before a newline are kept.
    {R"(a\)", {R"(a\)"}},
    {"a\\\nb{1,2}", {"a\\\nb1", "a\\\nb2"}},
    // Python's '$' matches before a final newline, so this is still a range.
    {"{1..3\n}", {"1", "2", "3"}},
};

TEST(BraceExpand, Table) {
  for (const Case& c : kCases) {
    SCOPED_TRACE("pattern: \"" + c.pattern + "\"");
    EXPECT_EQ(wds::brace_expand(c.pattern), c.expected);
  }
}

TEST(BraceExpand, EscapeOffKeepsBackslashesLiteral) {
  EXPECT_EQ(wds::brace_expand(R"(\{1,2})", false), (Names{R"(\1)", R"(\2)"}));
  EXPECT_EQ(wds::brace_expand(R"(a\,b{x,y\})", false), (Names{R"(a\,bx)", R"(a\,by\)"}));
}

// Checks that pattern is rejected as unbalanced, blaming `brace` at `position`.
void ExpectUnbalanced(std::string_view pattern, char brace, std::size_t position) {
  try {
    wds::brace_expand(pattern);
    ADD_FAILURE() << "no error for \"" << pattern << "\"";
  } catch (const wds::Error& e) {
    EXPECT_EQ(e.code(), wds::ErrorCode::invalid_argument);
    EXPECT_EQ(e.url(), pattern);
    EXPECT_EQ(e.member(), "");
    std::string expected =
        std::string("unbalanced '") + brace + "' at position " + std::to_string(position);
    EXPECT_EQ(e.cause(), expected);
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(BraceExpandError, StrayClosingBrace) {
  ExpectUnbalanced("a}b", '}', 1);
}

TEST(BraceExpandError, UnclosedOpeningBrace) {
  ExpectUnbalanced("a{b", '{', 1);
}

TEST(BraceExpandError, OuterBraceOfNestedGroupUnclosed) {
  ExpectUnbalanced("{1{2,3}", '{', 0);
}

TEST(BraceExpandError, ClosingBraceBeforeGroup) {
  ExpectUnbalanced("x}{a,b}", '}', 1);
}

// braceexpand itself returns "}a{" unchanged because its depth counter ends at zero; a pattern
// like this is a mistake, so it is rejected rather than guessed at.
TEST(BraceExpandError, ClosingBraceBeforeOpeningBrace) {
  ExpectUnbalanced("}a{", '}', 0);
}

TEST(BraceExpandError, EscapedClosingBraceLeavesGroupOpen) {
  ExpectUnbalanced(R"({1..3\})", '{', 0);
}

TEST(BraceExpandError, FirstOfSeveralUnclosedBracesIsReported) {
  ExpectUnbalanced("ab{c{d", '{', 2);
}

TEST(BraceExpandError, ExtraClosingBraceAfterGroup) {
  ExpectUnbalanced("s-{0..3}}.tar", '}', 8);
}

TEST(BraceExpandError, EndpointBeyond64BitsIsInvalidArgument) {
  try {
    wds::brace_expand("x{0..99999999999999999999}");
    ADD_FAILURE() << "no error";
  } catch (const wds::Error& e) {
    EXPECT_EQ(e.code(), wds::ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
}

// Python would try to build these lists until memory ran out; here they fail up front.
TEST(BraceExpandError, RangeTooLargeToHoldIsInvalidArgument) {
  for (const char* pattern :
       {"{0..9223372036854775807}", "{-9223372036854775808..9223372036854775807}",
        "{0..4000000000}{0..4000000000}{0..4000000000}"}) {
    SCOPED_TRACE(pattern);
    try {
      wds::brace_expand(pattern);
      ADD_FAILURE() << "no error";
    } catch (const wds::Error& e) {
      EXPECT_EQ(e.code(), wds::ErrorCode::invalid_argument);
      EXPECT_NE(e.cause().find("above the limit of 10000000"), std::string::npos) << e.cause();
    }
  }
}

// Returns the invalid_argument Error that fn throws (a failure if none).
template <class Fn>
wds::Error ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const wds::Error& e) {
    EXPECT_EQ(e.code(), wds::ErrorCode::invalid_argument);
    return e;
  }
  ADD_FAILURE() << "no error";
  return wds::Error::invalid_argument("");
}

// "{a,{a,...{a,b}...}}" with `depth` nested groups: depth + 1 names.
std::string Nested(std::size_t depth) {
  std::string p;
  for (std::size_t i = 0; i < depth; ++i) p += "{a,";
  p += 'b';
  return p + std::string(depth, '}');
}

// 30,000 levels used to overflow the stack (SIGSEGV in `wds expand`), and 10,000 took a second
// copying each level's list into the next.
TEST(BraceExpandError, DeepNestingIsRefusedNotAStackOverflow) {
  const std::string deep = Nested(30000);
  wds::Error e = ErrorOf([&] { wds::brace_expand(deep); });
  EXPECT_NE(e.cause().find("more than 100 levels"), std::string::npos) << e.cause();
  EXPECT_NE(e.cause().find("position 300"), std::string::npos) << e.cause();  // the 101st '{'
  // The pattern is named, shortened to its ends and its length.
  EXPECT_LT(e.url().size(), 200u);
  EXPECT_EQ(e.url().substr(0, 9), "{a,{a,{a,");
  EXPECT_NE(e.url().find("(120001 characters)"), std::string::npos) << e.url();
}

TEST(BraceExpand, NestingUpToTheLimitExpands) {
  Names names = wds::brace_expand(Nested(wds::kMaxBraceDepth));
  ASSERT_EQ(names.size(), wds::kMaxBraceDepth + 1);
  EXPECT_EQ(names.front(), "a");
  EXPECT_EQ(names.back(), "b");
  ErrorOf([] { wds::brace_expand(Nested(wds::kMaxBraceDepth + 1)); });
  // Groups that are not lists count too: each level is a recursion all the same.
  std::string literal =
      std::string(wds::kMaxBraceDepth + 1, '{') + "x" + std::string(wds::kMaxBraceDepth + 1, '}');
  ErrorOf([&] { wds::brace_expand(literal); });
}

// x{0..999999999} asked for 32 GB and ended in std::bad_alloc: the count is known before
// anything is built.
TEST(BraceExpandError, TooManyNamesFailsBeforeAllocating) {
  wds::Error e = ErrorOf([] { wds::brace_expand("x{0..999999999}"); });
  EXPECT_EQ(e.url(), "x{0..999999999}");
  EXPECT_EQ(e.cause(),
            "pattern expands to 1000000000 names, above the limit of 10000000 (raise "
            "ExpandOptions::max_names, or wds expand --max-names)");
  // Products beyond 64 bits saturate rather than wrap to a small count.
  e = ErrorOf([] { wds::brace_expand("{0..4294967296}{0..4294967296}{0..4294967296}"); });
  EXPECT_NE(e.cause().find("more than 18446744073709551615 names"), std::string::npos);
  // {0..2^32}{0..2^32} would wrap to 2^32 + 2^33 + 1 names in unsigned arithmetic.
  e = ErrorOf([] { wds::brace_expand("{1..4294967296}{1..4294967296}"); });
  EXPECT_NE(e.cause().find("more than"), std::string::npos) << e.cause();
}

TEST(BraceExpand, MaxNamesIsConfigurable) {
  const wds::ExpandOptions hundred{.max_names = 100};
  EXPECT_EQ(wds::brace_expand("s{0..9}{0..9}", true, hundred).size(), 100u);
  wds::Error e = ErrorOf([&] { wds::brace_expand("s{0..9}{0..9}{a,b}", true, hundred); });
  EXPECT_NE(e.cause().find("expands to 200 names, above the limit of 100"), std::string::npos)
      << e.cause();
  // Nested lists add up their items' counts.
  e = ErrorOf([&] { wds::brace_expand("{a{0..99},b}", true, hundred); });
  EXPECT_NE(e.cause().find("expands to 101 names"), std::string::npos) << e.cause();
  // Above the default when asked for.
  EXPECT_EQ(wds::brace_expand("{0..10000000}", true, {.max_names = 10'000'001}).size(),
            10'000'001u);
}

TEST(ExpandUrlsLimits, MaxNamesHoldsForAllPiecesTogether) {
  const wds::ExpandOptions hundred{.max_names = 100};
  EXPECT_EQ(wds::expand_urls("a{0..49}::b{0..49}", hundred).size(), 100u);
  wds::Error e = ErrorOf([&] { wds::expand_urls("a{0..59}::b{0..59}", hundred); });
  EXPECT_EQ(e.url(), "a{0..59}::b{0..59}");
  EXPECT_NE(e.cause().find("expands to 120 names"), std::string::npos) << e.cause();
  // One piece alone over the limit is named by itself.
  e = ErrorOf([&] { wds::expand_urls("a.tar::b{0..200}", hundred); });
  EXPECT_EQ(e.url(), "b{0..200}");
}

// The same patterns reach expand_urls through WDS_* variables.
TEST(ExpandUrlsLimits, HostileVariablesAreRefused) {
  ASSERT_EQ(::setenv("WDS_BRACE_TEST_DEEP", Nested(30000).c_str(), 1), 0);
  ASSERT_EQ(::setenv("WDS_BRACE_TEST_HUGE", "x{0..999999999}", 1), 0);
  wds::Error deep = ErrorOf([] { wds::expand_urls("/d/${BRACE_TEST_DEEP}.tar"); });
  EXPECT_NE(deep.cause().find("levels deep"), std::string::npos) << deep.cause();
  wds::Error huge = ErrorOf([] { wds::expand_urls("/d/${BRACE_TEST_HUGE}.tar"); });
  EXPECT_EQ(huge.url(), "/d/x{0..999999999}.tar");
  ::unsetenv("WDS_BRACE_TEST_DEEP");
  ::unsetenv("WDS_BRACE_TEST_HUGE");
}

TEST(BraceExpand, OneMillionNames) {
  Names names = wds::brace_expand("shard-{000000..999999}.tar");
  ASSERT_EQ(names.size(), 1'000'000u);
  EXPECT_EQ(names.front(), "shard-000000.tar");
  EXPECT_EQ(names[123456], "shard-123456.tar");
  EXPECT_EQ(names.back(), "shard-999999.tar");
}

// Sets WDS_ variables for one test and removes them afterwards.
class ExpandUrls : public ::testing::Test {
 protected:
  void SetUp() override {
    Set("WDS_ROOT", "/data");
    Set("WDS_NESTED", "${ROOT}/x");
    ::unsetenv("WDS_BRACE_TEST_MISSING");
  }
  void TearDown() override {
    for (const std::string& name : set_) ::unsetenv(name.c_str());
  }
  void Set(const std::string& name, const std::string& value) {
    ASSERT_EQ(::setenv(name.c_str(), value.c_str(), 1), 0);
    set_.push_back(name);
  }

 private:
  std::vector<std::string> set_;
};

TEST_F(ExpandUrls, SplitsOnDoubleColonBeforeExpanding) {
  EXPECT_EQ(wds::expand_urls("gs://p/t-{000000..000002}.tar::http://h/x-{0..1}.tar"),
            (Names{"gs://p/t-000000.tar", "gs://p/t-000001.tar", "gs://p/t-000002.tar",
                   "http://h/x-0.tar", "http://h/x-1.tar"}));
  EXPECT_EQ(wds::expand_urls("x-{0..2}.tar::y.tar"),
            (Names{"x-0.tar", "x-1.tar", "x-2.tar", "y.tar"}));
}

TEST_F(ExpandUrls, KeepsEmptyPieces) {
  EXPECT_EQ(wds::expand_urls("a.tar::"), (Names{"a.tar", ""}));
  EXPECT_EQ(wds::expand_urls("::"), (Names{"", ""}));
  EXPECT_EQ(wds::expand_urls("a::::b"), (Names{"a", "", "b"}));
  EXPECT_EQ(wds::expand_urls(""), (Names{""}));
  // Split left to right without overlap, as str.split does.
  EXPECT_EQ(wds::expand_urls("a:::b"), (Names{"a", ":b"}));
}

TEST_F(ExpandUrls, SubstitutesVariablesIncludingNestedValues) {
  EXPECT_EQ(wds::expand_urls("${ROOT}/a-{0..1}.tar::${NESTED}-{a,b}.tar"),
            (Names{"/data/a-0.tar", "/data/a-1.tar", "/data/x-a.tar", "/data/x-b.tar"}));
  EXPECT_EQ(wds::expand_urls("${ROOT}{1,2}"), (Names{"/data1", "/data2"}));
}

TEST_F(ExpandUrls, DollarWithoutBracesIsLeftAlone) {
  EXPECT_EQ(wds::expand_urls("$ROOT/a.tar"), (Names{"$ROOT/a.tar"}));
  // Not a \w+ name: the braces are then a literal brace group.
  EXPECT_EQ(wds::expand_urls("${}/${A-B}"), (Names{"${}/${A-B}"}));
}

TEST_F(ExpandUrls, ValuesAreNotSplitOnDoubleColon) {
  Set("WDS_PAIR", "a.tar::b.tar");
  EXPECT_EQ(wds::expand_urls("${PAIR}"), (Names{"a.tar::b.tar"}));
}

TEST_F(ExpandUrls, ValuesMayHoldBracePatterns) {
  Set("WDS_SHARDS", "s-{0..2}");
  EXPECT_EQ(wds::expand_urls("${ROOT}/${SHARDS}.tar"),
            (Names{"/data/s-0.tar", "/data/s-1.tar", "/data/s-2.tar"}));
}

TEST_F(ExpandUrls, StopsAfterTenRounds) {
  // A chain resolved in exactly ten rounds is followed to its end ...
  for (int i = 0; i < 9; ++i) {
    Set("WDS_CHAIN" + std::to_string(i), "${CHAIN" + std::to_string(i + 1) + "}");
  }
  Set("WDS_CHAIN9", "end");
  EXPECT_EQ(wds::expand_urls("${CHAIN0}"), (Names{"end"}));
  // ... one round longer is not, and the leftover ${...} is brace-expanded as literal text.
  Set("WDS_CHAINX", "${CHAIN0}");
  EXPECT_EQ(wds::expand_urls("${CHAINX}"), (Names{"${CHAIN9}"}));
  Set("WDS_SELF", "${SELF}");
  EXPECT_EQ(wds::expand_urls("${SELF}"), (Names{"${SELF}"}));
}

TEST_F(ExpandUrls, MissingVariableNamesIt) {
  try {
    wds::expand_urls("a.tar::${BRACE_TEST_MISSING}/b.tar");
    ADD_FAILURE() << "no error";
  } catch (const wds::Error& e) {
    EXPECT_EQ(e.code(), wds::ErrorCode::invalid_argument);
    EXPECT_EQ(e.cause(),
              "environment variable WDS_BRACE_TEST_MISSING is not set (needed for "
              "${BRACE_TEST_MISSING})");
    EXPECT_NE(std::string(e.what()).find("WDS_BRACE_TEST_MISSING"), std::string::npos);
  }
}

TEST_F(ExpandUrls, MissingVariableInsideValueNamesIt) {
  Set("WDS_OUTER", "${BRACE_TEST_MISSING}/x");
  try {
    wds::expand_urls("${OUTER}.tar");
    ADD_FAILURE() << "no error";
  } catch (const wds::Error& e) {
    EXPECT_EQ(e.code(), wds::ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("WDS_BRACE_TEST_MISSING"), std::string::npos);
  }
}

TEST_F(ExpandUrls, BraceSplitByDoubleColonIsUnbalanced) {
  // "::" splits first, so "{a::b}" becomes the pieces "{a" and "b}".
  try {
    wds::expand_urls("{a::b}");
    ADD_FAILURE() << "no error";
  } catch (const wds::Error& e) {
    EXPECT_EQ(e.code(), wds::ErrorCode::invalid_argument);
    EXPECT_EQ(e.url(), "{a");
    EXPECT_EQ(e.cause(), "unbalanced '{' at position 0");
  }
}

}  // namespace
