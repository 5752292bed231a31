#include "kiln/plugin/json_value.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

using ::testing::HasSubstr;
using namespace std::string_literals;

// Parses `text` and writes it back compactly; "ERROR: <message>" on failure.
std::string Reformat(std::string_view text) {
  absl::StatusOr<JsonValue> value = ParseJsonValue(text);
  if (!value.ok()) return "ERROR: " + std::string(value.status().message());
  return WriteJson(*value);
}

std::string ErrorOf(std::string_view text) {
  absl::StatusOr<JsonValue> value = ParseJsonValue(text);
  if (value.ok()) return "parsed OK";
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(value.status().message());
}

class JsonValueTest : public ::testing::Test {};

TEST_F(JsonValueTest, ValidDocumentsAreAcceptedAndWrittenCompactly) {
  struct Case {
    std::string_view input;
    std::string_view compact;
  };
  const Case cases[] = {
      {"null", "null"},
      {"true", "true"},
      {" false ", "false"},
      {"0", "0"},
      {"-0", "-0"},
      {"-12.5e+3", "-12.5e+3"},
      {"1E-7", "1E-7"},
      {"\"\"", "\"\""},
      {"[]", "[]"},
      {"{}", "{}"},
      {" [ 1 , 2 ,3 ] ", "[1,2,3]"},
      {"{ \"a\" : [ {}, [] , null ] ,\n\t\"b\":{\"c\":true}\r\n}", "{\"a\":[{},[],null],\"b\":{\"c\":true}}"},
      {"\xEF\xBB\xBF{\"bom\":1}", "{\"bom\":1}"},
      {"\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"", "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Reformat(c.input), c.compact) << "input: " << c.input;
  }
}

TEST_F(JsonValueTest, InvalidDocumentsAreRejected) {
  struct Case {
    std::string_view input;
    std::string_view error;  // a part of the message
  };
  const Case cases[] = {
      {"", "line 1, column 1: unexpected end of input, expected a value"},
      {"   ", "unexpected end of input, expected a value"},
      {"[1,]", "trailing comma before ']'"},
      {"{\"a\":1,}", "trailing comma before '}'"},
      {"[1 2]", "expected ',' or ']' after array element, found '2'"},
      {"{\"a\" 1}", "expected ':' after object key, found '1'"},
      {"{a:1}", "expected a string key or '}', found 'a'"},
      {"{'a':1}", "expected a string key or '}', found '''"},
      {"// comment\n1", "expected a value, found '/'"},
      {"1 /* comment */", "unexpected '/' after the JSON value"},
      {"NaN", "expected a value, found 'N'"},
      {"Infinity", "expected a value, found 'I'"},
      {"-Infinity", "invalid number: expected a digit after '-'"},
      {"nul", "invalid literal (expected true, false or null)"},
      {"True", "expected a value, found 'T'"},
      {"01", "invalid number: leading zeros are not allowed"},
      {"1.", "invalid number: expected a digit after '.'"},
      {".5", "expected a value, found '.'"},
      {"+1", "expected a value, found '+'"},
      {"1e", "invalid number: expected a digit in the exponent"},
      {"0x10", "unexpected 'x' after the JSON value"},
      {"[1] [2]", "unexpected '[' after the JSON value"},
      {"\"abc", "line 1, column 1: unterminated string"},
      {"\"a\\", "unterminated string"},
      {"\"tab\there\"", "line 1, column 5: unescaped control character U+0009 in string"},
      {"\"\\x41\"", "invalid escape: backslash followed by 'x'"},
      {"\"\\u12G4\"", "invalid \\u escape: expected 4 hex digits"},
      {"\"\\'\"", "invalid escape: backslash followed by '''"},
      {"[1,\xC3\xA9]", "expected a value, found '\xC3\xA9'"},
      {"\x01", "expected a value, found character U+0001"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ErrorOf(c.input), HasSubstr(c.error)) << "input: " << c.input;
  }
}

TEST_F(JsonValueTest, ErrorsNameLineColumnAndWhatWasExpected) {
  EXPECT_EQ(ErrorOf("{\n  \"a\": 1,\n  \"b\": [true, false]  \"c\": 2\n}"),
            "line 3, column 23: expected ',' or '}' after object member, found '\"'");
  // Columns count characters, not bytes: "é" is one column.
  EXPECT_EQ(ErrorOf("[\"\xC3\xA9\xC3\xA9\" x]"),
            "line 1, column 7: expected ',' or ']' after array element, found 'x'");
  EXPECT_EQ(ErrorOf("{\"a\":1,\"a\":2}"), "line 1, column 8: duplicate key \"a\" in object");
}

