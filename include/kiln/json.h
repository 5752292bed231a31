// The service's wire JSON for the kiln.v1 API messages.
//
// Kiln's API messages (kiln/v1/sagemaker.proto) mirror SageMaker's shapes, and
// these two functions read and write them as the JSON the service speaks: the
// document a user would pass as
// boto3.client('sagemaker').create_training_job(**request) after
// json.dumps(request), or that DescribeTrainingJob returns. So a request
// written for SageMaker can be given to Kiln as it is.
//
//   kiln::v1::CreateTrainingJobRequest request;
//   absl::Status status = kiln::ParseJson(text, request);
//   if (!status.ok()) { /* status.message(): "Parameter validation failed:\n..." */ }
//   std::string response_json = kiln::ToJson(response, {.indent = true});
//
// The mapping (generic over messages, through protobuf reflection):
// - object members are named by the fields' json_name (SageMaker's PascalCase
//   member names), exactly; nothing else is accepted;
// - int32/int64 are JSON integers (no fraction or exponent, within the
//   field's range) and are written as numbers, not strings; double fields
//   take any number; float fields (the model's "float", 32 bits, such as
//   MetricData.Value) take a number within float range (+-3.4028235e38),
//   rounded to the nearest float, and are written as the shortest text that
//   reads back as that float (0.1, as the service prints it, not
//   0.100000001); bool takes true/false; strings, enumerations (by name)
//   take strings; bytes are base64 strings;
// - repeated fields are arrays, map fields objects (written with keys sorted),
//   message fields objects;
// - google.protobuf.Timestamp is a number of seconds since the Unix epoch with
//   up to 9 fraction digits (converted exactly, not through a double) or an
//   RFC 3339 date-time string (section 5.6's grammar exactly, nothing around
//   it: "2026-11-21T09:25:52.163Z", "2026-11-21T11:25:52+02:00"; lower-case
//   t and z allowed; no spaces, one-digit fields or offsets such as +0200);
//   it is written as a number with the fraction trimmed (1795253152.163, or
//   1795253152);
// - non-finite doubles are the strings "NaN", "Infinity" and "-Infinity", as
//   the service's JSON protocol writes them;
// - null as a member value means the member is absent.
// This is the shape check botocore does before sending a request; the model's
// other constraints (required members, lengths, patterns, enumeration values)
// are kiln/validation.h's business, but for one a message cannot carry: an
// empty list or map where the model requires elements (see ParseJson).
//
// Thread-safe: no shared state. A message passed in is used only during the
// call and must not be changed by another thread meanwhile.
#ifndef KILN_JSON_H_
#define KILN_JSON_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace kiln {

// Clears `message` and fills it from the wire JSON in `json`.
// Returns OK on success. Returns InvalidArgument when:
// - `json` is not valid JSON (RFC 8259, strict: no comments, trailing commas
//   or NaN; valid UTF-8; unique keys): "Invalid JSON: line 3, column 17:
//   expected ',' or '}' after object member";
// - the document does not fit the message: the message lists the problems
//   found, one per line, in botocore's words (the first
//   kMaxReportedViolations of kiln/validation.h, then a line "... and 1234
//   more" for the rest), e.g.
//     Parameter validation failed:
//     Unknown parameter in InputDataConfig[0].DataSource: "Foo", must be one of: S3DataSource, FileSystemDataSource, DatasetSource
//     Invalid type for parameter ResourceConfig.InstanceCount, value: "2", type: string, valid types: integer
//     Invalid value for parameter ResourceConfig.VolumeSizeInGB, value: 3000000000, valid range: -2147483648 to 2147483647
//   ("input" names the top level). The caller should show it to whoever
//   wrote the document; retrying the same text cannot succeed. Input the
//   message shows (member names, map keys, values) is escaped as JSON
//   strings are, and DEL, C1 controls, U+2028 and U+2029 as \u escapes too,
//   so that no input can add a line to the message, and is cut after 200
//   bytes ("aaaa...) so that none can make it long. A map key in a path is
//   shown as it is unless it needs escaping or cutting, then quoted:
//   HyperParameters."a\nb".
// - otherwise, the document holds an empty list or map ([] or {}) where the
//   model requires at least one element ("InputDataConfig": [],
//   "VpcConfig": {"Subnets": [], ...}). A message cannot hold that apart
//   from an absent member (which the model may allow), so ParseJson reports
//   it, with the request's other violations, in the ValidationException text
//   of ValidateRequest (kiln/validation.h, with default options; it escapes
//   control characters in values and paths too, and cuts values after 256
//   bytes); same advice:
//     2 validation errors detected: Value 'a_b' at 'trainingJobName' failed to
//     satisfy constraint: ...; Value '[]' at 'inputDataConfig' failed to
//     satisfy constraint: Member must have length greater than or equal to 1
// On any error `message` is left cleared, never half filled.
// Thread-safe.
absl::Status ParseJson(std::string_view json, google::protobuf::Message& message);

struct JsonPrintOptions {
  // One member or element per line, indented by two spaces.
  bool indent = false;
};

// Writes `message` as the service's wire JSON: fields in declaration order;
// unset optional scalars, unset messages and empty repeated and map fields
// left out, except lists the model requires, written `[]` (a List response
// with no job has "TrainingJobSummaries": [], as the service's has); map keys sorted so equal messages give equal text. The result is
// always valid JSON, and ParseJson reads it back to an equal message, except
// where the message holds what the wire cannot: bytes of a string field that
// are not valid UTF-8 are written as U+FFFD, and a Timestamp outside
// 0001-01-01..9999-12-31 is written but not read back.
// Thread-safe.
std::string ToJson(const google::protobuf::Message& message, const JsonPrintOptions& options = {});

// The most bytes a request file may hold (ReadRequestFile): 8 MiB, room for
// any request within the model's limits written in ASCII without escapes.
inline constexpr int64_t kMaxRequestFileBytes = int64_t{8} << 20;

// Reads a file that holds a request's JSON (for ParseJson) whole: the file
// at `path` (a symbolic link to one is followed) must be a regular file of
// at most kMaxRequestFileBytes; directories, FIFOs, devices and sockets are
// refused without waiting on them or reading them.
// Errors (the message says what is wrong and the rule, not which file: the
// caller names the file as it shows paths, e.g. "job.json: cannot read the
// file: <message>"): InvalidArgument for a file that is not regular ("a
// FIFO, not a regular file; a request file must be a regular file") or that
// holds more than kMaxRequestFileBytes ("12582912 bytes; a request file may
// hold at most 8 MiB (8388608 bytes)"): the caller should point at another
// file; for a file that cannot be opened or read, the errno's code
// (NotFound, PermissionDenied, ...) with strerror's text ("No such file or
// directory").
// Thread-safe.
absl::StatusOr<std::string> ReadRequestFile(const std::string& path);

// Input as Kiln's messages show it when not as JSON (bare, or 'in single
// quotes': a name, a file name, a command-line value), for a program that
// echoes its own input the same way: at most `max_bytes` bytes of `text`, cut
// on a UTF-8 boundary with "..." appended, and every character that could end
// a line of a message or a log escaped: control characters as \n, \t,
// \u0001..., DEL and C1 controls as \u007f...\u009f, U+2028/U+2029 as
// \u2028/\u2029, bytes that are not UTF-8 as \xC3. Quotes and backslashes
// stay as they are, so text without such characters reads as written.
// Thread-safe.
std::string InputForMessage(std::string_view text, size_t max_bytes = 200);

}  // namespace kiln

#endif  // KILN_JSON_H_
