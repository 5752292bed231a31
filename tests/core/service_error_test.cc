#include "kiln/service_error.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/requests.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"

namespace kiln {
namespace {

constexpr std::string_view kOperations[] = {"CreateTrainingJob",
                                            "DescribeTrainingJob",
                                            "ListTrainingJobs",
                                            "StopTrainingJob",
                                            "UpdateTrainingJob",
                                            "DeleteTrainingJob",
                                            "",
                                            "SomeOtherOperation"};

// What the service answers for `code` in `operation`, written out case by case.
std::pair<std::string_view, int> Expected(std::string_view operation, absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return {"", 200};
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return {"ValidationException", 400};
    case absl::StatusCode::kNotFound:
      if (operation == "DescribeTrainingJob") return {"ValidationException", 400};
      return {"ResourceNotFound", 400};
    case absl::StatusCode::kAlreadyExists:
      return {"ResourceInUse", 400};
    case absl::StatusCode::kFailedPrecondition:
      if (operation == "DeleteTrainingJob") return {"ResourceInUse", 400};
      return {"ValidationException", 400};
    case absl::StatusCode::kResourceExhausted:
      return {"ResourceLimitExceeded", 400};
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return {"AccessDeniedException", 400};
    case absl::StatusCode::kUnavailable:
      return {"ServiceUnavailable", 503};
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
      return {"InternalFailure", 500};
    default:
      ADD_FAILURE() << "no expectation for code " << static_cast<int>(code);
      return {"", 0};
  }
}

TEST(ToServiceErrorTest, EveryCodeInEveryOperationGetsTheServicesCodeAndStatus) {
  for (std::string_view operation : kOperations) {
    for (int c = 0; c <= 16; ++c) {  // every absl::StatusCode
      const auto code = static_cast<absl::StatusCode>(c);
      const absl::Status status(code, code == absl::StatusCode::kOk ? "" : "a message");
      const ServiceError error = ToServiceError(operation, status);
      const auto [want_code, want_http] = Expected(operation, code);
      EXPECT_EQ(error.code, want_code) << operation << " " << absl::StatusCodeToString(code);
      EXPECT_EQ(error.http_status, want_http) << operation << " " << absl::StatusCodeToString(code);
    }
  }
}

TEST(ToServiceErrorTest, ACodeAbslMayAddLaterIsAnInternalFailure) {
  const ServiceError error =
      ToServiceError("DescribeTrainingJob", absl::Status(static_cast<absl::StatusCode>(42), "x"));
  EXPECT_EQ(error.code, "InternalFailure");
  EXPECT_EQ(error.http_status, 500);
}

TEST(ToServiceErrorTest, OnlyTheCodeMattersNotTheMessage) {
  const ServiceError error =
      ToServiceError("StopTrainingJob", absl::NotFoundError("ValidationException: ResourceInUse"));
  EXPECT_EQ(error.code, "ResourceNotFound");
}

TEST(ToServiceErrorTest, OperationNamesAreMatchedExactly) {
  const absl::Status not_found = absl::NotFoundError("gone");
  EXPECT_EQ(ToServiceError("SageMaker.DescribeTrainingJob", not_found).code, "ResourceNotFound");
  EXPECT_EQ(ToServiceError("describetrainingjob", not_found).code, "ResourceNotFound");
  EXPECT_EQ(ToServiceError("DescribeTrainingJob", not_found).code, "ValidationException");
}

// The engine's own refusals, worded through the mapping, are the service's.
class EngineServiceErrorTest : public testing::Test {
 protected:
  void SetUp() override {
    loop_ = NewVirtualEventLoop();
    provider_ = sim::NewSimClusterProvider(*loop_, {});
    EngineOptions options;
    options.loop = loop_.get();
    options.cluster_provider = provider_.get();
    engine_ = NewEngine(std::move(options)).value();
  }

  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineServiceErrorTest, RefusalsCarryTheServicesCodes) {
  ASSERT_TRUE(engine_->CreateTrainingJob(tests::MinimalRequest("running")).ok());

  v1::DescribeTrainingJobRequest describe;
  describe.set_training_job_name("missing");
  const absl::Status describe_missing = engine_->DescribeTrainingJob(describe).status();
  EXPECT_EQ(ToServiceError("DescribeTrainingJob", describe_missing).code, "ValidationException");

  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("missing");
  EXPECT_EQ(ToServiceError("StopTrainingJob", engine_->StopTrainingJob(stop)).code,
            "ResourceNotFound");

  const absl::Status taken = engine_->CreateTrainingJob(tests::MinimalRequest("running")).status();
  EXPECT_EQ(ToServiceError("CreateTrainingJob", taken).code, "ResourceInUse");

  v1::CreateTrainingJobRequest invalid = tests::MinimalRequest("bad name");
  EXPECT_EQ(ToServiceError("CreateTrainingJob", engine_->CreateTrainingJob(invalid).status()).code,
            "ValidationException");

  v1::DeleteTrainingJobRequest del;
  del.set_training_job_name("running");
  const ServiceError delete_running =
      ToServiceError("DeleteTrainingJob", engine_->DeleteTrainingJob(del));
  EXPECT_EQ(delete_running.code, "ResourceInUse");
  EXPECT_EQ(delete_running.http_status, 400);

  loop_->RunUntilIdle();  // the job ends
  stop.set_training_job_name("running");
  EXPECT_EQ(ToServiceError("StopTrainingJob", engine_->StopTrainingJob(stop)).code,
            "ValidationException");
}

}  // namespace
}  // namespace kiln