TEST_F(JsonValueTest, EscapesAreDecoded) {
  absl::StatusOr<JsonValue> value =
      ParseJsonValue(R"("q\" b\\ s\/ \b\f\n\r\t \u0041\u00e9\u20AC \u0000end")");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->string_value(),
            "q\" b\\ s/ \b\f\n\r\t A\xC3\xA9\xE2\x82\xAC \0end"s);
}

TEST_F(JsonValueTest, SurrogatePairsBecomeOneCharacter) {
  absl::StatusOr<JsonValue> value = ParseJsonValue(R"("\ud83d\uDE00 \uDBFF\uDFFF")");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->string_value(), "\xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF");
}

TEST_F(JsonValueTest, UnpairedSurrogatesAreRejected) {
  EXPECT_EQ(ErrorOf(R"("ab\uD800")"),
            "line 1, column 4: unpaired high surrogate \\uD800: expected a \\uDC00-\\uDFFF escape "
            "after it");
  EXPECT_THAT(ErrorOf(R"("\uD800x")"), HasSubstr("unpaired high surrogate \\uD800"));
  EXPECT_THAT(ErrorOf(R"("\uD800\u0041")"),
              HasSubstr("unpaired high surrogate \\uD800: \\u0041 is not a low surrogate"));
  EXPECT_THAT(ErrorOf(R"("\uD800\uD800")"), HasSubstr("\\uD800 is not a low surrogate"));
  EXPECT_EQ(ErrorOf(R"("\uDC00")"), "line 1, column 2: unpaired low surrogate \\uDC00");
}

TEST_F(JsonValueTest, InvalidUtf8IsRejected) {
  struct Case {
    std::string_view input;
    std::string_view error;
  };
  const Case cases[] = {
      {"\"\xFF\"", "invalid UTF-8 byte 0xFF in string"},
      {"\"\xC3\x28\"", "invalid UTF-8 byte 0xC3 in string"},         // bad continuation
      {"\"\xC0\xAF\"", "invalid UTF-8 byte 0xC0 in string"},         // overlong '/'
      {"\"\xE0\x80\xAF\"", "invalid UTF-8 byte 0xE0 in string"},     // overlong 3-byte
      {"\"\xED\xA0\x80\"", "invalid UTF-8 byte 0xED in string"},     // encoded surrogate
      {"\"\xF4\x90\x80\x80\"", "invalid UTF-8 byte 0xF4 in string"}, // beyond U+10FFFF
      {"\"\xE2\x82\"", "invalid UTF-8 byte 0xE2 in string"},         // truncated
      {"\"\x80\"", "invalid UTF-8 byte 0x80 in string"},             // lone continuation
      {"\xFF", "expected a value, found invalid UTF-8 byte 0xFF"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ErrorOf(c.input), HasSubstr(c.error));
  }
}

TEST_F(JsonValueTest, NestingDeeperThanTheLimitIsRejected) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(Reformat(ok), ok);
  const std::string deep = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  EXPECT_EQ(ErrorOf(deep), "line 1, column 257: nesting deeper than 256 levels");
  std::string objects;
  for (int i = 0; i <= kMaxJsonDepth; ++i) objects += "{\"a\":";
  objects += "1";
  objects.append(kMaxJsonDepth + 1, '}');  // (not "1" + std::string: GCC 12's false -Wrestrict)
  EXPECT_THAT(ErrorOf(objects), HasSubstr("nesting deeper than 256 levels"));
  // Far deeper input fails the same way instead of overflowing the stack.
  EXPECT_THAT(ErrorOf(std::string(100000, '[')), HasSubstr("nesting deeper than 256 levels"));
}

TEST_F(JsonValueTest, DuplicateKeysAreRejectedInSmallAndLargeObjects) {
  EXPECT_THAT(ErrorOf(R"({"a":1,"b":2,"a":3})"), HasSubstr("duplicate key \"a\""));
  // Large objects use an index: the duplicate is still found.
  std::string large = "{";
  for (int i = 0; i < 40; ++i) large += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  EXPECT_EQ(Reformat(large + "\"end\":0}").substr(0, 12), "{\"k0\":0,\"k1\"");
  EXPECT_THAT(ErrorOf(large + "\"k3\":0}"), HasSubstr("duplicate key \"k3\" in object"));
  EXPECT_THAT(ErrorOf(large + "\"k39\":0}"), HasSubstr("duplicate key \"k39\" in object"));
  // Keys are compared after unescaping.
  EXPECT_THAT(ErrorOf(R"({"A":1,"\u0041":2})"), HasSubstr("duplicate key \"A\""));
}

