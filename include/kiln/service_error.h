// The service's words for an engine error: the error code and HTTP status
// SageMaker answers with where the engine returns an absl::Status.
//
// The engine (kiln/engine.h) reports errors as absl status codes. A front end
// that speaks for the service (a command-line program, an endpoint speaking
// the AWS JSON 1.1 protocol to SDK clients) words each one as the service
// does: the `__type` code clients match and the HTTP status it travels with.
// This is the one mapping they share.
//
//   absl::StatusOr<v1::DescribeTrainingJobResponse> described =
//       engine->DescribeTrainingJob(request);
//   if (!described.ok()) {
//     kiln::ServiceError error =
//         kiln::ToServiceError("DescribeTrainingJob", described.status());
//     // error.code == "ValidationException", error.http_status == 400 for
//     // an unknown job; reply {"__type": error.code, "message": ...}.
//   }
//
// Thread-safe: a pure function of its arguments.
#ifndef KILN_SERVICE_ERROR_H_
#define KILN_SERVICE_ERROR_H_

#include <string_view>

#include "absl/status/status.h"

namespace kiln {

// An error as the service sends it.
struct ServiceError {
  // The bare code clients match (botocore's Error.Code, the JSON protocol's
  // `__type`): "ValidationException", "ResourceNotFound", ... Refers to static
  // storage; empty for an OK status.
  std::string_view code;
  // The HTTP status the error travels with: 400 for the errors a client
  // fixes, 5xx for those it retries (botocore retries 500 and 503); 200 for
  // an OK status.
  int http_status = 200;
};

// Returns how the service words `status` when operation `operation` fails with
// it. `operation` is the API's operation name as it appears after
// "SageMaker." in X-Amz-Target: "CreateTrainingJob", "DescribeTrainingJob",
// "ListTrainingJobs", "StopTrainingJob", "UpdateTrainingJob",
// "DeleteTrainingJob". Another name (or an empty one) gets the rule for
// operations without an exception below. Only the status's code matters, never
// its message.
//
// The rule, by absl code (each code means what kiln/engine.h says it means):
//   OK                  -> "" / 200.
//   InvalidArgument     -> ValidationException / 400: the request breaks a rule.
//   OutOfRange          -> ValidationException / 400: a value outside what the
//                          request may ask for, which the service also calls
//                          a validation error.
//   NotFound            -> ResourceNotFound / 400, the code the API model
//                          declares; but DescribeTrainingJob ->
//                          ValidationException / 400, which is what the
//                          service (and moto) answer for an unknown job there.
//   AlreadyExists       -> ResourceInUse / 400: the name is taken.
//   FailedPrecondition  -> the job's state forbids the call. DeleteTrainingJob
//                          -> ResourceInUse / 400, the code the model declares
//                          for that refusal; every other operation ->
//                          ValidationException / 400, as the service words its
//                          lifecycle refusals (stopping an ended job, updating
//                          a pool that is not Available).
//   ResourceExhausted   -> ResourceLimitExceeded / 400: a quota or limit.
//   PermissionDenied,
//   Unauthenticated     -> AccessDeniedException / 400: the caller, or
//                          credentials the engine works with, may not do it;
//                          the client fixes that, it does not retry.
//   Unavailable         -> ServiceUnavailable / 503: retry the same call.
//   Unimplemented       -> ValidationException / 400: the request asks for
//                          something this engine does not do; retrying will not
//                          help, changing the request will.
//   Cancelled, Unknown, DeadlineExceeded, Aborted, Internal, DataLoss, and any
//   code absl adds later
//                       -> InternalFailure / 500: the service's own failure;
//                          clients retry 500.
// ResourceNotFound, ResourceInUse and ResourceLimitExceeded are SageMaker's
// modelled exceptions and have no "Exception" suffix; the others are the
// common AWS errors. Codes are never qualified ("com.amazonaws...#") or
// suffixed.
ServiceError ToServiceError(std::string_view operation, const absl::Status& status);

}  // namespace kiln

#endif  // KILN_SERVICE_ERROR_H_
