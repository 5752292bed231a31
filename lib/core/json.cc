#include "kiln/json.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "core/internal/error_list.h"
#include "core/internal/shapes.h"
#include "fmt/format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "kiln/plugin/files.h"
#include "kiln/plugin/json_value.h"
#include "kiln/validation.h"

namespace kiln {
namespace {

namespace pb = google::protobuf;
using FieldDescriptor = pb::FieldDescriptor;

constexpr std::string_view kTimestampType = "google.protobuf.Timestamp";
// google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to
// 9999-12-31T23:59:59.999999999Z.
constexpr int64_t kMinTimestampSeconds = -62'135'596'800;
constexpr int64_t kMaxTimestampSeconds = 253'402'300'799;
constexpr int64_t kNanosPerSecond = 1'000'000'000;
constexpr std::string_view kTimestampRange =
    "out of range for a timestamp (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z)";

bool IsTimestamp(const pb::Descriptor* descriptor) {
  return descriptor->full_name() == kTimestampType;
}

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// ---------------------------------------------------------------------------
// Timestamps as decimal numbers, exactly.

// Converts a JSON number lexeme of seconds to (seconds, nanos) without going
// through a double. Returns false with `*reason` set when the value has more
// than 9 fraction digits or lies outside Timestamp's range.
bool TimestampFromLexeme(std::string_view lexeme, int64_t& seconds, int32_t& nanos,
                         std::string& reason) {
  const JsonNumberParts parts = SplitJsonNumber(lexeme);
  std::string digits = absl::StrCat(AbslView(parts.integer), AbslView(parts.fraction));
  int64_t exponent = parts.exponent - static_cast<int64_t>(parts.fraction.size());
  const size_t lead = digits.find_first_not_of('0');
  if (lead == std::string::npos) {
    seconds = 0;
    nanos = 0;
    return true;
  }
  digits.erase(0, lead);
  while (digits.back() == '0') {
    digits.pop_back();
    ++exponent;
  }
  if (exponent < -9) {
    reason = "timestamps take at most 9 fraction digits";
    return false;
  }
  const int64_t integer_digits = static_cast<int64_t>(digits.size()) + exponent;
  if (integer_digits > 12) {
    reason = kTimestampRange;
    return false;
  }
  std::string whole;
  std::string fraction;
  if (exponent >= 0) {
    whole = digits + std::string(static_cast<size_t>(exponent), '0');
  } else if (integer_digits > 0) {
    whole = digits.substr(0, static_cast<size_t>(integer_digits));
    fraction = digits.substr(static_cast<size_t>(integer_digits));
  } else {
    whole = "0";
    fraction = std::string(static_cast<size_t>(-integer_digits), '0') + digits;
  }
  fraction.resize(9, '0');
  int64_t s = 0;
  int64_t n = 0;
  std::from_chars(whole.data(), whole.data() + whole.size(), s);  // <= 12 digits: fits
  std::from_chars(fraction.data(), fraction.data() + fraction.size(), n);
  if (parts.negative) {
    s = -s;
    if (n > 0) {
      s -= 1;
      n = kNanosPerSecond - n;
    }
  }
  if (s < kMinTimestampSeconds || s > kMaxTimestampSeconds) {
    reason = kTimestampRange;
    return false;
  }
  seconds = s;
  nanos = static_cast<int32_t>(n);
  return true;
}

// How a character of a timestamp string that breaks the grammar is named:
// 'x', a space, or by code point (the message must stay on one line).
std::string DescribeFound(std::string_view text, size_t pos) {
  if (pos >= text.size()) return "the end of the string";
  const unsigned char c = static_cast<unsigned char>(text[pos]);
  if (c == ' ') return "a space";
  if (c > 0x20 && c < 0x7F) return absl::StrCat("'", AbslView(text.substr(pos, 1)), "'");
  if (c < 0x80) return fmt::format("character U+{:04X}", c);
  // Not ASCII: the code point of the UTF-8 sequence (JSON strings are valid).
  const size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || pos + n > text.size()) return fmt::format("byte 0x{:02X}", c);
  uint32_t cp = c & (0x7Fu >> n);
  for (size_t k = 1; k < n; ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3Fu);
  }
  return fmt::format("character U+{:04X}", cp);
}

// What TimestampFromRfc3339 made of a string.
enum class TextTimestamp {
  kOk,
  kNotRfc3339,  // breaks RFC 3339's grammar: not a timestamp-string at all
  kBadValue,    // a date-time Kiln cannot hold: too precise or out of range
};

