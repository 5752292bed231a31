// ByteDfa against PCRE2: for each pattern, the automaton and PCRE2 (the way
// validation compiles it: whole match, UTF) must agree on every subject, and
// what the automaton does not support must not compile.
#include "core/internal/byte_dfa.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/internal/regex.h"
#include "core/test_rng.h"
#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

using ::kiln::testing::Rng;

// Valid UTF-8 pieces subjects are made of: the pattern's own ASCII
// characters, and characters that classes and `.` treat specially.
std::vector<std::string> Pieces(const std::string& pattern) {
  std::vector<std::string> pieces = {
      "a", "Z", "0", "9", "-", "_", ".", "/", ":", " ", "\n", "\r", "\t", "\v", "\f",
      std::string("\0", 1), "\x7f", "\xc3\xa9", "\xe2\x80\xa8", "\xc2\x85", "\xf0\x9f\x98\x80"};
  for (char c : pattern) {
    if (static_cast<unsigned char>(c) < 0x80 && c != '\\') pieces.emplace_back(1, c);
  }
  return pieces;
}

// Checks that `pattern` compiles to an automaton that agrees with PCRE2 on
// `extra` and on random subjects of up to `max_pieces` pieces.
void ExpectAgreesWithPcre2(const std::string& pattern, const std::vector<std::string>& extra,
                           int max_pieces = 12) {
  SCOPED_TRACE(pattern);
  std::unique_ptr<ByteDfa> dfa = ByteDfa::Compile(pattern, /*dot_is_all_but_line_feed=*/true);
  ASSERT_NE(dfa, nullptr) << "not compiled";
  std::string error;
  std::unique_ptr<Regex> pcre2 = Regex::Compile(pattern, Regex::Mode::kFullMatch, &error);
  ASSERT_NE(pcre2, nullptr) << error;
  std::vector<std::string> subjects = extra;
  const std::vector<std::string> pieces = Pieces(pattern);
  Rng rng(std::hash<std::string>()(pattern));
  for (int i = 0; i < 4000; ++i) {
    std::string s;
    const int n = rng.Below(max_pieces + 1);
    for (int k = 0; k < n; ++k) s += pieces[rng.Below(static_cast<int>(pieces.size()))];
    subjects.push_back(std::move(s));
  }
  int mismatches = 0;
  for (const std::string& s : subjects) {
    const bool want = pcre2->Matches(s);
    if (dfa->Matches(s) != want && ++mismatches <= 5) {
      ADD_FAILURE() << "on '" << absl::CEscape(s) << "': PCRE2 says " << want;
    }
  }
}

std::string Repeat(const std::string& piece, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += piece;
  return out;
}

TEST(ByteDfaTest, TheModelsJobNamePatternAgreesUpToItsLengthLimit) {
  const std::string name = "[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}";
  std::vector<std::string> extra;
  for (int n : {1, 2, 62, 63, 64, 65}) {
    extra.push_back(Repeat("a", n));
    extra.push_back(Repeat("a-", n));
    extra.push_back(Repeat("a-", n) + "b");
    extra.push_back("x" + Repeat("--a", n));
  }
  ExpectAgreesWithPcre2(name, extra);
  ExpectAgreesWithPcre2("[a-zA-Z0-9](-*[a-zA-Z0-9]){0,119}", {Repeat("a", 120), Repeat("a", 121)});
}

