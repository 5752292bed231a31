// A small JSON document model with a strict RFC 8259 parser and a writer.
//
// Kiln reads and writes JSON in several places (scenario files, manifests,
// the container's resourceconfig.json, the service model's shapes, and the
// wire JSON of the API messages in kiln/json.h). All of them go through this
// one parser so they accept and reject the same texts with the same messages.
//
//   KILN_ASSIGN_OR_RETURN(JsonValue doc, ParseJsonValue(text));
//   if (const JsonValue* hosts = doc.Find("hosts"); hosts && hosts->is_array()) ...
//
//   JsonValue config = JsonValue::Object();
//   config.Set("current_host", JsonValue::String("algo-1"))
//         .Set("hosts", JsonValue::Array().Push(JsonValue::String("algo-1")));
//   std::string text = WriteJson(config, /*indent=*/true);
//
// Numbers keep the exact text they were parsed from (their lexeme), so an
// int64 beyond 2^53 or a timestamp with nine fraction digits survives a
// round trip unchanged; AsInt64() and AsDouble() convert on demand. Objects
// keep their members in document order; the parser rejects duplicate keys.
//
// Part of the plugin kit (docs/plugins.md). A JsonValue is a plain value type:
// thread-compatible.
#ifndef KILN_PLUGIN_JSON_VALUE_H_
#define KILN_PLUGIN_JSON_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

// Appends the UTF-8 encoding of the code point `cp` (at most 0x10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string& out);

// Nesting limit of ParseJsonValue: arrays and objects nested deeper than this
// are rejected, so hostile input cannot exhaust the stack.
inline constexpr int kMaxJsonDepth = 256;

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  // A null value.
  JsonValue() = default;

  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool value);
  static JsonValue Int(int64_t value);
  static JsonValue Uint(uint64_t value);
  // The shortest text that reads back as the same double (e.g. 0.1, 1e+300).
  // JSON has no NaN or infinity: a non-finite value gives null.
  static JsonValue Double(double value);
  // A number from its text. Returns InvalidArgument when `lexeme` is not a
  // JSON number exactly (e.g. "+1", "01", "1.", ".5", "NaN", " 1").
  static absl::StatusOr<JsonValue> Number(std::string_view lexeme);
  // Strings should be UTF-8; WriteJson replaces invalid bytes with U+FFFD.
  static JsonValue String(std::string value);
  static JsonValue Array();
  static JsonValue Object();

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  // The value of a bool. REQUIRES: is_bool().
  bool bool_value() const { return bool_; }
  // The number's text exactly as parsed or built. REQUIRES: is_number().
  const std::string& number_lexeme() const { return text_; }
  // Whether the number is written without fraction or exponent ("-12", not
  // "12.0" or "1e3"). False for anything that is not a number.
  bool IsIntegerLexeme() const;
  // The number as an int64. Returns InvalidArgument when this is not a number,
  // when it has a fraction or exponent (even "1.0" or "1e2"), or when it does
  // not fit in an int64; the message names the value.
  absl::StatusOr<int64_t> AsInt64() const;
  // The number as the nearest double. Returns InvalidArgument when this is not
  // a number or its magnitude is too large for a double (e.g. 1e400).
  absl::StatusOr<double> AsDouble() const;
  // The text of a string. REQUIRES: is_string().
  const std::string& string_value() const { return text_; }

  // Elements of an array; empty for anything else.
  const std::vector<JsonValue>& elements() const { return elements_; }
  // REQUIRES: is_array().
  std::vector<JsonValue>& mutable_elements() { return elements_; }
  // Members of an object in document order; empty for anything else.
  const std::vector<Member>& members() const { return members_; }
  // REQUIRES: is_object().
  std::vector<Member>& mutable_members() { return members_; }
  // Number of elements or members; 0 for scalars.
  size_t size() const;

  // The member called `key` of an object, or nullptr when there is none or
  // this is not an object. Linear in the number of members. The pointer is
  // valid until the object is next changed.
  const JsonValue* Find(std::string_view key) const;
  JsonValue* FindMutable(std::string_view key);

  // Sets member `key` of an object: replaces the value in place when the key
  // is present, else appends it. Returns *this for chaining.
  // REQUIRES: is_object().
  JsonValue& Set(std::string key, JsonValue value);
  // Appends an element to an array. Returns *this for chaining.
  // REQUIRES: is_array().
  JsonValue& Push(JsonValue value);

  // Structural equality: same kind, numbers with the same lexeme, arrays
  // element by element, objects member by member in the same order.
  friend bool operator==(const JsonValue& a, const JsonValue& b);
  friend bool operator!=(const JsonValue& a, const JsonValue& b) { return !(a == b); }

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  std::string text_;  // number lexeme or string value
  std::vector<JsonValue> elements_;
  std::vector<Member> members_;
};