// Parses an RFC 3339 date-time (section 5.6), the whole string and nothing
// else:
//   date-time = full-date "T" full-time
//   full-date = 4DIGIT "-" 2DIGIT "-" 2DIGIT          ; 01-12, 01-28..31
//   full-time = 2DIGIT ":" 2DIGIT ":" 2DIGIT ["." 1*DIGIT] time-offset
//                                                     ; 00-23, 00-59, 00-60
//   time-offset = "Z" / ("+" / "-") 2DIGIT ":" 2DIGIT  ; 00-23, 00-59
// "T" and "Z" may be lower case (5.6, NOTE). No whitespace anywhere, no one-
// digit fields, no other offset forms (+02, +0200): absl::ParseTime, used
// before, took all of those. A leap second (:60) is the next minute's :00.
// Returns kNotRfc3339 or kBadValue with `reason` set on failure.
TextTimestamp TimestampFromRfc3339(std::string_view text, int64_t& seconds, int32_t& nanos,
                                   std::string& reason) {
  size_t pos = 0;
  const auto fail = [&](std::string_view what) {
    reason = absl::StrCat(AbslView(what), " at character ", pos + 1, ", found ",
                          DescribeFound(text, pos));
    return TextTimestamp::kNotRfc3339;
  };
  const auto digit_at = [&](size_t i) {
    return i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]));
  };
  // Reads exactly `n` digits; on failure `pos` is at the first non-digit.
  const auto number = [&](size_t n, int& out) {
    out = 0;
    for (size_t k = 0; k < n; ++k, ++pos) {
      if (!digit_at(pos)) return false;
      out = out * 10 + (text[pos] - '0');
    }
    return true;
  };
  const auto literal = [&](char lower, char upper = 0) {
    if (pos < text.size() && (text[pos] == lower || (upper != 0 && text[pos] == upper))) {
      ++pos;
      return true;
    }
    return false;
  };
  // A field read whole but outside its range.
  const auto out_of_range = [&](size_t start, std::string_view what) {
    pos = start;
    reason = absl::StrCat(AbslView(what), " at character ", start + 1);
    return TextTimestamp::kNotRfc3339;
  };

  int year, month, day, hour, minute, second;
  size_t start = pos;
  if (!number(4, year)) return fail("expected a 4-digit year");
  if (!literal('-')) return fail("expected '-' after the year");
  start = pos;
  if (!number(2, month)) return fail("expected a 2-digit month");
  if (month < 1 || month > 12) return out_of_range(start, "month must be 01-12");
  if (!literal('-')) return fail("expected '-' after the month");
  start = pos;
  if (!number(2, day)) return fail("expected a 2-digit day");
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const int month_days = month == 2 && leap ? 29 : kDays[month - 1];
  if (day < 1 || day > month_days) {
    return out_of_range(start, fmt::format("day must be 01-{} in {:04d}-{:02d}", month_days,
                                           year, month));
  }
  if (!literal('T', 't')) return fail("expected 'T' between the date and the time");
  start = pos;
  if (!number(2, hour)) return fail("expected a 2-digit hour");
  if (hour > 23) return out_of_range(start, "hour must be 00-23");
  if (!literal(':')) return fail("expected ':' after the hour");
  start = pos;
  if (!number(2, minute)) return fail("expected 2-digit minutes");
  if (minute > 59) return out_of_range(start, "minutes must be 00-59");
  if (!literal(':')) return fail("expected ':' after the minutes");
  start = pos;
  if (!number(2, second)) return fail("expected 2-digit seconds");
  if (second > 60) return out_of_range(start, "seconds must be 00-60");
  int64_t fraction_nanos = 0;
  if (literal('.')) {
    const size_t first = pos;
    while (digit_at(pos)) ++pos;
    if (pos == first) return fail("expected a digit after '.'");
    const std::string_view digits = text.substr(first, pos - first);
    // As for numbers: nanoseconds are all a Timestamp holds, and a value is
    // refused rather than silently cut (trailing zeros lose nothing).
    if (digits.size() > 9 && digits.find_first_not_of('0', 9) != std::string_view::npos) {
      reason = "timestamps take at most 9 fraction digits";
      return TextTimestamp::kBadValue;
    }
    for (size_t k = 0; k < 9; ++k) {
      fraction_nanos = fraction_nanos * 10 + (k < digits.size() ? digits[k] - '0' : 0);
    }
  }
  int offset_minutes = 0;
  if (!literal('Z', 'z')) {
    const bool negative = pos < text.size() && text[pos] == '-';
    if (!literal('+') && !literal('-')) {
      return fail("expected the offset: 'Z', or '+' or '-' and hh:mm");
    }
    int offset_hour, offset_minute;
    start = pos;
    if (!number(2, offset_hour)) return fail("expected a 2-digit offset hour");
    if (offset_hour > 23) return out_of_range(start, "offset hour must be 00-23");
    if (!literal(':')) return fail("expected ':' in the offset");
    start = pos;
    if (!number(2, offset_minute)) return fail("expected 2-digit offset minutes");
    if (offset_minute > 59) return out_of_range(start, "offset minutes must be 00-59");
    offset_minutes = (negative ? -1 : 1) * (offset_hour * 60 + offset_minute);
  }
  if (pos != text.size()) return fail("unexpected text after the offset");

  // CivilSecond carries second 60 into the next minute.
  const absl::CivilSecond civil(year, month, day, hour, minute, second);
  const int64_t s = absl::ToUnixSeconds(absl::FromCivil(civil, absl::UTCTimeZone())) -
                    int64_t{offset_minutes} * 60;
  if (s < kMinTimestampSeconds || s > kMaxTimestampSeconds) {
    reason = kTimestampRange;
    return TextTimestamp::kBadValue;
  }
  seconds = s;
  nanos = static_cast<int32_t>(fraction_nanos);
  return TextTimestamp::kOk;
}

