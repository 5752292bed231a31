#include "core/internal/shapes.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/internal/byte_dfa.h"
#include "core/internal/regex.h"
#include "core/internal/utf8.h"
#include "kiln/plugin/json_value.h"

namespace kiln::internal {
namespace {

constexpr size_t kMaxValueInMessage = 256;
// Kiln's extension: wherever the model allows an S3 URI, `file://` is allowed
// too (when ValidationOptions::allow_local_uris is set).
constexpr std::string_view kLocalUriPattern = "file://.+";

[[noreturn]] void ModelDefect(std::string_view what) {
  std::fprintf(stderr, "kiln: compiled service model is broken: %.*s\n",
               static_cast<int>(what.size()), what.data());
  std::abort();
}

bool IsAscii(std::string_view s) {
  const char* p = s.data();
  const size_t n = s.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, sizeof word);
    if ((word & 0x8080808080808080ULL) != 0) return false;
  }
  for (; i < n; ++i) {
    if ((static_cast<unsigned char>(p[i]) & 0x80) != 0) return false;
  }
  return true;
}

// Well-formed UTF-8 (utf8.h), which is what PCRE2 demands of a subject in UTF mode.
bool WellFormed(std::string_view s) { return IsAscii(s) || IsValidUtf8(s); }

// The model's patterns are Java regexes, and Java's `.` matches any character
// but a line terminator: \n, \r, U+0085, U+2028 and U+2029. PCRE2's `.` (and
// ByteDfa's, which follows PCRE2) excludes only \n. So a pattern with a dot is
// given to PCRE2 with each dot spelled as Java means it (JavaDots), and its
// automaton, which keeps PCRE2's dot, decides only values without the four
// other terminators, where the two dots agree.
constexpr std::string_view kJavaDot = "[^\\n\\r\\x{85}\\x{2028}\\x{2029}]";

// `pattern` with every `.` outside a character class replaced by kJavaDot;
// `*has_dot` tells whether there was one. (The model's patterns use no
// nested classes or \Q...\E quoting.)
std::string JavaDots(std::string_view pattern, bool* has_dot) {
  std::string out;
  *has_dot = false;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      out += c;
      out += pattern[++i];
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    if (c == '.' && !in_class) {
      out.append(kJavaDot);
      *has_dot = true;
      continue;
    }
    out += c;
  }
  return out;
}

// Whether `s` holds a line terminator of Java's other than \n: \r, U+0085
// (C2 85), U+2028 (E2 80 A8) or U+2029 (E2 80 A9).
bool HasOtherLineTerminator(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = p[i];
    if (c == '\r') return true;
    if (c == 0xC2 && i + 1 < n && p[i + 1] == 0x85) return true;
    if (c == 0xE2 && i + 2 < n && p[i + 1] == 0x80 && (p[i + 2] == 0xA8 || p[i + 2] == 0xA9)) {
      return true;
    }
  }
  return false;
}

// How a pattern is decided. The model's catch-all patterns need no regex
// engine: `[\S\s]*` accepts any well-formed text; `.*` any well-formed text
// without a line terminator (Java's dot), `.+` the same when not empty. Most
// others are simple enough for a byte automaton (kDfa); the rest (lookbehind,
// Unicode properties, very long counted repeats) keep PCRE2.
enum class Rule { kRegex, kAnyText, kLine, kNonEmptyLine, kDfa };

struct CompiledPattern {
  Rule rule = Rule::kRegex;
  // kRegex: decides every value. kDfa: decides the values the automaton may
  // not (set only when the pattern has a dot; see HasOtherLineTerminator).
  std::unique_ptr<Regex> regex;
  std::unique_ptr<ByteDfa> dfa;   // kDfa only
};

std::unique_ptr<Regex> CompileOrDie(std::string_view text) {
  std::string error;
  std::unique_ptr<Regex> regex = Regex::Compile(text, Regex::Mode::kFullMatch, &error);
  if (regex == nullptr) ModelDefect(std::string(text) + ": " + error);
  return regex;
}

// True when PCRE2's `.` (as compiled here) matches every character but a line
// feed, so that ByteDfa may compile `.` (as PCRE2's dot: see JavaDots). It
// does with the default newline convention (LF); other builds keep PCRE2 for
// patterns with a dot.
bool DotIsAllButLineFeed() {
  std::unique_ptr<Regex> dot = CompileOrDie(".");
  static constexpr std::string_view kOthers[] = {
      "a", "\r", "\v", "\f", std::string_view("\0", 1), "\xc2\x85", "\xe2\x80\xa8",
      "\xe2\x80\xa9", "\xc3\xa9", "\xf0\x9f\x98\x80"};
  for (std::string_view c : kOthers) {
    if (!dot->Matches(c)) return false;
  }
  return !dot->Matches("\n");
}