// The parts of a number lexeme -?int(.frac)?([eE][+-]?exp)?: `integer` and
// `fraction` are digit strings into the lexeme (fraction may be empty);
// `exponent` is the signed exponent, saturated at +-1'000'000'000.
// REQUIRES: `lexeme` is a valid JSON number (as number_lexeme() always is).
struct JsonNumberParts {
  bool negative = false;
  std::string_view integer;
  std::string_view fraction;
  int64_t exponent = 0;
};
JsonNumberParts SplitJsonNumber(std::string_view lexeme);

// Name of a kind as JSON calls it: "null", "boolean", "number", "string",
// "array", "object".
std::string_view JsonKindName(JsonValue::Kind kind);

// Parses one JSON text (RFC 8259), strictly: no comments, trailing commas,
// single quotes, NaN/Infinity, leading zeros or unescaped control characters;
// strings must be valid UTF-8 and \u escapes must pair surrogates correctly;
// object keys must be unique; nesting is limited to kMaxJsonDepth. Whitespace
// around the value and one leading UTF-8 byte order mark are allowed.
// Returns InvalidArgument on the first error, worded
// "line 3, column 17: expected ',' or '}' after object member" (lines and
// columns count from 1; columns count characters): the caller should show it
// to whoever wrote the text.
// Thread-safe.
absl::StatusOr<JsonValue> ParseJsonValue(std::string_view text);

// Writes `value` as JSON text: compact (no spaces) or, with `indent`, one
// member or element per line indented by two spaces. Strings escape '"', '\\'
// and control characters (\b \f \n \r \t, others as \u00XX), pass other UTF-8
// through, and replace bytes that are not valid UTF-8 with U+FFFD so the
// output is always valid JSON. No trailing newline.
// Thread-safe.
std::string WriteJson(const JsonValue& value, bool indent = false);

// Appends `text` to `out` as a quoted, escaped JSON string, as WriteJson does.
void AppendJsonString(std::string_view text, std::string& out);

// Error messages quote input (a member name, a value, a map key) through the
// two functions below, never raw: a message is often logged as one line, and
// nothing in the input may start another line or forge text after it.

// Bytes of quoted text JsonForMessage keeps at most.
inline constexpr size_t kMaxJsonInMessage = 200;

// `value` as compact JSON for an error message: strings escaped as WriteJson
// escapes them ('"', '\\', control characters), and also DEL, the C1 controls
// (U+0080-U+009F) and U+2028/U+2029 as \u007f, \u0085, \u2028..., which
// some log readers take as line breaks. Text beyond `max_bytes` bytes is cut
// (never inside an escape or a character) and "..." appended, so a long value
// shows as `"aaaa...` without its closing quote.
// Thread-safe.
std::string JsonForMessage(const JsonValue& value, size_t max_bytes = kMaxJsonInMessage);

// `text` with every character escaped that could break a line of a message or
// a log that holds it: control characters JSON-style (\n, \t, \u0001, DEL
// and C1 as \u007f...\u009f), U+2028/U+2029 as \u2028/\u2029, and bytes that
// are not valid UTF-8 as \xHH. Quotes and backslashes stay as they are: this
// is for the service's 'single-quoted' form, whose values (regular
// expressions, paths) read as written; JsonForMessage is the unambiguous form.
// Not bounded: the caller cuts first.
// Thread-safe.
std::string EscapeForMessage(std::string_view text);

// Bytes of a path (a file name, a URI, an object key, a member path holding
// map keys) a message keeps at most (PathForMessage): paths run longer than
// the values kMaxJsonInMessage bounds, and a cut one names nothing.
inline constexpr size_t kMaxPathInMessage = 1024;

// Input a message shows as it reads, bare or in the 'single-quoted' form (a
// name, a path, a value that is not JSON): at most `max_bytes` bytes of
// `text`, cut on a UTF-8 boundary with "..." appended, then escaped as
// EscapeForMessage escapes. (Escapes make the result longer: at most 6 bytes
// per byte kept.)
// Thread-safe.
std::string TextForMessage(std::string_view text, size_t max_bytes = kMaxJsonInMessage);

// A path (a file name, a URI, an object key) as a message shows it:
// TextForMessage(path, kMaxPathInMessage), escaped and cut as that is. Pass
// the path raw, never already escaped: the one way messages show paths.
// Thread-safe.
std::string PathForMessage(std::string_view path);

// A member name or map key as a step of a path in a message
// (HyperParameters.epochs, scenario.models.instance_types.ml.m5.xlarge): as
// it is when that is safe, else quoted as JsonForMessage quotes it
// (HyperParameters."a\nb"), so that no key can break the message's line or
// make it long. A printable ASCII key, the usual case, takes one scan.
// Thread-safe.
std::string PathKeyForMessage(std::string_view key);

}  // namespace kiln

#endif  // KILN_PLUGIN_JSON_VALUE_H_