// Seconds since the epoch as a decimal number, fraction trimmed of trailing
// zeros: 1795253152.163, -0.5, 1795253152. Accepts unnormalized input.
std::string FormatTimestamp(int64_t seconds, int64_t nanos) {
  int64_t carry = nanos / kNanosPerSecond;
  nanos %= kNanosPerSecond;
  if (nanos < 0) {
    nanos += kNanosPerSecond;
    carry -= 1;
  }
  if (__builtin_add_overflow(seconds, carry, &seconds)) {
    seconds = carry > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
    nanos = 0;
  }
  if (nanos == 0) return absl::StrCat(seconds);
  const bool negative = seconds < 0;
  // For negative values the magnitude is (-seconds - 1) + (1e9 - nanos)/1e9.
  const uint64_t whole = negative ? static_cast<uint64_t>(-(seconds + 1)) : static_cast<uint64_t>(seconds);
  const int64_t fraction_nanos = negative ? kNanosPerSecond - nanos : nanos;
  std::string fraction = fmt::format("{:09d}", fraction_nanos);
  while (fraction.back() == '0') fraction.pop_back();
  return absl::StrCat(negative ? "-" : "", whole, ".", fraction);
}

// ---------------------------------------------------------------------------
// Reading.

class Decoder {
 public:
  // The problems found, one line each (the first kMaxReportedViolations
  // kept, all counted).
  internal::ErrorList<std::string>& errors() { return errors_; }

  // The list and map members with a minimum size (internal::MinSize) that
  // the document holds empty ([] or {}), by their paths in the service's form
  // (ShapeChecker's: `algorithmSpecification.containerEntrypoint`,
  // `inputDataConfig.2.member.x`), in document order.
  std::vector<std::string>& empty_lists() { return empty_lists_; }

  void DecodeMessage(const JsonValue& json, pb::Message& message, const std::string& path) {
    const pb::Descriptor* descriptor = message.GetDescriptor();
    if (IsTimestamp(descriptor)) {
      DecodeTimestamp(json, message, path);
      return;
    }
    if (!json.is_object()) {
      TypeError(path, json, "object");
      return;
    }
    // botocore's order: first every unknown member, then the known ones.
    std::vector<std::pair<const JsonValue*, const FieldDescriptor*>> known;
    for (const auto& [key, value] : json.members()) {
      const FieldDescriptor* field = FindField(descriptor, key);
      if (field == nullptr) {
        UnknownError(path, key, descriptor);
      } else {
        known.emplace_back(&value, field);
      }
    }
    const pb::Reflection* reflection = message.GetReflection();
    for (const auto& [value, field] : known) {
      if (value->is_null()) continue;  // null means absent
      const std::string field_path =
          path.empty() ? field->json_name() : absl::StrCat(path, ".", field->json_name());
      if (const pb::OneofDescriptor* oneof = field->real_containing_oneof();
          oneof != nullptr && reflection->HasOneof(message, oneof)) {
        std::vector<std::string> names;
        for (int i = 0; i < oneof->field_count(); ++i) names.push_back(oneof->field(i)->json_name());
        errors_.Add(absl::StrCat(
            "Invalid number of parameters set for tagged union structure ", Name(path),
            ". Can only set one of the following keys: ", absl::StrJoin(names, ", "), "."));
        continue;
      }
      steps_.push_back(Step{field->json_name(), true, 0});
      DecodeField(*value, message, field, field_path);
      steps_.pop_back();
    }
  }