Rule RuleFor(std::string_view text) {
  if (text == "[\\S\\s]*" || text == "[\\s\\S]*") return Rule::kAnyText;
  if (text == ".*") return Rule::kLine;
  if (text == ".+") return Rule::kNonEmptyLine;
  return Rule::kRegex;
}

bool Decide(const CompiledPattern& p, std::string_view value) {
  switch (p.rule) {
    case Rule::kAnyText:
      return WellFormed(value);
    case Rule::kNonEmptyLine:
      if (value.empty()) return false;
      [[fallthrough]];
    case Rule::kLine:
      return std::memchr(value.data(), '\n', value.size()) == nullptr &&
             !HasOtherLineTerminator(value) && WellFormed(value);
    case Rule::kDfa:
      if (!WellFormed(value)) return false;
      if (p.regex != nullptr && HasOtherLineTerminator(value)) {
        return p.regex->MatchesValidUtf8(value);
      }
      return p.dfa->Matches(value);
    case Rule::kRegex:
      break;
  }
  return WellFormed(value) && p.regex->MatchesValidUtf8(value);
}

struct CompiledPatterns {
  std::vector<CompiledPattern> by_id;
  CompiledPattern local_uri;  // kLocalUriPattern
};

CompiledPattern CompilePattern(std::string_view text, bool dot_rules) {
  CompiledPattern p;
  p.rule = RuleFor(text);
  // Compiled either way: a pattern of the model that PCRE2 rejects is a defect
  // to report at once, whichever rule decides it.
  bool has_dot = false;
  std::unique_ptr<Regex> regex = CompileOrDie(JavaDots(text, &has_dot));
  if (p.rule == Rule::kRegex) {
    p.dfa = ByteDfa::Compile(text, dot_rules);
    if (p.dfa != nullptr) {
      p.rule = Rule::kDfa;
      if (has_dot) p.regex = std::move(regex);
    } else {
      p.regex = std::move(regex);
    }
  }
  return p;
}

const CompiledPatterns& Compiled() {
  static const CompiledPatterns* compiled = [] {
    auto* c = new CompiledPatterns();
    const bool dot_rules = DotIsAllButLineFeed();
    int count = 0;
    const Pattern* const* all = AllPatterns(&count);
    c->by_id.reserve(count);
    for (int i = 0; i < count; ++i) c->by_id.push_back(CompilePattern(all[i]->text(), dot_rules));
    c->local_uri = CompilePattern(kLocalUriPattern, dot_rules);
    return c;
  }();
  return *compiled;
}

bool LocalUriMatches(std::string_view value) { return Decide(Compiled().local_uri, value); }

std::string JoinStrings(const std::string_view* values, int count, std::string_view separator) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    if (i > 0) out.append(separator);
    out.append(values[i]);
  }
  return out;
}

// Pattern::Matches remembers this many accepted values per pattern, each up
// to kMaxRemembered bytes.
constexpr size_t kRemembered = 4;
constexpr size_t kMaxRemembered = 256;

}  // namespace

bool Pattern::Matches(std::string_view value, Memo memo) const {
  const CompiledPattern& p = Compiled().by_id[id_];
  if ((p.rule != Rule::kRegex && p.rule != Rule::kDfa) || memo == Memo::kSkip) {
    return Decide(p, value);
  }
  // Requests are mostly built from templates, so the same values come back
  // job after job (a role, an image, a bucket). Each thread remembers the
  // last few values each pattern accepted (several fields share a pattern:
  // the S3 URIs of channels, output and checkpoints): a repeat costs a
  // comparison instead of a match (a regex's call, or a UTF-8 check and an
  // automaton's pass). Only acceptances are remembered, and only short values.
  struct Accepted {
    std::array<std::string, kRemembered> values;
    std::array<bool, kRemembered> set{};
    size_t next = 0;  // the entry to replace
  };
  thread_local std::vector<Accepted> last;
  if (last.empty()) last.resize(Compiled().by_id.size());
  Accepted& a = last[id_];
  for (size_t k = 0; k < kRemembered; ++k) {
    if (a.set[k] && a.values[k] == value) return true;
  }
  if (!Decide(p, value)) return false;
  if (value.size() <= kMaxRemembered) {
    a.values[a.next].assign(value.data(), value.size());
    a.set[a.next] = true;
    a.next = (a.next + 1) % kRemembered;
  }
  return true;
}

