// Requests the core tests build on.
#ifndef KILN_TESTS_CORE_REQUESTS_H_
#define KILN_TESTS_CORE_REQUESTS_H_

#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln::tests {

// The smallest valid CreateTrainingJob request: one ml.m5.xlarge instance,
// an image in File mode, an output path; named `name`.
inline v1::CreateTrainingJobRequest MinimalRequest(const std::string& name) {
  v1::CreateTrainingJobRequest r;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
        algorithm_specification { training_image: "train:latest" training_input_mode: "File" }
        output_data_config { s3_output_path: "s3://bucket/out" }
        resource_config { instance_type: "ml.m5.xlarge" instance_count: 1 volume_size_in_gb: 30 }
      )pb",
      &r));
  r.set_training_job_name(name);
  return r;
}

}  // namespace kiln::tests

#endif  // KILN_TESTS_CORE_REQUESTS_H_