 private:
  static const FieldDescriptor* FindField(const pb::Descriptor* descriptor, std::string_view json_name) {
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const FieldDescriptor* field = descriptor->field(i);
      if (field->json_name() == json_name) return field;
    }
    return nullptr;
  }

  static std::string Name(const std::string& path) { return path.empty() ? "input" : path; }

  // One step of the path to the value being decoded, for the service's form
  // of it (botocore's, in `path` arguments, is built as the decoder goes).
  struct Step {
    std::string_view name;  // a member's json_name or a map key
    bool member;            // name is a member's json_name (written camelCase)
    size_t element;         // > 0: the 1-based element of a list (name unused)
  };

  // The path in the form of ShapeChecker::PathText.
  std::string ServicePath() const {
    std::string out;
    for (const Step& step : steps_) {
      if (step.element > 0) {
        absl::StrAppend(&out, ".", step.element, ".member");
        continue;
      }
      if (!out.empty()) out += '.';
      if (step.member && !step.name.empty()) {
        out += absl::ascii_tolower(step.name[0]);
        out.append(step.name.substr(1));
      } else {
        out.append(step.name);
      }
    }
    return out;
  }

  // `field` (entered) holds no element in the document.
  void NoteEmpty(const FieldDescriptor* field) {
    if (internal::MinSize(*field) > 0) empty_lists_.push_back(ServicePath());
  }

  // Input as messages show it: JSON, escaped so it cannot break the line,
  // cut after kMaxJsonInMessage bytes.
  static std::string Quote(const JsonValue& json) { return JsonForMessage(json); }
  static std::string Quote(const std::string& text) { return Quote(JsonValue::String(text)); }

  // A map key as a step of a path in messages: as it is when that is safe
  // (botocore's form, HyperParameters.epochs), else quoted like a value
  // (HyperParameters."a\nb"), so no key can break the message's line.
  static std::string PathKey(const std::string& key) { return PathKeyForMessage(key); }

  // The JSON type of a value as the messages name it; "integer" for numbers
  // without fraction or exponent.
  static std::string_view TypeName(const JsonValue& json) {
    if (json.IsIntegerLexeme()) return "integer";
    return JsonKindName(json.kind());
  }

  void TypeError(const std::string& path, const JsonValue& json, std::string_view valid_types) {
    errors_.Add(absl::StrCat("Invalid type for parameter ", Name(path), ", value: ", Quote(json),
                             ", type: ", AbslView(TypeName(json)), ", valid types: ", AbslView(valid_types)));
  }

  void ValueError(const std::string& path, const JsonValue& json, std::string_view reason) {
    errors_.Add(absl::StrCat("Invalid value for parameter ", Name(path), ", value: ", Quote(json),
                             ", ", AbslView(reason)));
  }

  void UnknownError(const std::string& path, const std::string& key, const pb::Descriptor* descriptor) {
    std::vector<std::string> names;
    for (int i = 0; i < descriptor->field_count(); ++i) names.push_back(descriptor->field(i)->json_name());
    errors_.Add(absl::StrCat("Unknown parameter in ", Name(path), ": ", Quote(key),
                             ", must be one of: ", absl::StrJoin(names, ", ")));
  }

  void DecodeTimestamp(const JsonValue& json, pb::Message& message, const std::string& path) {
    int64_t seconds = 0;
    int32_t nanos = 0;
    if (json.is_number()) {
      std::string reason;
      if (!TimestampFromLexeme(json.number_lexeme(), seconds, nanos, reason)) {
        ValueError(path, json, reason);
        return;
      }
    } else if (json.is_string()) {
      std::string reason;
      switch (TimestampFromRfc3339(json.string_value(), seconds, nanos, reason)) {
        case TextTimestamp::kOk:
          break;
        case TextTimestamp::kNotRfc3339:
          // botocore's words for a string that is no timestamp, and the rule.
          TypeError(path, json,
                    absl::StrCat("number, timestamp-string (RFC 3339 date-time: ", reason, ")"));
          return;
        case TextTimestamp::kBadValue:
          ValueError(path, json, reason);
          return;
      }
    } else {
      TypeError(path, json, "number, timestamp-string");
      return;
    }
    const pb::Descriptor* descriptor = message.GetDescriptor();
    const pb::Reflection* reflection = message.GetReflection();
    reflection->SetInt64(&message, descriptor->FindFieldByNumber(1), seconds);
    reflection->SetInt32(&message, descriptor->FindFieldByNumber(2), nanos);
  }

  void DecodeField(const JsonValue& json, pb::Message& message, const FieldDescriptor* field,
                   const std::string& path) {
    if (field->is_map()) {
      DecodeMap(json, message, field, path);
    } else if (field->is_repeated()) {
      if (!json.is_array()) {
        TypeError(path, json, "array");
        return;
      }
      if (json.elements().empty()) NoteEmpty(field);
      for (size_t i = 0; i < json.elements().size(); ++i) {
        steps_.push_back(Step{{}, false, i + 1});
        DecodeValue(json.elements()[i], message, field, absl::StrCat(path, "[", i, "]"));
        steps_.pop_back();
      }
    } else {
      DecodeValue(json, message, field, path);
    }
  }

  void DecodeMap(const JsonValue& json, pb::Message& message, const FieldDescriptor* field,
                 const std::string& path) {
    if (!json.is_object()) {
      TypeError(path, json, "object");
      return;
    }
    const pb::Descriptor* entry_type = field->message_type();
    const FieldDescriptor* key_field = entry_type->map_key();
    const FieldDescriptor* value_field = entry_type->map_value();
    if (json.members().empty()) NoteEmpty(field);
    for (const auto& [key, value] : json.members()) {
      pb::Message* entry = message.GetReflection()->AddMessage(&message, field);
      if (!SetMapKey(key, *entry, key_field)) {
        errors_.Add(absl::StrCat("Invalid type for parameter ", path,
                                 " (key: ", PathKey(key), "), valid types: ",
                                 AbslView(KeyTypeName(key_field))));
        continue;
      }
      steps_.push_back(Step{key, false, 0});
      DecodeValue(value, *entry, value_field, absl::StrCat(path, ".", PathKey(key)));
      steps_.pop_back();
    }
  }

  static std::string_view KeyTypeName(const FieldDescriptor* key_field) {
    switch (key_field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL: return "boolean";
      case FieldDescriptor::CPPTYPE_STRING: return "string";
      default: return "integer";
    }
  }

  // Map keys are JSON strings; integral and bool keys are read from them.
  static bool SetMapKey(const std::string& key, pb::Message& entry, const FieldDescriptor* key_field) {
    const pb::Reflection* r = entry.GetReflection();
    const char* begin = key.data();
    const char* end = key.data() + key.size();
    const auto parse = [&](auto& out) {
      const auto [ptr, ec] = std::from_chars(begin, end, out);
      return !key.empty() && ec == std::errc() && ptr == end;
    };
    switch (key_field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        r->SetString(&entry, key_field, key);
        return true;
      case FieldDescriptor::CPPTYPE_BOOL:
        if (key != "true" && key != "false") return false;
        r->SetBool(&entry, key_field, key == "true");
        return true;
      case FieldDescriptor::CPPTYPE_INT32: {
        int32_t v;
        if (!parse(v)) return false;
        r->SetInt32(&entry, key_field, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t v;
        if (!parse(v)) return false;
        r->SetInt64(&entry, key_field, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        uint32_t v;
        if (!parse(v)) return false;
        r->SetUInt32(&entry, key_field, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v;
        if (!parse(v)) return false;
        r->SetUInt64(&entry, key_field, v);
        return true;
      }
      default:
        return false;
    }
  }

  // Reads an integer of type T; reports and returns false when `json` is not
  // an integer or out of T's range.
  template <typename T>
  bool ReadInteger(const JsonValue& json, const std::string& path, T& out) {
    if (!json.IsIntegerLexeme()) {
      TypeError(path, json, "integer");
      return false;
    }
    const std::string& lexeme = json.number_lexeme();
    const auto [ptr, ec] = std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), out);
    if (ec != std::errc() || ptr != lexeme.data() + lexeme.size()) {
      ValueError(path, json,
                 absl::StrCat("valid range: ", std::numeric_limits<T>::min(), " to ",
                              std::numeric_limits<T>::max()));
      return false;
    }
    return true;
  }

  // The strings the service's JSON protocol uses for non-finite values.
  static bool NonFinite(const std::string& s, double& out) {
    if (s == "NaN") {
      out = std::numeric_limits<double>::quiet_NaN();
    } else if (s == "Infinity") {
      out = std::numeric_limits<double>::infinity();
    } else if (s == "-Infinity") {
      out = -std::numeric_limits<double>::infinity();
    } else {
      return false;
    }
    return true;
  }

  // Reads a double: any JSON number, or the strings the service's JSON
  // protocol uses for non-finite values.
  bool ReadDouble(const JsonValue& json, const std::string& path, double& out) {
    if (json.is_string()) {
      if (NonFinite(json.string_value(), out)) return true;
      TypeError(path, json, "number");
      return false;
    }
    if (!json.is_number()) {
      TypeError(path, json, "number");
      return false;
    }
    absl::StatusOr<double> value = json.AsDouble();
    if (!value.ok()) {
      ValueError(path, json, "out of range for a double");
      return false;
    }
    out = *value;
    return true;
  }

  // Reads a float (the model's "float", 32 bits): a JSON number rounded once,
  // straight from its text, to the nearest float (so 3.4028235e38, which is
  // how FLT_MAX is written, reads back as FLT_MAX), or a non-finite string.
  // A number beyond the float range is refused rather than made infinite;
  // one too small for a float becomes a subnormal or 0, as for doubles.
  bool ReadFloat(const JsonValue& json, const std::string& path, float& out) {
    if (json.is_string()) {
      double v;
      if (!NonFinite(json.string_value(), v)) {
        TypeError(path, json, "number");
        return false;
      }
      out = static_cast<float>(v);
      return true;
    }
    if (!json.is_number()) {
      TypeError(path, json, "number");
      return false;
    }
    const std::string& lexeme = json.number_lexeme();
    const char* end = lexeme.data() + lexeme.size();
    const auto [ptr, ec] = std::from_chars(lexeme.data(), end, out);
    if (ec == std::errc() && ptr == end) return true;
    // from_chars reports overflow and underflow alike and leaves `out` as it
    // was. Below 1 in magnitude it was underflow: round the double (at worst
    // one subnormal step off where the double lands on a float midpoint).
    if (const absl::StatusOr<double> v = json.AsDouble(); v.ok() && std::fabs(*v) < 1) {
      out = static_cast<float>(*v);
      return true;
    }
    constexpr float kMax = std::numeric_limits<float>::max();
    ValueError(path, json, fmt::format("out of range for a float ({} to {})", -kMax, kMax));
    return false;
  }

  // Decodes one value (a singular field, one element of a repeated field, or
  // a map entry's value) into `message`.
  void DecodeValue(const JsonValue& json, pb::Message& message, const FieldDescriptor* field,
                   const std::string& path) {
    const pb::Reflection* r = message.GetReflection();
    const bool repeated = field->is_repeated();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        pb::Message* child = repeated ? r->AddMessage(&message, field) : r->MutableMessage(&message, field);
        DecodeMessage(json, *child, path);
        return;
      }
      case FieldDescriptor::CPPTYPE_INT32: {
        int32_t v;
        if (!ReadInteger(json, path, v)) return;
        repeated ? r->AddInt32(&message, field, v) : r->SetInt32(&message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t v;
        if (!ReadInteger(json, path, v)) return;
        repeated ? r->AddInt64(&message, field, v) : r->SetInt64(&message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        uint32_t v;
        if (!ReadInteger(json, path, v)) return;
        repeated ? r->AddUInt32(&message, field, v) : r->SetUInt32(&message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v;
        if (!ReadInteger(json, path, v)) return;
        repeated ? r->AddUInt64(&message, field, v) : r->SetUInt64(&message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE: {
        double v;
        if (!ReadDouble(json, path, v)) return;
        repeated ? r->AddDouble(&message, field, v) : r->SetDouble(&message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_FLOAT: {
        float v;
        if (!ReadFloat(json, path, v)) return;
        repeated ? r->AddFloat(&message, field, v) : r->SetFloat(&message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        if (!json.is_bool()) {
          TypeError(path, json, "boolean");
          return;
        }
        const bool v = json.bool_value();
        repeated ? r->AddBool(&message, field, v) : r->SetBool(&message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        if (!json.is_string()) {
          TypeError(path, json, "string");
          return;
        }
        std::string v = json.string_value();
        if (field->type() == FieldDescriptor::TYPE_BYTES) {
          std::string decoded;
          if (!absl::Base64Unescape(v, &decoded)) {
            ValueError(path, json, "not valid base64");
            return;
          }
          v = std::move(decoded);
        }
        repeated ? r->AddString(&message, field, std::move(v)) : r->SetString(&message, field, std::move(v));
        return;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        if (!json.is_string()) {
          TypeError(path, json, "string");
          return;
        }
        const pb::EnumValueDescriptor* value = field->enum_type()->FindValueByName(json.string_value());
        if (value == nullptr) {
          std::vector<std::string> names;
          for (int i = 0; i < field->enum_type()->value_count(); ++i) {
            names.push_back(field->enum_type()->value(i)->name());
          }
          ValueError(path, json, absl::StrCat("valid values: ", absl::StrJoin(names, ", ")));
          return;
        }
        repeated ? r->AddEnum(&message, field, value) : r->SetEnum(&message, field, value);
        return;
      }
    }
  }

  internal::ErrorList<std::string> errors_;
  std::vector<Step> steps_;
  std::vector<std::string> empty_lists_;
};

// ---------------------------------------------------------------------------
// Writing.

JsonValue EncodeDouble(double v) {
  if (std::isnan(v)) return JsonValue::String("NaN");
  if (std::isinf(v)) return JsonValue::String(v > 0 ? "Infinity" : "-Infinity");
  return JsonValue::Double(v);
}

JsonValue EncodeMessage(const pb::Message& message);

// One value of `field`: the singular value when index < 0, else element `index`.
JsonValue EncodeValue(const pb::Message& message, const FieldDescriptor* field, int index) {
  const pb::Reflection* r = message.GetReflection();
  const bool one = index < 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return EncodeMessage(one ? r->GetMessage(message, field) : r->GetRepeatedMessage(message, field, index));
    case FieldDescriptor::CPPTYPE_INT32:
      return JsonValue::Int(one ? r->GetInt32(message, field) : r->GetRepeatedInt32(message, field, index));
    case FieldDescriptor::CPPTYPE_INT64:
      return JsonValue::Int(one ? r->GetInt64(message, field) : r->GetRepeatedInt64(message, field, index));
    case FieldDescriptor::CPPTYPE_UINT32:
      return JsonValue::Uint(one ? r->GetUInt32(message, field) : r->GetRepeatedUInt32(message, field, index));
    case FieldDescriptor::CPPTYPE_UINT64:
      return JsonValue::Uint(one ? r->GetUInt64(message, field) : r->GetRepeatedUInt64(message, field, index));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return EncodeDouble(one ? r->GetDouble(message, field) : r->GetRepeatedDouble(message, field, index));
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const float v = one ? r->GetFloat(message, field) : r->GetRepeatedFloat(message, field, index);
      if (!std::isfinite(v)) return EncodeDouble(v);
      // Shortest text that reads back as the same float (0.1, not 0.100000001).
      return *JsonValue::Number(fmt::format("{}", v));
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      return JsonValue::Bool(one ? r->GetBool(message, field) : r->GetRepeatedBool(message, field, index));
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string v = one ? r->GetString(message, field) : r->GetRepeatedString(message, field, index);
      if (field->type() == FieldDescriptor::TYPE_BYTES) v = absl::Base64Escape(v);
      return JsonValue::String(std::move(v));
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number = one ? r->GetEnumValue(message, field) : r->GetRepeatedEnumValue(message, field, index);
      const pb::EnumValueDescriptor* value = field->enum_type()->FindValueByNumber(number);
      if (value == nullptr) return JsonValue::Int(number);  // open enum, unknown number
      return JsonValue::String(value->name());
    }
  }
  return JsonValue();
}

JsonValue EncodeMap(const pb::Message& message, const FieldDescriptor* field) {
  const pb::Reflection* r = message.GetReflection();
  const FieldDescriptor* key_field = field->message_type()->map_key();
  const FieldDescriptor* value_field = field->message_type()->map_value();
  std::vector<const pb::Message*> entries;
  const int n = r->FieldSize(message, field);
  for (int i = 0; i < n; ++i) entries.push_back(&r->GetRepeatedMessage(message, field, i));
  const auto less = [&](const pb::Message* a, const pb::Message* b) {
    const pb::Reflection* ra = a->GetReflection();
    const pb::Reflection* rb = b->GetReflection();
    switch (key_field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        return ra->GetString(*a, key_field) < rb->GetString(*b, key_field);
      case FieldDescriptor::CPPTYPE_INT32:
        return ra->GetInt32(*a, key_field) < rb->GetInt32(*b, key_field);
      case FieldDescriptor::CPPTYPE_INT64:
        return ra->GetInt64(*a, key_field) < rb->GetInt64(*b, key_field);
      case FieldDescriptor::CPPTYPE_UINT32:
        return ra->GetUInt32(*a, key_field) < rb->GetUInt32(*b, key_field);
      case FieldDescriptor::CPPTYPE_UINT64:
        return ra->GetUInt64(*a, key_field) < rb->GetUInt64(*b, key_field);
      case FieldDescriptor::CPPTYPE_BOOL:
        return ra->GetBool(*a, key_field) < rb->GetBool(*b, key_field);
      default:
        return false;
    }
  };
  std::sort(entries.begin(), entries.end(), less);
  JsonValue object = JsonValue::Object();
  for (const pb::Message* entry : entries) {
    const JsonValue key = EncodeValue(*entry, key_field, -1);
    std::string key_text;
    if (key.is_string()) {
      key_text = key.string_value();
    } else if (key.is_bool()) {
      key_text = key.bool_value() ? "true" : "false";
    } else {
      key_text = key.number_lexeme();
    }
    // Keys are unique in a map, so append without Set's search.
    object.mutable_members().emplace_back(std::move(key_text), EncodeValue(*entry, value_field, -1));
  }
  return object;
}

JsonValue EncodeMessage(const pb::Message& message) {
  const pb::Descriptor* descriptor = message.GetDescriptor();
  const pb::Reflection* r = message.GetReflection();
  if (IsTimestamp(descriptor)) {
    const int64_t seconds = r->GetInt64(message, descriptor->FindFieldByNumber(1));
    const int32_t nanos = r->GetInt32(message, descriptor->FindFieldByNumber(2));
    return *JsonValue::Number(FormatTimestamp(seconds, nanos));
  }
  JsonValue object = JsonValue::Object();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    JsonValue value;
    if (field->is_map()) {
      if (r->FieldSize(message, field) == 0 && !internal::WrittenWhenEmpty(*field)) continue;
      value = EncodeMap(message, field);
    } else if (field->is_repeated()) {
      const int n = r->FieldSize(message, field);
      if (n == 0 && !internal::WrittenWhenEmpty(*field)) continue;
      value = JsonValue::Array();
      for (int k = 0; k < n; ++k) value.Push(EncodeValue(message, field, k));
    } else {
      // Fields with presence: set or not. Proto3 fields without presence:
      // HasField is true when the value is not the default.
      if (!r->HasField(message, field)) continue;
      value = EncodeValue(message, field, -1);
    }
    object.mutable_members().emplace_back(field->json_name(), std::move(value));
  }
  return object;
}

}  // namespace

absl::Status ParseJson(std::string_view json, pb::Message& message) {
  message.Clear();
  absl::StatusOr<JsonValue> document = ParseJsonValue(json);
  if (!document.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Invalid JSON: ", document.status().message()));
  }
  Decoder decoder;
  decoder.DecodeMessage(*document, message, "");
  if (!decoder.errors().empty()) {
    message.Clear();
    std::string text = absl::StrCat("Parameter validation failed:\n",
                                    absl::StrJoin(decoder.errors().kept(), "\n"));
    if (decoder.errors().more() > 0) {
      absl::StrAppend(&text, "\n... and ", decoder.errors().more(), " more");
    }
    return absl::InvalidArgumentError(text);
  }
  if (!decoder.empty_lists().empty()) {
    // The document holds [] (or {}) where the model requires at least one
    // element. The message cannot say so: an empty repeated field is absent,
    // which the model may allow, so the validators would pass it or call it
    // null. Only here is the difference known, so it is reported here, as
    // ValidateRequest words it and with the request's other violations (the
    // service's complete answer), by a checker told which lists were empty.
    internal::ShapeChecker checker{ValidationOptions{}};
    checker.SetEmptyLists(std::move(decoder.empty_lists()));
    const internal::ErrorList<ValidationError> errors = internal::ValidateWith(checker, message);
    message.Clear();
    // The checks visit every member MinSize names (both are generated from
    // the model), so each empty list was reported.
    assert(!errors.empty());
    if (errors.empty()) return absl::InternalError("kiln: an empty list went unreported");
    return absl::InvalidArgumentError(internal::FormatViolations(errors));
  }
  return absl::OkStatus();
}

std::string ToJson(const pb::Message& message, const JsonPrintOptions& options) {
  return WriteJson(EncodeMessage(message), options.indent);
}

// The public default (kiln/json.h) is the bound the library's messages use.
static_assert(kMaxJsonInMessage == 200);

absl::StatusOr<std::string> ReadRequestFile(const std::string& path) {
  return ReadUserFile(path, kMaxRequestFileBytes, "a request file");
}

std::string InputForMessage(std::string_view text, size_t max_bytes) {
  return TextForMessage(text, max_bytes);
}

}  // namespace kiln