TEST(ByteDfaTest, TheModelsUriAndArnPatternsAgree) {
  ExpectAgreesWithPcre2("(https|s3)://([^/]+)/?(.*)",
                        {"s3://b", "s3://b/", "s3://b/k/\xc3\xa9", "s3:///k", "https://h/p\n",
                         "s3://\xf0\x9f\x98\x80/x", "ftp://b/k"});
  ExpectAgreesWithPcre2("arn:aws[a-z\\-]*:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+",
                        {"arn:aws:iam::123456789012:role/R", "arn:aws-cn:iam::123456789012:roleX",
                         "arn:aws:iam::12345678901:role/R", "arn:aws:iam::123456789012:role/"},
                        40);
  ExpectAgreesWithPcre2(
      "arn:aws[a-z\\-]*:sagemaker:[a-z0-9\\-]*:[0-9]{12}:training-job/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}",
      {"arn:aws:sagemaker:us-east-1:123456789012:training-job/j-1",
       "arn:aws:sagemaker:us-east-1:123456789012:training-job/j-"},
      40);
  ExpectAgreesWithPcre2("(fs-[0-9a-f]{8,})", {"fs-0123456789abcdef", "fs-0123456", "fs-01234567"});
  ExpectAgreesWithPcre2("arn:[\\p{Alnum}\\-]+:lambda:[\\p{Alnum}\\-]+:[0-9]{12}:function:.*",
                        {"arn:aws:lambda:us-east-1:123456789012:function:f\n",
                         "arn:aws:lambda:us-east-1:123456789012:function:\xc3\xa9"},
                        40);
}

TEST(ByteDfaTest, ClassesEscapesAndQuantifiersAgree) {
  for (const std::string pattern :
       {"[A-Za-z0-9\\.\\-_]+", "[a-zA-Z0-9:/_-]*", "[-0-9a-zA-Z]+", "[a-zA-Z_][a-zA-Z0-9_]*",
        "[\\S]{1,20}", "\\S+\\s?\\S*", "\\w+(?:-\\w+)+", "\\d{1,4}.\\d{1,4}.\\d{1,4}", "\\D\\W",
        "[^a-c]*", "[]a]+", "[^]a]", "[a-z-9]+", "[\\w-]+", "[a-z0-9-\\.]{1,5}", "a|b|", "(a|bc)*d?",
        "((ab){2,3}|c){0,2}", "x{3}", "x{2,}", "(?:)", "", "[\\s\\S]", "\\.\\*\\+\\?\\(\\)\\[\\{\\|\\\\",
        "\\t\\n\\r\\f", "[\\t\\n]+", "[\\p{Upper}\\p{Lower}\\p{Digit}]+\\p{Alpha}?", ".", ".+a",
        "(.*)(.*)"}) {
    ExpectAgreesWithPcre2(pattern, {});
  }
}

TEST(ByteDfaTest, WhatItDoesNotSupportIsNotCompiled) {
  for (const std::string pattern :
       {"a(?<!-)", "(?=a)a", "(?i)a", "(?<n>a)", "\\p{L}+", "[\\p{L}]", "a*?", "a+?", "a++",
        "a{1,2}?", "^a", "a$", "\\ba", "\\Aa", "(a)\\1", "\\x41", "\\u0041", "[[:alpha:]]",
        "\xc3\xa9", "[\xc3\xa9]", "a{2000}", "a{3,2}", "a{", "(a", "a)", "[a", "*a", "[b-a]",
        "\\v", "\\h", "[\\w-x]"}) {
    EXPECT_EQ(ByteDfa::Compile(pattern, true), nullptr) << absl::CEscape(pattern);
  }
  // `.` only where PCRE2's dot is known to be "all but a line feed".
  EXPECT_EQ(ByteDfa::Compile("a.b", false), nullptr);
  EXPECT_NE(ByteDfa::Compile("a.b", true), nullptr);
}

TEST(ByteDfaTest, AnAutomatonThatWouldBeTooBigIsNotCompiled) {
  EXPECT_EQ(ByteDfa::Compile("[ab]*a[ab]{12}", true, /*max_states=*/4096), nullptr);
  std::unique_ptr<ByteDfa> small = ByteDfa::Compile("[ab]*a[ab]{3}", true);
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(small->Matches("bbabab"));
  EXPECT_FALSE(small->Matches("bbbbab"));
}

}  // namespace
}  // namespace kiln::internal