TEST_F(JsonValueTest, ObjectsKeepMemberOrder) {
  absl::StatusOr<JsonValue> value = ParseJsonValue(R"({"z":1,"a":2,"m":3})");
  ASSERT_TRUE(value.ok());
  ASSERT_EQ(value->size(), 3u);
  EXPECT_EQ(value->members()[0].first, "z");
  EXPECT_EQ(value->members()[1].first, "a");
  EXPECT_EQ(value->members()[2].first, "m");
  ASSERT_NE(value->Find("a"), nullptr);
  EXPECT_EQ(value->Find("a")->number_lexeme(), "2");
  EXPECT_EQ(value->Find("b"), nullptr);
}

TEST_F(JsonValueTest, NumbersKeepTheirExactLexeme) {
  absl::StatusOr<JsonValue> value =
      ParseJsonValue("[9007199254740993, 1795253152.163000001, 1.10, -0.0, 1E+2]");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(WriteJson(*value), "[9007199254740993,1795253152.163000001,1.10,-0.0,1E+2]");
  const auto& e = value->elements();
  EXPECT_EQ(*e[0].AsInt64(), 9007199254740993);  // not representable as a double
  EXPECT_TRUE(e[0].IsIntegerLexeme());
  EXPECT_FALSE(e[1].IsIntegerLexeme());
  EXPECT_DOUBLE_EQ(*e[1].AsDouble(), 1795253152.163);
  EXPECT_DOUBLE_EQ(*e[4].AsDouble(), 100.0);
}

TEST_F(JsonValueTest, AsInt64AcceptsOnlyIntegersInRange) {
  const auto as_int64 = [](std::string_view lexeme) { return JsonValue::Number(lexeme)->AsInt64(); };
  EXPECT_EQ(*as_int64("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*as_int64("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(*as_int64("-0"), 0);
  EXPECT_EQ(as_int64("9223372036854775808").status().message(),
            "9223372036854775808 is out of range for a 64-bit integer");
  EXPECT_EQ(as_int64("1.0").status().message(), "1.0 is not an integer (it has a fraction or exponent)");
  EXPECT_FALSE(as_int64("1e2").ok());
  EXPECT_FALSE(JsonValue::String("1").AsInt64().ok());
}

TEST_F(JsonValueTest, AsDoubleRejectsOverflowAndFlushesUnderflowToZero) {
  EXPECT_EQ(JsonValue::Number("1e400")->AsDouble().status().message(), "1e400 is out of range for a double");
  EXPECT_FALSE(JsonValue::Number("-123456789e999")->AsDouble().ok());
  EXPECT_EQ(*JsonValue::Number("1e-400")->AsDouble(), 0.0);
  EXPECT_EQ(*JsonValue::Number("0.0000e-99999")->AsDouble(), 0.0);
  const double negative_zero = *JsonValue::Number("-1e-400")->AsDouble();
  EXPECT_EQ(negative_zero, 0.0);
  EXPECT_TRUE(std::signbit(negative_zero));
  EXPECT_FALSE(JsonValue::Bool(true).AsDouble().ok());
}

TEST_F(JsonValueTest, NumberBuilderAcceptsOnlyJsonNumbers) {
  for (std::string_view good : {"0", "-1", "1.5", "2e10", "-0.0E-0"}) {
    EXPECT_TRUE(JsonValue::Number(good).ok()) << good;
  }
  for (std::string_view bad : {"", "+1", "01", "1.", ".5", "NaN", " 1", "1 ", "0x1", "1e"}) {
    EXPECT_FALSE(JsonValue::Number(bad).ok()) << bad;
  }
}

TEST_F(JsonValueTest, DoubleBuilderWritesShortestRoundTripForm) {
  EXPECT_EQ(WriteJson(JsonValue::Double(0.1)), "0.1");
  EXPECT_EQ(WriteJson(JsonValue::Double(1.0)), "1");
  EXPECT_EQ(WriteJson(JsonValue::Double(1e300)), "1e+300");
  EXPECT_EQ(WriteJson(JsonValue::Double(-2.5e-8)), "-2.5e-08");
  EXPECT_EQ(WriteJson(JsonValue::Double(std::numeric_limits<double>::quiet_NaN())), "null");
  EXPECT_EQ(WriteJson(JsonValue::Double(-std::numeric_limits<double>::infinity())), "null");
  for (double d : {0.1, 1.0 / 3, 1e300, 5e-324, 123456789.125, -0.0}) {
    absl::StatusOr<JsonValue> back = ParseJsonValue(WriteJson(JsonValue::Double(d)));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back->AsDouble(), d);
  }
}

TEST_F(JsonValueTest, WriterEscapesWhatJsonRequires) {
  const std::string text = "q\" b\\ /\b\f\n\r\t\x01\x1F\x7F \0 \xC3\xA9\xF0\x9F\x98\x80"s;
  EXPECT_EQ(WriteJson(JsonValue::String(text)),
            std::string("\"q\\\" b\\\\ /\\b\\f\\n\\r\\t\\u0001\\u001f\x7F \\u0000 \xC3\xA9\xF0\x9F\x98\x80\""));
  absl::StatusOr<JsonValue> back = ParseJsonValue(WriteJson(JsonValue::String(text)));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->string_value(), text);
}

