// Validation of training-job API requests against the SageMaker service model.
//
// Every constraint of the model (required members, string lengths, patterns
// with a full match, enumerations, numeric ranges, list and map sizes) is read
// from the model itself, compiled into the library, so Kiln accepts exactly
// what the service accepts. On top of those, ValidateCreateTrainingJobRequest
// applies the service's cross-field rules (TrainingImage xor AlgorithmName,
// InstanceType/InstanceCount xor InstanceGroups, spot and warm-pool rules,
// channel and instance-group names, input-mode rules) and Kiln's extensions
// (`file://` URIs wherever an S3 URI is allowed) and rules (no two channels
// at one path of the container's /opt/ml/input/data on an instance that
// receives both: File channel "a_1" beside Pipe channel "a", whose epoch 1
// FIFO is a_1; no channel named "." or "..", which the model's pattern
// allows).
//
// All violations of a request are reported at once (the first
// kMaxReportedViolations of them listed, the rest counted), in the service's
// ValidationException form:
//
//   2 validation errors detected: Value 'a_b' at 'trainingJobName' failed to
//   satisfy constraint: Member must satisfy regular expression pattern:
//   ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}; Value null at 'roleArn' failed to
//   satisfy constraint: Member must not be null
//
// Paths are camelCase; list elements are `inputDataConfig.1.member.channelName`
// (1-based, as the service writes them); map entries are `hyperParameters.<key>`.
//
// An empty repeated or map field is an absent member to these checks (a
// message cannot tell the two apart), so a list the model requires to be
// non-empty is caught when empty only from JSON, by kiln::ParseJson.
//
// Example:
//   kiln::v1::CreateTrainingJobRequest request;
//   KILN_RETURN_IF_ERROR(kiln::ParseJson(text, request));  // "kiln/plugin/status_macros.h"
//   absl::Status status = kiln::ValidateCreateTrainingJobRequest(request);
//   if (!status.ok()) std::cerr << status.message() << "\n";
//
// Threading: all functions are thread-safe (the compiled model is immutable).
#ifndef KILN_VALIDATION_H_
#define KILN_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln {

// The most violations a message lists: ValidateRequest's text, and ParseJson's
// (kiln/json.h) "Parameter validation failed" lines. Those past it are
// counted ("...; and 1699900 more"), so that a request with a million bad
// elements gets a message of bounded size.
inline constexpr int kMaxReportedViolations = 100;

struct ValidationOptions {
  // Accept `file://<path>` wherever the model allows an S3 URI (S3OutputPath,
  // channel S3Uri, CheckpointConfig.S3Uri, ...). A local engine needs it; an
  // operator who wants the service's exact rules turns it off.
  bool allow_local_uris = true;
};

// One violation: the camelCase path of the offending member and the complete
// sentence the service would print for it ("Value 'x' at 'path' failed to
// satisfy constraint: ...", or a cross-field sentence). The sentence shows
// input escaped so that it stays one line: control characters as \n, \t,
// \u0085..., U+2028/U+2029 as \u2028/\u2029, bytes that are not UTF-8 as
// \xC3; a value is cut after 256 bytes and a path after 1024, with "...".
// `path` itself holds map keys as they are.
struct ValidationError {
  std::string path;
  std::string message;
};

// Checks `message` (any kiln.v1 message generated from the model) against the
// model's constraints only: no cross-field rules. Returns the violations in a
// deterministic order (members in model order, depth first), the first
// kMaxReportedViolations of them when there are more; empty when valid.
// Thread-safe.
std::vector<ValidationError> CheckShapeConstraints(const google::protobuf::Message& message,
                                                   const ValidationOptions& options = {});

// Checks a CreateTrainingJob request: the model's constraints and the
// service's cross-field rules, all violations at once.
// Returns OK when the request is acceptable; InvalidArgument with the
// ValidationException text otherwise (the number of violations, the first
// kMaxReportedViolations of them, "and N more" for the rest) (the caller should fix the request; no
// retry helps). Does not look at anything outside the request (existing jobs,
// objects under an S3 prefix): the engine checks those.
// Thread-safe.
absl::Status ValidateCreateTrainingJobRequest(const v1::CreateTrainingJobRequest& request,
                                              const ValidationOptions& options = {});

// Checks any other request message of the training-job API (Describe, List,
// Stop, Update, Delete) against the model's constraints; for a
// CreateTrainingJobRequest it is ValidateCreateTrainingJobRequest.
// Returns OK or InvalidArgument as above. Thread-safe.
absl::Status ValidateRequest(const google::protobuf::Message& request,
                             const ValidationOptions& options = {});

// The same for each request type of the API, chosen at compile time: no
// run-time type look-up, for callers that validate on every call (the engine
// does on each Describe, List, Stop, Update and Delete). Same results as the
// overload above. Thread-safe.
absl::Status ValidateRequest(const v1::CreateTrainingJobRequest& request,
                             const ValidationOptions& options = {});
absl::Status ValidateRequest(const v1::DescribeTrainingJobRequest& request,
                             const ValidationOptions& options = {});
absl::Status ValidateRequest(const v1::ListTrainingJobsRequest& request,
                             const ValidationOptions& options = {});
absl::Status ValidateRequest(const v1::StopTrainingJobRequest& request,
                             const ValidationOptions& options = {});
absl::Status ValidateRequest(const v1::UpdateTrainingJobRequest& request,
                             const ValidationOptions& options = {});
absl::Status ValidateRequest(const v1::DeleteTrainingJobRequest& request,
                             const ValidationOptions& options = {});

// Joins violations into the service's text: "N validation error(s) detected:
// m1; m2"; past kMaxReportedViolations of them, the rest are counted, not
// listed: "N validation errors detected: m1; ...; m100; and 5 more".
// REQUIRES: !errors.empty().
std::string FormatValidationErrors(const std::vector<ValidationError>& errors);

}  // namespace kiln

#endif  // KILN_VALIDATION_H_