uint32_t EnumTable::Hash(std::string_view value, uint32_t seed) {
  uint32_t h = 2166136261u ^ seed;
  for (const char c : value) {
    h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  }
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return h;
}

bool EnumTable::Contains(std::string_view value) const {
  for (uint32_t i = Hash(value, seed) & mask;; i = (i + 1) & mask) {
    const uint16_t slot = slots[i];
    if (slot == 0) return false;  // the table is at most half full: always reached
    if (values[slot - 1] == value) return true;
  }
}

int64_t Utf16Length(std::string_view s) {
  if (IsAscii(s)) return static_cast<int64_t>(s.size());
  // Each lead byte stands for its sequence; a four-byte one for a surrogate
  // pair. (Malformed text gets a count too: the pattern check rejects it.)
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len =
        c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n += len == 4 ? 2 : 1;
    i += len;
  }
  return n;
}

std::string QuoteValue(std::string_view value) {
  std::string out = "'";
  out += TextForMessage(value, kMaxValueInMessage);
  out += '\'';
  return out;
}

// ---------------------------------------------------------------------------
// ShapeChecker

namespace {

// A string no pattern or enumeration constrains must still be well-formed
// UTF-8 (a pattern never matches anything else): the service's JSON cannot
// carry other bytes, and protobuf will not parse them back in a proto3 string.
// (The generated checks look only at strings with some constraint: a string
// of none, such as a response's StatusMessage, is not checked at all.)
bool NeedsUtf8Check(const Shape& shape) {
  return shape.pattern == nullptr && shape.enum_values == nullptr;
}

}  // namespace

bool ShapeChecker::StringOk(std::string_view value, const Shape& shape, Pattern::Memo memo) const {
  if (shape.has_min || shape.has_max) {
    const int64_t length = Utf16Length(value);
    if ((shape.has_max && length > shape.max) || (shape.has_min && length < shape.min)) {
      return false;
    }
  }
  if (NeedsUtf8Check(shape) && !WellFormed(value)) return false;
  if (shape.pattern != nullptr && !shape.pattern->Matches(value, memo) &&
      !(allow_local_uris_ && shape.local_uri_alternative && LocalUriMatches(value))) {
    return false;
  }
  return shape.enum_values == nullptr || shape.enum_values->Contains(value);
}

void ShapeChecker::StringViolations(std::string_view value, const Shape& shape,
                                    std::vector<std::string>& out) const {
  const int64_t length = Utf16Length(value);
  if (shape.has_max && length > shape.max) {
    out.push_back("Member must have length less than or equal to " + std::to_string(shape.max));
  }
  if (shape.has_min && length < shape.min) {
    out.push_back("Member must have length greater than or equal to " +
                  std::to_string(shape.min));
  }
  if (NeedsUtf8Check(shape) && !WellFormed(value)) out.push_back("Member must be valid UTF-8");
  if (shape.pattern != nullptr && !shape.pattern->Matches(value)) {
    const bool local = allow_local_uris_ && shape.local_uri_alternative;
    if (!(local && LocalUriMatches(value))) {
      std::string constraint = "Member must satisfy regular expression pattern: ^";
      constraint.append(shape.pattern->text());
      if (local) {
        constraint.append(" or ^");
        constraint.append(kLocalUriPattern);
      }
      out.push_back(std::move(constraint));
    }
  }
  if (shape.enum_values != nullptr && !shape.enum_values->Contains(value)) {
    out.push_back("Member must satisfy enum value set: [" +
                  JoinStrings(shape.enum_values->values, shape.enum_values->count, ", ") + "]");
  }
}

std::string ShapeChecker::PathText(std::string_view member) const {
  std::string out;
  for (int i = 0; i < depth_; ++i) {
    const PathPart& p = path_[i];
    if (p.number > 0) {
      out.append(".").append(std::to_string(p.number)).append(".member");
      continue;
    }
    if (!out.empty()) out += '.';
    out.append(p.name);
  }
  if (!member.empty()) {
    if (!out.empty()) out += '.';
    out.append(member);
  }
  return out;
}