TEST_F(JsonValueTest, WriterReplacesInvalidUtf8SoOutputStaysValid) {
  const std::string written = WriteJson(JsonValue::String("a\xFF" "b\xED\xA0\x80"));
  EXPECT_EQ(written, "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_TRUE(ParseJsonValue(written).ok());
  // Keys go through the same escaping.
  JsonValue object = JsonValue::Object();
  object.Set("k\"\n\xC0", JsonValue::Null());
  EXPECT_EQ(WriteJson(object), "{\"k\\\"\\n\xEF\xBF\xBD\":null}");
}

// Error messages show input through JsonForMessage and EscapeForMessage: no
// character of it may start a line in a log, and JsonForMessage bounds it.
TEST_F(JsonValueTest, JsonForMessageEscapesEveryLineBreakAndCutsBetweenUnits) {
  // C0 as JSON escapes it; DEL, C1 (NEL), U+2028, U+2029 as well, unlike WriteJson.
  const std::string text = "a\nb\x7F" "c\xC2\x85" "d\xE2\x80\xA8" "e\xE2\x80\xA9" "f\"\\ \xC3\xA9"s;
  EXPECT_EQ(JsonForMessage(JsonValue::String(text)),
            R"("a\nb\u007fc\u0085d\u2028e\u2029f\"\\ )" "\xC3\xA9\"");
  absl::StatusOr<JsonValue> back = ParseJsonValue(JsonForMessage(JsonValue::String(text)));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->string_value(), text);  // still JSON, and the same string
  // Inside arrays and objects, keys too.
  JsonValue object = JsonValue::Object();
  object.Set("k\xE2\x80\xA8", JsonValue::Array().Push(JsonValue::String("\xC2\x9F")));
  EXPECT_EQ(JsonForMessage(object), R"({"k\u2028":["\u009f"]})");
  // Short enough: whole. Longer: cut at max_bytes or before, never inside an
  // escape or a character, and "..." appended.
  EXPECT_EQ(JsonForMessage(JsonValue::String("abcd"), 6), "\"abcd\"");
  EXPECT_EQ(JsonForMessage(JsonValue::String("abcde"), 6), "\"abcde...");
  EXPECT_EQ(JsonForMessage(JsonValue::String("abc\nd"), 5), "\"abc...");
  EXPECT_EQ(JsonForMessage(JsonValue::String("abc\xE2\x80\xA8"), 9), "\"abc...");
  EXPECT_EQ(JsonForMessage(JsonValue::String("abc\xE2\x80\xA8"), 10), "\"abc\\u2028...");
  EXPECT_EQ(JsonForMessage(JsonValue::String("ab\xC3\xA9\xC3\xA9"), 4), "\"ab...");
  EXPECT_EQ(JsonForMessage(JsonValue::String("ab\xC3\xA9\xC3\xA9"), 6), "\"ab\xC3\xA9...");
  EXPECT_EQ(JsonForMessage(JsonValue::String(std::string(1000, 'x'))).size(),
            kMaxJsonInMessage + 3);
}

