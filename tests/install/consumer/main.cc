// Uses Kiln through its installed public headers only: builds a request from
// the generated API messages, writes it as the service's JSON, reads it back
// and validates it. consumer_test.cmake checks what it prints.
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "kiln/json.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/validation.h"

int main() {
  kiln::v1::CreateTrainingJobRequest request;
  request.set_training_job_name("install-check");
  request.set_role_arn("arn:aws:iam::123456789012:role/kiln");
  std::cout << "name: " << request.training_job_name() << "\n";

  const std::string json = kiln::ToJson(request);
  std::cout << "json: " << json << "\n";

  kiln::v1::CreateTrainingJobRequest parsed;
  const absl::Status parse_status = kiln::ParseJson(json, parsed);
  std::cout << "round trip: "
            << (parse_status.ok() && parsed.training_job_name() == request.training_job_name()
                    ? "ok"
                    : parse_status.ToString())
            << "\n";

  // Incomplete on purpose (no AlgorithmSpecification, OutputDataConfig, ...).
  const absl::Status status = kiln::ValidateCreateTrainingJobRequest(request);
  std::cout << "validation: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return 0;
}
