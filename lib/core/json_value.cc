#include "kiln/plugin/json_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fmt/format.h"

namespace kiln {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the valid UTF-8 sequence starting at s[i] (1 to 4), or 0 when the
// bytes there are not valid UTF-8 (bad lead byte, bad or missing continuation,
// overlong form, surrogate code point, or beyond U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) -> unsigned {
    return k < s.size() ? static_cast<unsigned char>(s[k]) : 0x100u;
  };
  const unsigned b0 = byte(i);
  if (b0 < 0x80) return 1;
  const auto cont = [](unsigned b, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return b >= lo && b <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(byte(i + 1)) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = b0 == 0xED ? 0x9F : 0xBF;
    return cont(byte(i + 1), lo, hi) && cont(byte(i + 2)) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return cont(byte(i + 1), lo, hi) && cont(byte(i + 2)) && cont(byte(i + 3)) ? 4 : 0;
  }
  return 0;
}


// How AppendEscaped writes a string.
enum class Escape {
  kJson,            // a JSON string literal: '"', '\\' and C0 controls escaped
  kJsonForMessage,  // kJson, and DEL, C1 controls, U+2028, U+2029 escaped too
  kMessage,         // no quotes; controls and separators escaped, bad bytes \xHH
};

// The code point of the valid UTF-8 sequence of length n (2 to 4) at s[i].
uint32_t DecodeUtf8(std::string_view s, size_t i, size_t n) {
  uint32_t cp = static_cast<unsigned char>(s[i]) & (0x7Fu >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  return cp;
}

// Characters beyond C0 that a message must not carry raw: DEL and the C1
// controls (U+0085 NEL among them) and the line and paragraph separators,
// which Python's splitlines, JavaScript and some log viewers break lines at.
bool BreaksLines(uint32_t cp) {
  return (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029;
}

// Appends `text` to `out` written as `mode` says.
void AppendEscaped(std::string_view text, Escape mode, std::string& out) {
  const bool json = mode != Escape::kMessage;
  if (json) out.push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80 ? 1 : Utf8SequenceLength(text, i);
    if (n == 0) {
      if (json) {
        out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER: the output stays valid JSON
      } else {
        out += absl::StrFormat("\\x%02X", c);
      }
      ++i;
      continue;
    }
    const uint32_t cp = n == 1 ? c : DecodeUtf8(text, i, n);
    if (mode != Escape::kJson && BreaksLines(cp)) {
      out += absl::StrFormat("\\u%04x", cp);
    } else if (n > 1) {
      out.append(text.substr(i, n));
    } else {
      switch (c) {
        case '"': out += json ? "\\\"" : "\""; break;
        case '\\': out += json ? "\\\\" : "\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20) {
            out += absl::StrFormat("\\u%04x", c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
    }
    i += n;
  }
  if (json) out.push_back('"');
}

// Scans a JSON number starting at text[pos]. On success returns the position
// just past it; on failure returns the position of the offending character
// and sets `*error`.
size_t ScanNumber(std::string_view text, size_t pos, std::string* error) {
  const auto at = [&](size_t k) { return k < text.size() ? text[k] : '\0'; };
  if (at(pos) == '-') ++pos;
  if (at(pos) == '0') {
    ++pos;
    if (IsDigit(at(pos))) {
      *error = "invalid number: leading zeros are not allowed";
      return pos;
    }
  } else if (IsDigit(at(pos))) {
    while (IsDigit(at(pos))) ++pos;
  } else {
    *error = "invalid number: expected a digit after '-'";
    return pos;
  }
  if (at(pos) == '.') {
    ++pos;
    if (!IsDigit(at(pos))) {
      *error = "invalid number: expected a digit after '.'";
      return pos;
    }
    while (IsDigit(at(pos))) ++pos;
  }
  if (at(pos) == 'e' || at(pos) == 'E') {
    ++pos;
    if (at(pos) == '+' || at(pos) == '-') ++pos;
    if (!IsDigit(at(pos))) {
      *error = "invalid number: expected a digit in the exponent";
      return pos;
    }
    while (IsDigit(at(pos))) ++pos;
  }
  return pos;
}

// How a character is named in an error message.
std::string Describe(std::string_view text, size_t pos) {
  if (pos >= text.size()) return "end of input";
  const unsigned char c = static_cast<unsigned char>(text[pos]);
  if (c >= 0x20 && c < 0x7F) return absl::StrCat("'", std::string(1, static_cast<char>(c)), "'");
  if (c < 0x80) return absl::StrFormat("character U+%04X", c);
  const size_t n = Utf8SequenceLength(text, pos);
  if (n == 0) return absl::StrFormat("invalid UTF-8 byte 0x%02X", c);
  // Shown by number, not as itself: the message must stay on one line.
  if (const uint32_t cp = DecodeUtf8(text, pos, n); BreaksLines(cp)) {
    return absl::StrFormat("character U+%04X", cp);
  }
  return absl::StrCat("'", std::string(text.substr(pos, n)), "'");
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> Parse() {
    // RFC 8259 section 8.1: a parser may ignore a leading byte order mark.
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    JsonValue value;
    SkipWhitespace();
    if (!ParseValue(value, 0)) return Error();
    SkipWhitespace();
    if (pos_ < text_.size()) {
      Fail(pos_, absl::StrCat("unexpected ", Describe(text_, pos_), " after the JSON value"));
      return Error();
    }
    return value;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool AtEnd() const { return pos_ >= text_.size(); }

  void SkipWhitespace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  // Records the first error (position and what went wrong); returns false so
  // callers can `return Fail(...)`.
  bool Fail(size_t pos, std::string what) {
    error_pos_ = pos;
    error_ = std::move(what);
    return false;
  }

  absl::Status Error() const {
    size_t line = 1;
    size_t line_start = 0;
    const size_t end = std::min(error_pos_, text_.size());
    for (size_t i = 0; i < end; ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    size_t column = 1;
    for (size_t i = line_start; i < end; ++i) {
      // Count characters, not bytes: skip UTF-8 continuation bytes.
      if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) ++column;
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ", column ", column, ": ", error_));
  }

  bool ParseValue(JsonValue& out, int depth) {
    const char c = Peek();
    switch (c) {
      case '{':
        return ParseObject(out, depth + 1);
      case '[':
        return ParseArray(out, depth + 1);
      case '"': {
        std::string s;
        if (!ParseString(s)) return false;
        out = JsonValue::String(std::move(s));
        return true;
      }
      case 't':
        return ParseLiteral("true", JsonValue::Bool(true), out);
      case 'f':
        return ParseLiteral("false", JsonValue::Bool(false), out);
      case 'n':
        return ParseLiteral("null", JsonValue::Null(), out);
      default:
        if (c == '-' || IsDigit(c)) return ParseNumber(out);
        if (AtEnd()) return Fail(pos_, "unexpected end of input, expected a value");
        return Fail(pos_, absl::StrCat("expected a value, found ", Describe(text_, pos_)));
    }
  }

  bool ParseLiteral(std::string_view word, JsonValue value, JsonValue& out) {
    if (text_.substr(pos_, word.size()) != word) {
      return Fail(pos_, "invalid literal (expected true, false or null)");
    }
    pos_ += word.size();
    out = std::move(value);
    return true;
  }

  bool ParseNumber(JsonValue& out) {
    std::string error;
    const size_t start = pos_;
    const size_t end = ScanNumber(text_, pos_, &error);
    if (!error.empty()) return Fail(end, std::move(error));
    absl::StatusOr<JsonValue> number = JsonValue::Number(text_.substr(start, end - start));
    if (!number.ok()) return Fail(start, "invalid number");  // cannot happen: just scanned
    out = *std::move(number);
    pos_ = end;
    return true;
  }

  // Parses 4 hex digits at pos_ (after "\u").
  bool ParseHex4(uint32_t& cp) {
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = Peek();
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return Fail(pos_, "invalid \\u escape: expected 4 hex digits");
      }
      cp = cp * 16 + digit;
      ++pos_;
    }
    return true;
  }

  bool ParseString(std::string& out) {
    const size_t open = pos_;
    ++pos_;  // '"'
    while (true) {
      if (AtEnd()) return Fail(open, "unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c == '\\') {
        const size_t escape = pos_;
        ++pos_;
        if (AtEnd()) return Fail(open, "unterminated string");
        const char e = Peek();
        ++pos_;
        switch (e) {
          case '"': out.push_back('"'); break;
          case '\\': out.push_back('\\'); break;
          case '/': out.push_back('/'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          case 'n': out.push_back('\n'); break;
          case 'r': out.push_back('\r'); break;
          case 't': out.push_back('\t'); break;
          case 'u': {
            uint32_t cp;
            if (!ParseHex4(cp)) return false;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
              return Fail(escape, absl::StrFormat("unpaired low surrogate \\u%04X", cp));
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              const size_t second = pos_;
              uint32_t low = 0;
              if (text_.substr(pos_, 2) != "\\u") {
                return Fail(escape, absl::StrFormat(
                                        "unpaired high surrogate \\u%04X: expected a \\uDC00-\\uDFFF "
                                        "escape after it",
                                        cp));
              }
              pos_ += 2;
              if (!ParseHex4(low)) return false;
              if (low < 0xDC00 || low > 0xDFFF) {
                return Fail(second, absl::StrFormat("unpaired high surrogate \\u%04X: \\u%04X is not "
                                                    "a low surrogate (\\uDC00-\\uDFFF)",
                                                    cp, low));
              }
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            AppendUtf8(cp, out);
            break;
          }
          default:
            return Fail(escape, absl::StrCat("invalid escape: backslash followed by ",
                                             Describe(text_, pos_ - 1),
                                             " (valid: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)"));
        }
        continue;
      }
      if (c < 0x20) {
        return Fail(pos_, absl::StrFormat("unescaped control character U+%04X in string", c));
      }
      if (c < 0x80) {
        out.push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      const size_t n = Utf8SequenceLength(text_, pos_);
      if (n == 0) return Fail(pos_, absl::StrFormat("invalid UTF-8 byte 0x%02X in string", c));
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  bool CheckDepth(int depth) {
    if (depth > kMaxJsonDepth) {
      return Fail(pos_, absl::StrCat("nesting deeper than ", kMaxJsonDepth, " levels"));
    }
    return true;
  }

  bool ParseArray(JsonValue& out, int depth) {
    if (!CheckDepth(depth)) return false;
    ++pos_;  // '['
    out = JsonValue::Array();
    SkipWhitespace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      JsonValue element;
      if (!ParseValue(element, depth)) return false;
      out.Push(std::move(element));
      SkipWhitespace();
      if (Peek() == ',') {
        ++pos_;
        SkipWhitespace();
        if (Peek() == ']') return Fail(pos_, "trailing comma before ']'");
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      return Fail(pos_, absl::StrCat("expected ',' or ']' after array element, found ",
                                     Describe(text_, pos_)));
    }
  }

  bool ParseObject(JsonValue& out, int depth) {
    if (!CheckDepth(depth)) return false;
    ++pos_;  // '{'
    out = JsonValue::Object();
    std::vector<JsonValue::Member>& members = out.mutable_members();
    // Objects with many members check duplicates through an index.
    constexpr size_t kIndexFrom = 16;
    absl::flat_hash_map<std::string, size_t> index;
    SkipWhitespace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      if (Peek() != '"') {
        return Fail(pos_, absl::StrCat(members.empty() ? "expected a string key or '}', found "
                                                       : "expected a string key, found ",
                                       Describe(text_, pos_)));
      }
      const size_t key_pos = pos_;
      std::string key;
      if (!ParseString(key)) return false;
      bool duplicate = false;
      if (members.size() < kIndexFrom) {
        for (const auto& [k, v] : members) duplicate = duplicate || k == key;
        if (!duplicate && members.size() + 1 == kIndexFrom) {
          for (size_t i = 0; i < members.size(); ++i) index.emplace(members[i].first, i);
          index.emplace(key, members.size());
        }
      } else {
        duplicate = !index.emplace(key, members.size()).second;
      }
      if (duplicate) {
        return Fail(key_pos, absl::StrCat("duplicate key ", JsonForMessage(JsonValue::String(key)),
                                          " in object"));
      }
      SkipWhitespace();
      if (Peek() != ':') {
        return Fail(pos_, absl::StrCat("expected ':' after object key, found ", Describe(text_, pos_)));
      }
      ++pos_;
      SkipWhitespace();
      JsonValue value;
      if (!ParseValue(value, depth)) return false;
      members.emplace_back(std::move(key), std::move(value));
      SkipWhitespace();
      if (Peek() == ',') {
        ++pos_;
        SkipWhitespace();
        if (Peek() == '}') return Fail(pos_, "trailing comma before '}'");
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      return Fail(pos_, absl::StrCat("expected ',' or '}' after object member, found ",
                                     Describe(text_, pos_)));
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t error_pos_ = 0;
  std::string error_;
};

void AppendIndent(int level, std::string& out) {
  out.push_back('\n');
  out.append(static_cast<size_t>(level) * 2, ' ');
}

void Write(const JsonValue& value, bool indent, int level, Escape escape, std::string& out) {
  switch (value.kind()) {
    case JsonValue::Kind::kNull:
      out += "null";
      return;
    case JsonValue::Kind::kBool:
      out += value.bool_value() ? "true" : "false";
      return;
    case JsonValue::Kind::kNumber:
      out += value.number_lexeme();
      return;
    case JsonValue::Kind::kString:
      AppendEscaped(value.string_value(), escape, out);
      return;
    case JsonValue::Kind::kArray: {
      out.push_back('[');
      bool first = true;
      for (const JsonValue& element : value.elements()) {
        if (!first) out.push_back(',');
        first = false;
        if (indent) AppendIndent(level + 1, out);
        Write(element, indent, level + 1, escape, out);
      }
      if (indent && !first) AppendIndent(level, out);
      out.push_back(']');
      return;
    }
    case JsonValue::Kind::kObject: {
      out.push_back('{');
      bool first = true;
      for (const auto& [key, member] : value.members()) {
        if (!first) out.push_back(',');
        first = false;
        if (indent) AppendIndent(level + 1, out);
        AppendEscaped(key, escape, out);
        out += indent ? ": " : ":";
        Write(member, indent, level + 1, escape, out);
      }
      if (indent && !first) AppendIndent(level, out);
      out.push_back('}');
      return;
    }
  }
}

}  // namespace

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = value;
  return v;
}

JsonValue JsonValue::Int(int64_t value) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.text_ = absl::StrCat(value);
  return v;
}

JsonValue JsonValue::Uint(uint64_t value) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.text_ = absl::StrCat(value);
  return v;
}

JsonValue JsonValue::Double(double value) {
  if (!std::isfinite(value)) return JsonValue();
  JsonValue v;
  v.kind_ = Kind::kNumber;
  // fmt's "{}" is the shortest text that reads back as the same double; its
  // forms ("1", "0.1", "1e+300", "-0", "5e-324") are all JSON numbers.
  v.text_ = fmt::format("{}", value);
  return v;
}

absl::StatusOr<JsonValue> JsonValue::Number(std::string_view lexeme) {
  std::string error;
  const size_t end = lexeme.empty() ? 0 : ScanNumber(lexeme, 0, &error);
  if (lexeme.empty() || !error.empty() || end != lexeme.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        JsonForMessage(JsonValue::String(std::string(lexeme))), " is not a JSON number"));
  }
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.text_ = std::string(lexeme);
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.text_ = std::move(value);
  return v;
}

JsonValue JsonValue::Array() {
  JsonValue v;
  v.kind_ = Kind::kArray;
  return v;
}

JsonValue JsonValue::Object() {
  JsonValue v;
  v.kind_ = Kind::kObject;
  return v;
}

bool JsonValue::IsIntegerLexeme() const {
  return kind_ == Kind::kNumber && text_.find_first_of(".eE") == std::string::npos;
}

absl::StatusOr<int64_t> JsonValue::AsInt64() const {
  if (kind_ != Kind::kNumber) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an integer, found ", std::string(JsonKindName(kind_))));
  }
  if (!IsIntegerLexeme()) {
    return absl::InvalidArgumentError(
        absl::StrCat(JsonForMessage(*this), " is not an integer (it has a fraction or exponent)"));
  }
  int64_t result = 0;
  const auto [ptr, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), result);
  if (ec != std::errc() || ptr != text_.data() + text_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(JsonForMessage(*this), " is out of range for a 64-bit integer"));
  }
  return result;
}