void ShapeChecker::Add(std::string_view member, const std::string& value,
                       const std::string& constraint) {
  if (errors_.full()) {
    errors_.Count();
    return;
  }
  std::string path = PathText(member);
  std::string message = "Value " + value + " at '" + PathForMessage(path) +
                        "' failed to satisfy constraint: " + constraint;
  errors_.Add(ValidationError{std::move(path), std::move(message)});
}

void ShapeChecker::Missing(std::string_view member) {
  Add(member, "null", "Member must not be null");
}

void ShapeChecker::ReportString(std::string_view value, const Shape& shape,
                                std::string_view member) {
  std::vector<std::string> violations;
  StringViolations(value, shape, violations);
  for (const std::string& constraint : violations) Add(member, QuoteValue(value), constraint);
}

void ShapeChecker::ReportNumber(int64_t value, const Shape& shape, std::string_view member) {
  const std::string quoted = QuoteValue(std::to_string(value));
  if (shape.has_max && value > shape.max) {
    Add(member, quoted, "Member must have value less than or equal to " + std::to_string(shape.max));
  }
  if (shape.has_min && value < shape.min) {
    Add(member, quoted,
        "Member must have value greater than or equal to " + std::to_string(shape.min));
  }
}

void ShapeChecker::ReportSize(int64_t size, const Shape& shape, const std::string& rendered) {
  if (shape.has_max && size > shape.max) {
    Add({}, rendered, "Member must have length less than or equal to " + std::to_string(shape.max));
  }
  if (shape.has_min && size < shape.min) {
    Add({}, rendered,
        "Member must have length greater than or equal to " + std::to_string(shape.min));
  }
}

bool ShapeChecker::ReportEmpty(std::string_view member, const Shape& shape) {
  const std::string path = PathText(member);
  if (std::find(empty_lists_.begin(), empty_lists_.end(), path) == empty_lists_.end()) {
    return false;
  }
  // As ReportSize words any other size; an empty value is shown exactly.
  Add(member, shape.type == ShapeType::kMap ? "'{}'" : "'[]'",
      "Member must have length greater than or equal to " + std::to_string(shape.min));
  return true;
}

void ShapeChecker::StringList(const google::protobuf::RepeatedPtrField<std::string>& list,
                              const Shape& shape, const Shape& element) {
  const int size = list.size();
  if ((shape.has_max && size > shape.max) || (shape.has_min && size < shape.min)) {
    std::string joined = "[";
    for (int i = 0; i < size; ++i) {
      if (i > 0) joined += ", ";
      joined += list.Get(i);
    }
    joined += ']';
    ReportSize(size, shape, QuoteValue(joined));
  }
  for (int i = 0; i < size; ++i) {
    const std::string& value = list.Get(i);
    if (StringOk(value, element)) continue;
    EnterElement(i + 1);
    ReportString(value, element, {});
    Leave();
  }
}

void ShapeChecker::StringMap(const google::protobuf::Map<std::string, std::string>& map,
                             const Shape& shape, const Shape& key, const Shape& value) {
  const int size = static_cast<int>(map.size());
  if ((shape.has_max && size > shape.max) || (shape.has_min && size < shape.min)) {
    ReportSize(size, shape, "'{" + std::to_string(size) + " entries}'");
  }
  for (const auto& [k, v] : map) {
    if (!StringOk(k, key) || !StringOk(v, value)) {
      ReportMap(map, key, value);  // in key order, as the service reports them
      return;
    }
  }
}

void ShapeChecker::ReportMap(const google::protobuf::Map<std::string, std::string>& map,
                             const Shape& key, const Shape& value) {
  std::vector<const google::protobuf::Map<std::string, std::string>::value_type*> entries;
  entries.reserve(map.size());
  for (const auto& entry : map) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  std::vector<std::string> violations;
  for (const auto* entry : entries) {
    violations.clear();
    StringViolations(entry->first, key, violations);
    if (!violations.empty()) {
      std::string constraint = "Map keys must satisfy constraint: [";
      for (size_t i = 0; i < violations.size(); ++i) {
        if (i > 0) constraint += ", ";
        constraint += violations[i];
      }
      constraint += ']';
      Add({}, QuoteValue(entry->first), constraint);
    }
    if (!StringOk(entry->second, value)) {
      Enter(entry->first);
      ReportString(entry->second, value, {});
      Leave();
    }
  }
}

}  // namespace kiln::internal
