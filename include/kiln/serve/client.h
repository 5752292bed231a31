// A client of the SageMaker Training API over HTTP: of `kiln serve`, or of
// any endpoint that speaks the service's JSON protocol. Each call is signed
// with SigV4 and typed as the engine's own calls are (kiln/engine.h), so a
// program can drive a remote server as it drives an engine in its process.
//
//   auto options = kiln::serve::ResolveClientOptions("http://127.0.0.1:8080").value();
//   auto client = kiln::serve::NewClient(options).value();
//   auto described = client->DescribeTrainingJob(request);
//
// Errors of a call: the service's error as an absl::Status whose code stands
// for the service's (as kiln/service_error.h maps them: ValidationException
// is InvalidArgument, ResourceNotFound NotFound, ResourceInUse AlreadyExists,
// ResourceLimitExceeded ResourceExhausted, a refused signature or key
// Unauthenticated, a 5xx Unavailable), with the service's message, and the
// service's own code in the payload kServiceErrorPayload (ServiceErrorCode);
// Unavailable when the exchange itself fails (no server, a timeout).
//
// Threading: a client may be used from several threads at once.
#ifndef KILN_SERVE_CLIENT_H_
#define KILN_SERVE_CLIENT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/aws/s3.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln::serve {

struct ClientOptions {
  // http://HOST:PORT (or https://...), the server's root.
  std::string endpoint;
  std::string region = "us-east-1";
  aws::AwsCredentials credentials;
  // A call that has not completed within this long fails (Unavailable).
  absl::Duration timeout = absl::Seconds(30);
  // https://: a PEM file of the certificates to trust instead of the
  // system's (a `kiln serve --tls-cert` certificate that no authority
  // signed, say). "": the system's.
  std::string ca_bundle;
};

// `endpoint`, with the region and credentials found the AWS way (AWS_REGION,
// AWS_ACCESS_KEY_ID ..., AWS_PROFILE and the shared files; see
// kiln::aws::S3Options), and the certificates to trust from AWS_CA_BUNDLE
// when it is set, as boto3 and the aws CLI take them. Errors:
// FailedPrecondition when no credentials are found, saying where they were
// looked for; InvalidArgument for an endpoint that is not http:// or
// https://; NotFound or PermissionDenied naming AWS_CA_BUNDLE's file when it
// cannot be read.
absl::StatusOr<ClientOptions> ResolveClientOptions(std::string endpoint);

// The payload of a failed call's status holding the service's error code
// ("ValidationException", ...).
inline constexpr char kServiceErrorPayload[] = "kiln.serve/service-error";

// The service's error code of a status a call returned, "" when it has none.
std::string ServiceErrorCode(const absl::Status& status);

class Client {
 public:
  virtual ~Client() = default;

  // Sends `operation` with the JSON `body` and returns the response's JSON.
  // `operation` is a SageMaker operation ("DescribeTrainingJob", sent as
  // X-Amz-Target "SageMaker.DescribeTrainingJob"), or a whole target with its
  // prefix when it has a '.' ("Kiln.InjectSpotInterruption", or a CloudWatch
  // Logs operation, "Logs_20140328.GetLogEvents", signed for service "logs").
  virtual absl::StatusOr<std::string> Call(std::string_view operation, std::string_view body) = 0;

  absl::StatusOr<v1::CreateTrainingJobResponse> CreateTrainingJob(
      const v1::CreateTrainingJobRequest& request);
  absl::StatusOr<v1::DescribeTrainingJobResponse> DescribeTrainingJob(
      const v1::DescribeTrainingJobRequest& request);
  absl::StatusOr<v1::ListTrainingJobsResponse> ListTrainingJobs(
      const v1::ListTrainingJobsRequest& request);
  absl::Status StopTrainingJob(const v1::StopTrainingJobRequest& request);
  absl::StatusOr<v1::UpdateTrainingJobResponse> UpdateTrainingJob(
      const v1::UpdateTrainingJobRequest& request);
  absl::Status DeleteTrainingJob(const v1::DeleteTrainingJobRequest& request);

  // Kiln.InjectSpotInterruption (kiln/serve/server.h): a spot interruption
  // notice to instance `host` ("algo-1") of the running spot job `job_name`,
  // `notice` (whole seconds) before the instance is taken back. Errors as
  // any call's; Unimplemented (UnknownOperationException) when the server
  // does not allow fault injection.
  absl::Status InjectSpotInterruption(std::string_view job_name, std::string_view host,
                                      absl::Duration notice = absl::Seconds(120));
};

// Errors: InvalidArgument naming the option (an endpoint that is not
// http:// or https://, no credentials). A ca_bundle that cannot be read or
// does not verify the server fails each call (Unavailable, with libcurl's
// reason).
absl::StatusOr<std::unique_ptr<Client>> NewClient(ClientOptions options);

}  // namespace kiln::serve

#endif  // KILN_SERVE_CLIENT_H_