absl::StatusOr<double> JsonValue::AsDouble() const {
  if (kind_ != Kind::kNumber) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a number, found ", std::string(JsonKindName(kind_))));
  }
  double result = 0;
  const auto [ptr, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), result);
  if (ec == std::errc::result_out_of_range) {
    // from_chars reports underflow and overflow alike; underflow is just 0.
    const JsonNumberParts parts = SplitJsonNumber(text_);
    const size_t lead = parts.integer.find_first_not_of('0');
    int64_t magnitude;  // decimal exponent of the leading nonzero digit
    if (lead != std::string_view::npos) {
      magnitude = static_cast<int64_t>(parts.integer.size() - lead) - 1 + parts.exponent;
    } else {
      const size_t first = parts.fraction.find_first_not_of('0');
      magnitude = first == std::string_view::npos ? -1 : -static_cast<int64_t>(first) - 1 + parts.exponent;
    }
    if (magnitude < 0) return parts.negative ? -0.0 : 0.0;
    return absl::InvalidArgumentError(
        absl::StrCat(JsonForMessage(*this), " is out of range for a double"));
  }
  if (ec != std::errc() || ptr != text_.data() + text_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(JsonForMessage(*this), " is not a number"));
  }
  return result;
}

size_t JsonValue::size() const {
  if (kind_ == Kind::kArray) return elements_.size();
  if (kind_ == Kind::kObject) return members_.size();
  return 0;
}