TEST_F(JsonValueTest, EscapeForMessageKeepsQuotesAndEscapesLineBreaksAndBadBytes) {
  EXPECT_EQ(EscapeForMessage("it's \"re\\d+\""), "it's \"re\\d+\"");
  EXPECT_EQ(EscapeForMessage("a\r\nb\tc\x01\x7F" "d\xC2\x85" "e\xE2\x80\xA8\xE2\x80\xA9"),
            R"(a\r\nb\tc\u0001\u007fd\u0085e\u2028\u2029)");
  EXPECT_EQ(EscapeForMessage("us-\xC3 \x85 \xC3\xA9"), "us-\\xC3 \\x85 \xC3\xA9");
}

// The single-quoted form with a bound: cut on a character, then escaped.
TEST_F(JsonValueTest, TextForMessageCutsOnACharacterThenEscapes) {
  EXPECT_EQ(TextForMessage("it's a\nb"), "it's a\\nb");
  EXPECT_EQ(TextForMessage("abcd", 4), "abcd");
  EXPECT_EQ(TextForMessage("abcde", 4), "abcd...");
  EXPECT_EQ(TextForMessage("ab\xC3\xA9" "c", 3), "ab...");  // not inside the é
  EXPECT_EQ(TextForMessage("a\x01\x02", 2), "a\\u0001...");
  EXPECT_EQ(TextForMessage(std::string(1000, 'x')), std::string(kMaxJsonInMessage, 'x') + "...");
  EXPECT_EQ(TextForMessage(std::string(5000, '/'), kMaxPathInMessage).size(),
            kMaxPathInMessage + 3);
}

TEST_F(JsonValueTest, PathForMessageEscapesAndKeepsAPathsLength) {
  EXPECT_EQ(PathForMessage("/data/train/part-0.csv"), "/data/train/part-0.csv");
  EXPECT_EQ(PathForMessage("s3://b/a\nb'c\"d\xff" "e"), R"(s3://b/a\nb'c"d\xFFe)");
  const std::string path = "/" + std::string(5000, 'p');
  EXPECT_EQ(PathForMessage(path), path.substr(0, kMaxPathInMessage) + "...");
}