const JsonValue* JsonValue::Find(std::string_view key) const {
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

JsonValue* JsonValue::FindMutable(std::string_view key) {
  for (auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

JsonValue& JsonValue::Set(std::string key, JsonValue value) {
  if (JsonValue* existing = FindMutable(key)) {
    *existing = std::move(value);
  } else {
    members_.emplace_back(std::move(key), std::move(value));
  }
  return *this;
}

JsonValue& JsonValue::Push(JsonValue value) {
  elements_.push_back(std::move(value));
  return *this;
}

bool operator==(const JsonValue& a, const JsonValue& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case JsonValue::Kind::kNull:
      return true;
    case JsonValue::Kind::kBool:
      return a.bool_ == b.bool_;
    case JsonValue::Kind::kNumber:
    case JsonValue::Kind::kString:
      return a.text_ == b.text_;
    case JsonValue::Kind::kArray:
      return a.elements_ == b.elements_;
    case JsonValue::Kind::kObject:
      return a.members_ == b.members_;
  }
  return false;
}

JsonNumberParts SplitJsonNumber(std::string_view lexeme) {
  JsonNumberParts parts;
  size_t i = 0;
  if (i < lexeme.size() && lexeme[i] == '-') {
    parts.negative = true;
    ++i;
  }
  size_t start = i;
  while (i < lexeme.size() && IsDigit(lexeme[i])) ++i;
  parts.integer = lexeme.substr(start, i - start);
  if (i < lexeme.size() && lexeme[i] == '.') {
    start = ++i;
    while (i < lexeme.size() && IsDigit(lexeme[i])) ++i;
    parts.fraction = lexeme.substr(start, i - start);
  }
  if (i < lexeme.size() && (lexeme[i] == 'e' || lexeme[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < lexeme.size() && (lexeme[i] == '+' || lexeme[i] == '-')) negative = lexeme[i++] == '-';
    constexpr int64_t kCap = 1'000'000'000;
    int64_t exponent = 0;
    for (; i < lexeme.size() && IsDigit(lexeme[i]); ++i) {
      exponent = std::min(kCap, exponent * 10 + (lexeme[i] - '0'));
    }
    parts.exponent = negative ? -exponent : exponent;
  }
  return parts;
}

std::string_view JsonKindName(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull: return "null";
    case JsonValue::Kind::kBool: return "boolean";
    case JsonValue::Kind::kNumber: return "number";
    case JsonValue::Kind::kString: return "string";
    case JsonValue::Kind::kArray: return "array";
    case JsonValue::Kind::kObject: return "object";
  }
  return "unknown";
}

absl::StatusOr<JsonValue> ParseJsonValue(std::string_view text) { return Parser(text).Parse(); }

std::string WriteJson(const JsonValue& value, bool indent) {
  std::string out;
  Write(value, indent, 0, Escape::kJson, out);
  return out;
}

void AppendJsonString(std::string_view text, std::string& out) {
  AppendEscaped(text, Escape::kJson, out);
}

std::string JsonForMessage(const JsonValue& value, size_t max_bytes) {
  std::string text;
  Write(value, /*indent=*/false, 0, Escape::kJsonForMessage, text);
  if (text.size() <= max_bytes) return text;
  // Cut before the first unit that does not fit whole. A unit is an escape
  // (backslash and what follows; in JSON text a backslash only ever starts
  // one) or a UTF-8 character (the writer emits only valid ones).
  size_t cut = 0;
  while (cut < text.size()) {
    size_t unit = 1;
    if (text[cut] == '\\') {
      unit = cut + 1 < text.size() && text[cut + 1] == 'u' ? 6 : 2;
    } else if (static_cast<unsigned char>(text[cut]) >= 0x80) {
      unit = std::max<size_t>(1, Utf8SequenceLength(text, cut));
    }
    if (cut + unit > max_bytes) break;
    cut += unit;
  }
  text.resize(cut);
  text += "...";
  return text;
}

std::string EscapeForMessage(std::string_view text) {
  std::string out;
  AppendEscaped(text, Escape::kMessage, out);
  return out;
}

std::string TextForMessage(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return EscapeForMessage(text);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  std::string out = EscapeForMessage(text.substr(0, cut));
  out += "...";
  return out;
}

std::string PathForMessage(std::string_view path) {
  return TextForMessage(path, kMaxPathInMessage);
}

std::string PathKeyForMessage(std::string_view key) {
  // Every key of every path passes here (most on success paths, which build
  // paths before knowing of an error): printable ASCII takes the short way.
  const bool plain = key.size() + 2 <= kMaxJsonInMessage &&
                     std::all_of(key.begin(), key.end(), [](char c) {
                       return c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
                     });
  if (plain) return std::string(key);
  std::string quoted = JsonForMessage(JsonValue::String(std::string(key)));
  // Other UTF-8 that needed no escape and no cut reads as it is.
  if (quoted.size() == key.size() + 2 && std::string_view(quoted).substr(1, key.size()) == key) {
    return std::string(key);
  }
  return quoted;
}

}  // namespace kiln