// A key in a path: as it is when safe, else quoted and escaped as JSON.
TEST_F(JsonValueTest, PathKeyForMessageQuotesOnlyKeysThatNeedIt) {
  EXPECT_EQ(PathKeyForMessage("ml.m5.xlarge"), "ml.m5.xlarge");
  EXPECT_EQ(PathKeyForMessage("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(PathKeyForMessage("a\nb"), R"("a\nb")");
  EXPECT_EQ(PathKeyForMessage("a\"b"), R"("a\"b")");
  EXPECT_EQ(PathKeyForMessage("k\xE2\x80\xA8"), R"("k\u2028")");
  EXPECT_EQ(PathKeyForMessage(std::string(1000, 'k')),
            "\"" + std::string(kMaxJsonInMessage - 1, 'k') + "...");
}

TEST_F(JsonValueTest, ErrorsShowInputEscapedAndCut) {
  // Outside strings, a character that breaks lines is named by code point.
  EXPECT_EQ(ErrorOf("[1,\xE2\x80\xA8]"),
            "line 1, column 4: expected a value, found character U+2028");
  EXPECT_EQ(ErrorOf("1\xC2\x85"),
            "line 1, column 2: unexpected character U+0085 after the JSON value");
  // Duplicate keys: escaped and cut.
  EXPECT_EQ(ErrorOf("{\"a\xE2\x80\xA8\":1,\"a\\u2028\":2}"),
            "line 1, column 9: duplicate key \"a\\u2028\" in object");
  const std::string key(100000, 'k');
  EXPECT_EQ(ErrorOf(absl::StrCat("{\"", key, "\":1,\"", key, "\":2}")),
            absl::StrCat("line 1, column 100007: duplicate key \"", std::string(199, 'k'),
                         "... in object"));
  // What the builders and converters are given.
  EXPECT_EQ(JsonValue::Number("1\n2").status().message(), "\"1\\n2\" is not a JSON number");
  std::string digits(501, '0');  // 1e500
  digits[0] = '1';
  EXPECT_EQ(JsonValue::Number(digits)->AsDouble().status().message(),
            absl::StrCat(digits.substr(0, kMaxJsonInMessage), "... is out of range for a double"));
  EXPECT_EQ(JsonValue::Number(digits)->AsInt64().status().message(),
            absl::StrCat(digits.substr(0, kMaxJsonInMessage), "... is out of range for a 64-bit "
                         "integer"));
}

TEST_F(JsonValueTest, BuildersMakeDocumentsAndSetReplacesInPlace) {
  JsonValue config = JsonValue::Object();
  config.Set("current_host", JsonValue::String("algo-1"))
      .Set("hosts", JsonValue::Array().Push(JsonValue::String("algo-1")).Push(JsonValue::String("algo-2")))
      .Set("count", JsonValue::Int(-3))
      .Set("big", JsonValue::Uint(18446744073709551615u))
      .Set("ok", JsonValue::Bool(true))
      .Set("nothing", JsonValue::Null());
  config.Set("current_host", JsonValue::String("algo-2"));
  EXPECT_EQ(WriteJson(config),
            R"({"current_host":"algo-2","hosts":["algo-1","algo-2"],"count":-3,)"
            R"("big":18446744073709551615,"ok":true,"nothing":null})");
  EXPECT_EQ(config.size(), 6u);
  EXPECT_EQ(config.Find("hosts")->size(), 2u);
}

TEST_F(JsonValueTest, IndentedOutputUsesTwoSpaces) {
  JsonValue value = JsonValue::Object();
  value.Set("a", JsonValue::Array().Push(JsonValue::Int(1)).Push(JsonValue::Object()))
      .Set("b", JsonValue::Array())
      .Set("c", JsonValue::Object().Set("d", JsonValue::String("e")));
  EXPECT_EQ(WriteJson(value, /*indent=*/true),
            "{\n"
            "  \"a\": [\n"
            "    1,\n"
            "    {}\n"
            "  ],\n"
            "  \"b\": [],\n"
            "  \"c\": {\n"
            "    \"d\": \"e\"\n"
            "  }\n"
            "}");
  EXPECT_EQ(WriteJson(JsonValue::Int(7), true), "7");
}

TEST_F(JsonValueTest, WrittenTextParsesBackEqual) {
  const std::string_view text = R"({
    "TrainingJobName": "job-1",
    "Seed": 9007199254740993,
    "Time": 1795253152.163000001,
    "List": [1, -2.5e3, "x\u0000y", true, false, null, {"nested": [[], {}]}],
    "Unicode": "\u00e9\ud83d\ude00"
  })";
  absl::StatusOr<JsonValue> first = ParseJsonValue(text);
  ASSERT_TRUE(first.ok()) << first.status();
  for (bool indent : {false, true}) {
    absl::StatusOr<JsonValue> second = ParseJsonValue(WriteJson(*first, indent));
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(*first, *second);
  }
  JsonValue changed = *first;
  *changed.FindMutable("Seed") = JsonValue::Int(9007199254740992);
  EXPECT_NE(*first, changed);
}

TEST_F(JsonValueTest, MutatedDocumentsNeverCrashAndRoundTripWhenAccepted) {
  const std::string base =
      R"({"a":[1,-2.5e3,"x\u00e9\ud83d\ude00\n",true,false,null,{"b":{}}],"c":"café","d":[[]]})";
  const std::string alphabet = std::string("{}[],:\"\\/ \n0123456789-+.eEtrufalsn\x80\xC3\xED\xF0\xFF\0", 40);
  std::mt19937 rng(20261121);  // fixed seed: the same cases every run
  int accepted = 0;
  for (int round = 0; round < 5000; ++round) {
    std::string text = base;
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations && !text.empty(); ++m) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 4) {
        case 0: text[at] = c; break;
        case 1: text.erase(at, 1); break;
        case 2: text.insert(at, 1, c); break;
        default: text.resize(at); break;
      }
    }
    absl::StatusOr<JsonValue> value = ParseJsonValue(text);
    if (!value.ok()) {
      EXPECT_THAT(std::string(value.status().message()), ::testing::StartsWith("line ")) << text;
      continue;
    }
    ++accepted;
    for (bool indent : {false, true}) {
      absl::StatusOr<JsonValue> back = ParseJsonValue(WriteJson(*value, indent));
      ASSERT_TRUE(back.ok()) << text;
      EXPECT_EQ(*back, *value) << text;
    }
  }
  EXPECT_GT(accepted, 100);  // the test exercises both paths
}

}  // namespace
}  // namespace kiln::internal
