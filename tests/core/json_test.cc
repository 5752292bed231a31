#include "kiln/json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"
#include "kiln/plugin/json_value.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/validation.h"

namespace kiln {
namespace {

using ::google::protobuf::util::DefaultFieldComparator;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

// MessageDifferencer::Equals, except that NaN equals NaN.
bool Equal(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  return differencer.Compare(a, b);
}

// A heterogeneous-cluster training job as a user would send it, members in
// the messages' declaration order and maps sorted, so ToJson must give back
// exactly this document.
constexpr std::string_view kCreateTrainingJob = R"json({
  "TrainingJobName": "hetero-resnet-2026-11-21",
  "HyperParameters": {
    "batch-size": "256",
    "epochs": "90",
    "lr": "0.1",
    "sagemaker_program": "train.py"
  },
  "AlgorithmSpecification": {
    "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311",
    "TrainingInputMode": "File",
    "MetricDefinitions": [
      {"Name": "train:loss", "Regex": "loss=([0-9\\.]+)"},
      {"Name": "val:acc", "Regex": "val_acc=([0-9\\.]+)"}
    ],
    "EnableSageMakerMetricsTimeSeries": true,
    "ContainerEntrypoint": ["python3", "train.py"],
    "ContainerArguments": ["--data", "/opt/ml/input/data/train", "--note", "caf\u00e9 \ud83d\ude80 \"quoted\"\n"]
  },
  "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
  "InputDataConfig": [
    {
      "ChannelName": "train",
      "DataSource": {
        "S3DataSource": {
          "S3DataType": "S3Prefix",
          "S3Uri": "s3://bucket/imagenet/train/",
          "S3DataDistributionType": "ShardedByS3Key",
          "InstanceGroupNames": ["data-group"]
        }
      },
      "ContentType": "application/x-image",
      "CompressionType": "None",
      "InputMode": "FastFile",
      "ShuffleConfig": {"Seed": 9007199254740993}
    },
    {
      "ChannelName": "validation",
      "DataSource": {
        "S3DataSource": {
          "S3DataType": "ManifestFile",
          "S3Uri": "s3://bucket/imagenet/val.manifest",
          "AttributeNames": ["source-ref", "class"],
          "InstanceGroupNames": ["data-group", "gpu-group"]
        }
      },
      "RecordWrapperType": "RecordIO",
      "InputMode": "Pipe"
    }
  ],
  "OutputDataConfig": {"KmsKeyId": "alias/training", "S3OutputPath": "s3://bucket/output/"},
  "ResourceConfig": {
    "VolumeSizeInGB": 100,
    "KeepAlivePeriodInSeconds": 1800,
    "InstanceGroups": [
      {"InstanceType": "ml.c5.18xlarge", "InstanceCount": 2, "InstanceGroupName": "data-group"},
      {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4, "InstanceGroupName": "gpu-group"}
    ]
  },
  "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0a", "subnet-0b"]},
  "StoppingCondition": {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800},
  "Tags": [{"Key": "team", "Value": "vision"}, {"Key": "cost-center", "Value": ""}],
  "EnableNetworkIsolation": false,
  "EnableInterContainerTrafficEncryption": true,
  "EnableManagedSpotTraining": true,
  "CheckpointConfig": {"S3Uri": "s3://bucket/checkpoints/hetero/", "LocalPath": "/opt/ml/checkpoints"},
  "ProfilerConfig": {"ProfilingIntervalInMilliseconds": 500, "DisableProfiler": false},
  "Environment": {"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1"},
  "RetryStrategy": {"MaximumRetryAttempts": 3}
})json";

constexpr std::string_view kDescribeTrainingJob = R"json({
  "TrainingJobName": "hetero-resnet-2026-11-21",
  "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/hetero-resnet-2026-11-21",
  "ModelArtifacts": {"S3ModelArtifacts": "s3://bucket/output/hetero-resnet-2026-11-21/output/model.tar.gz"},
  "TrainingJobStatus": "Completed",
  "SecondaryStatus": "Completed",
  "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100, "KeepAlivePeriodInSeconds": 1800},
  "WarmPoolStatus": {"Status": "Available", "ResourceRetainedBillableTimeInSeconds": 0},
  "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
  "CreationTime": 1795253152.163,
  "TrainingStartTime": 1795253187.5,
  "TrainingEndTime": 1795256812,
  "LastModifiedTime": 1795256871.000000001,
  "SecondaryStatusTransitions": [
    {"Status": "Starting", "StartTime": 1795253152.163, "EndTime": 1795253187.5, "StatusMessage": "Preparing the instances for training"},
    {"Status": "Downloading", "StartTime": 1795253187.5, "EndTime": 1795253290.25, "StatusMessage": "Downloading input data"},
    {"Status": "Training", "StartTime": 1795253290.25, "EndTime": 1795256700.999999999, "StatusMessage": "Training image download completed. Training in progress."},
    {"Status": "Uploading", "StartTime": 1795256700.999999999, "EndTime": 1795256812, "StatusMessage": "Uploading generated training model"},
    {"Status": "Completed", "StartTime": 1795256812, "EndTime": 1795256812, "StatusMessage": "Training job completed"}
  ],
  "FinalMetricDataList": [
    {"MetricName": "train:loss", "Value": 0.0123, "Timestamp": 1795256700},
    {"MetricName": "val:acc", "Value": 0.7635, "Timestamp": 1795256700.5},
    {"MetricName": "weird", "Value": "NaN", "Timestamp": 1795256700.5}
  ],
  "EnableNetworkIsolation": false,
  "EnableInterContainerTrafficEncryption": false,
  "EnableManagedSpotTraining": true,
  "TrainingTimeInSeconds": 3625,
  "BillableTimeInSeconds": 1088,
  "BillableTokenCount": 9223372036854775807
})json";

class JsonTest : public ::testing::Test {
 protected:
  // The error message of parsing `json` into a CreateTrainingJobRequest.
  static std::string CreateError(std::string_view json) {
    v1::CreateTrainingJobRequest request;
    const absl::Status status = ParseJson(json, request);
    if (status.ok()) return "OK";
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(request.ByteSizeLong(), 0u) << "message not cleared on error";
    return std::string(status.message());
  }

  // Parses `text` with the internal parser (for comparing documents).
  static JsonValue Document(std::string_view text) {
    absl::StatusOr<JsonValue> value = ParseJsonValue(text);
    EXPECT_TRUE(value.ok()) << value.status();
    return value.ok() ? *value : JsonValue();
  }

  // ParseJson, ToJson, ParseJson: the two messages must be equal, and ToJson
  // must give the original document back (same members, same order).
  template <typename Message>
  static void ExpectExactRoundTrip(std::string_view json) {
    Message first;
    ASSERT_TRUE(ParseJson(json, first).ok()) << ParseJson(json, first);
    const std::string written = ToJson(first);
    Message second;
    ASSERT_TRUE(ParseJson(written, second).ok()) << written;
    EXPECT_TRUE(Equal(first, second)) << written;
    EXPECT_EQ(WriteJson(Document(written)), WriteJson(Document(json)));
  }
};

TEST_F(JsonTest, CreateTrainingJobRequestParses) {
  v1::CreateTrainingJobRequest request;
  ASSERT_TRUE(ParseJson(kCreateTrainingJob, request).ok()) << ParseJson(kCreateTrainingJob, request);
  EXPECT_EQ(request.training_job_name(), "hetero-resnet-2026-11-21");
  EXPECT_EQ(request.hyper_parameters().at("lr"), "0.1");
  EXPECT_EQ(request.algorithm_specification().metric_definitions(1).regex(), "val_acc=([0-9\\.]+)");
  EXPECT_EQ(request.algorithm_specification().container_arguments(3),
            "caf\xC3\xA9 \xF0\x9F\x9A\x80 \"quoted\"\n");
  ASSERT_EQ(request.input_data_config_size(), 2);
  EXPECT_EQ(request.input_data_config(0).shuffle_config().seed(), 9007199254740993);
  EXPECT_EQ(request.input_data_config(1).data_source().s3_data_source().instance_group_names(1),
            "gpu-group");
  EXPECT_FALSE(request.resource_config().has_instance_count());
  EXPECT_EQ(request.resource_config().instance_groups(1).instance_count(), 4);
  EXPECT_EQ(request.tags(1).value(), "");
  EXPECT_TRUE(request.tags(1).has_value());  // present though empty
  EXPECT_TRUE(request.has_enable_network_isolation());
  EXPECT_FALSE(request.enable_network_isolation());
  EXPECT_EQ(request.checkpoint_config().local_path(), "/opt/ml/checkpoints");
  EXPECT_EQ(request.profiler_config().profiling_interval_in_milliseconds(), 500);
  EXPECT_EQ(request.environment().at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(request.retry_strategy().maximum_retry_attempts(), 3);
}

TEST_F(JsonTest, CreateTrainingJobRequestRoundTripsExactly) {
  ExpectExactRoundTrip<v1::CreateTrainingJobRequest>(kCreateTrainingJob);
}

TEST_F(JsonTest, DescribeTrainingJobResponseRoundTripsExactly) {
  ExpectExactRoundTrip<v1::DescribeTrainingJobResponse>(kDescribeTrainingJob);
  v1::DescribeTrainingJobResponse response;
  ASSERT_TRUE(ParseJson(kDescribeTrainingJob, response).ok());
  EXPECT_EQ(response.creation_time().seconds(), 1795253152);
  EXPECT_EQ(response.creation_time().nanos(), 163000000);
  EXPECT_EQ(response.last_modified_time().nanos(), 1);
  EXPECT_EQ(response.secondary_status_transitions(2).end_time().nanos(), 999999999);
  EXPECT_EQ(response.billable_token_count(), std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(std::isnan(response.final_metric_data_list(2).value()));
}

TEST_F(JsonTest, IndentedOutputParsesBackEqual) {
  v1::DescribeTrainingJobResponse response;
  ASSERT_TRUE(ParseJson(kDescribeTrainingJob, response).ok());
  const std::string indented = ToJson(response, {.indent = true});
  EXPECT_THAT(indented, HasSubstr("\n  \"TrainingJobStatus\": \"Completed\",\n"));
  v1::DescribeTrainingJobResponse back;
  ASSERT_TRUE(ParseJson(indented, back).ok());
  EXPECT_TRUE(Equal(response, back));
}

TEST_F(JsonTest, InsignificantVariationsParseToTheSameMessage) {
  // Member order, whitespace, escapes, trailing fraction zeros, exponents and
  // nulls do not change the message; ToJson writes the canonical form.
  const std::string_view varied = R"({ "CreationTime" : 17952531521630e-4,
      "TrainingJobName":"j\u006fb", "FailureReason": null,
      "LastModifiedTime": 1795253152.100, "HyperParameters": {"b": "2", "a": "1"}})";
  v1::DescribeTrainingJobResponse response;
  ASSERT_TRUE(ParseJson(varied, response).ok()) << ParseJson(varied, response);
  EXPECT_FALSE(response.has_failure_reason());
  EXPECT_EQ(ToJson(response),
            R"({"TrainingJobName":"job","HyperParameters":{"a":"1","b":"2"},)"
            R"("CreationTime":1795253152.163,"LastModifiedTime":1795253152.1})");
  v1::DescribeTrainingJobResponse back;
  ASSERT_TRUE(ParseJson(ToJson(response), back).ok());
  EXPECT_TRUE(Equal(response, back));
}

TEST_F(JsonTest, Int64IsWrittenAsANumber) {
  v1::ShuffleConfig shuffle;
  shuffle.set_seed(9007199254740993);
  EXPECT_EQ(ToJson(shuffle), R"({"Seed":9007199254740993})");
  shuffle.set_seed(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ToJson(shuffle), R"({"Seed":-9223372036854775808})");
  v1::ShuffleConfig back;
  ASSERT_TRUE(ParseJson(ToJson(shuffle), back).ok());
  EXPECT_EQ(back.seed(), std::numeric_limits<int64_t>::min());
}

TEST_F(JsonTest, MapKeysAreWrittenSorted) {
  v1::CreateTrainingJobRequest request;
  const std::vector<std::string> keys = {"zeta", "alpha", "Beta", "_x", "alpha2", "10", "9"};
  // (push_back, not = "v": GCC 12 gives a false -Wrestrict on the latter at -O3.)
  for (const std::string& key : keys) (*request.mutable_hyper_parameters())[key].push_back('v');
  EXPECT_EQ(ToJson(request),
            R"({"HyperParameters":{"10":"v","9":"v","Beta":"v","_x":"v","alpha":"v","alpha2":"v","zeta":"v"}})");
}

TEST_F(JsonTest, UnsetAndEmptyFieldsAreOmittedButPresentZerosAreWritten) {
  v1::CreateTrainingJobRequest request;
  EXPECT_EQ(ToJson(request), "{}");
  request.mutable_resource_config();            // present, empty message
  request.mutable_vpc_config()->add_subnets();  // empty string element
  request.set_enable_network_isolation(false);
  request.mutable_stopping_condition()->set_max_runtime_in_seconds(0);
  EXPECT_EQ(ToJson(request),
            R"({"ResourceConfig":{},"VpcConfig":{"Subnets":[""]},"StoppingCondition":{"MaxRuntimeInSeconds":0},)"
            R"("EnableNetworkIsolation":false})");
}

TEST_F(JsonTest, TimestampsAreWrittenAsSecondsWithTrimmedFraction) {
  v1::SecondaryStatusTransition transition;
  const auto written = [&](int64_t seconds, int32_t nanos) {
    transition.mutable_start_time()->set_seconds(seconds);
    transition.mutable_start_time()->set_nanos(nanos);
    return ToJson(transition);
  };
  EXPECT_EQ(written(1795253152, 163000000), R"({"StartTime":1795253152.163})");
  EXPECT_EQ(written(1795253152, 0), R"({"StartTime":1795253152})");
  EXPECT_EQ(written(0, 1), R"({"StartTime":0.000000001})");
  EXPECT_EQ(written(-1, 500000000), R"({"StartTime":-0.5})");
  EXPECT_EQ(written(-2, 999999999), R"({"StartTime":-1.000000001})");
  EXPECT_EQ(written(0, 0), R"({"StartTime":0})");
  // Unnormalized values still give valid JSON.
  EXPECT_EQ(written(5, -250000000), R"({"StartTime":4.75})");
  EXPECT_EQ(written(std::numeric_limits<int64_t>::max(), 999999999),
            R"({"StartTime":9223372036854775807.999999999})");
}

TEST_F(JsonTest, TimestampsAreReadExactlyFromNumbersAndRfc3339Strings) {
  struct Case {
    std::string_view json;
    int64_t seconds;
    int32_t nanos;
  };
  const Case cases[] = {
      {"1795253152.163", 1795253152, 163000000},
      {"1795253152.163000001", 1795253152, 163000001},
      {"1795253152.1630000000000", 1795253152, 163000000},
      {"1.795253152163e9", 1795253152, 163000000},
      {"17952531521630E-4", 1795253152, 163000000},
      {"1795253152", 1795253152, 0},
      {"0.000000001", 0, 1},
      {"-0.5", -1, 500000000},
      {"-0", 0, 0},
      {"0e99999999999", 0, 0},
      {"-62135596800", -62135596800, 0},
      {"253402300799.999999999", 253402300799, 999999999},
      {"\"2026-11-21T09:25:52.163Z\"", 1795253152, 163000000},
      {"\"2026-11-21T11:25:52.163+02:00\"", 1795253152, 163000000},
      {"\"2026-11-21t09:25:52z\"", 1795253152, 0},
      {"\"1969-12-31T23:59:59.5Z\"", -1, 500000000},
  };
  for (const Case& c : cases) {
    v1::SecondaryStatusTransition transition;
    const std::string json = absl::StrCat("{\"StartTime\":", std::string(c.json), "}");
    ASSERT_TRUE(ParseJson(json, transition).ok()) << json << ": " << ParseJson(json, transition);
    EXPECT_EQ(transition.start_time().seconds(), c.seconds) << json;
    EXPECT_EQ(transition.start_time().nanos(), c.nanos) << json;
  }
}

TEST_F(JsonTest, BadTimestampsAreReported) {
  v1::SecondaryStatusTransition transition;
  const auto error = [&](std::string_view value) {
    const absl::Status status = ParseJson(absl::StrCat("{\"StartTime\":", std::string(value), "}"), transition);
    return std::string(status.message());
  };
  EXPECT_EQ(error("\"yesterday\""),
            "Parameter validation failed:\nInvalid type for parameter StartTime, value: \"yesterday\", "
            "type: string, valid types: number, timestamp-string (RFC 3339 date-time: expected a "
            "4-digit year at character 1, found 'y')");
  EXPECT_EQ(error("\"2026-11-21T09:25:52\""),  // no zone
            "Parameter validation failed:\nInvalid type for parameter StartTime, value: "
            "\"2026-11-21T09:25:52\", type: string, valid types: number, timestamp-string (RFC "
            "3339 date-time: expected the offset: 'Z', or '+' or '-' and hh:mm at character 20, "
            "found the end of the string)");
  EXPECT_EQ(error("1795253152.1630000001"),
            "Parameter validation failed:\nInvalid value for parameter StartTime, value: 1795253152.1630000001, "
            "timestamps take at most 9 fraction digits");
  EXPECT_EQ(error("1e20"),
            "Parameter validation failed:\nInvalid value for parameter StartTime, value: 1e20, out of range for "
            "a timestamp (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z)");
  EXPECT_THAT(error("253402300800"), HasSubstr("out of range for a timestamp"));
  EXPECT_THAT(error("-62135596800.5"), HasSubstr("out of range for a timestamp"));
  EXPECT_THAT(error("1e999999999999"), HasSubstr("out of range for a timestamp"));
  EXPECT_THAT(error("\"10000-01-01T00:00:00Z\""), HasSubstr("valid types: number, timestamp-string"));
  EXPECT_EQ(error("{}"),
            "Parameter validation failed:\nInvalid type for parameter StartTime, value: {}, type: object, "
            "valid types: number, timestamp-string");
}

// RFC 3339, section 5.6, is the grammar of a timestamp-string: what it does
// not allow is refused with the member and the rule, not read leniently.
TEST_F(JsonTest, TimestampStringsFollowRfc3339Exactly) {
  const auto error = [](std::string_view text) {
    v1::SecondaryStatusTransition transition;
    const std::string member = WriteJson(JsonValue::String(std::string(text)));
    const absl::Status status =
        ParseJson(absl::StrCat(R"({"StartTime":)", member, "}"), transition);
    return status.ok() ? "OK" : std::string(status.message());
  };
  struct Case {
    std::string_view text;
    std::string_view rule;  // after "(RFC 3339 date-time: "
  };
  const Case refused[] = {
      // Whitespace: absl::ParseTime skipped it before and after the text.
      {" 2026-11-21T09:25:52Z", "expected a 4-digit year at character 1, found a space"},
      {"2026-11-21T09:25:52Z ", "unexpected text after the offset at character 21, found a space"},
      {"\t2026-11-21T09:25:52Z", "expected a 4-digit year at character 1, found character U+0009"},
      {"2026-11-21T09:25:52Z\n", "unexpected text after the offset at character 21, found "
                                 "character U+000A"},
      {"2026-11-21 09:25:52Z", "expected 'T' between the date and the time at character 11, "
                               "found a space"},
      {"2026-11-21T09:25:52 Z", "expected the offset: 'Z', or '+' or '-' and hh:mm at character "
                                "20, found a space"},
      {"2026-11-21T09:25:52.163 Z", "expected the offset: 'Z', or '+' or '-' and hh:mm at "
                                    "character 24, found a space"},
      // One-digit fields and longer years.
      {"2026-1-21T09:25:52Z", "expected a 2-digit month at character 7, found '-'"},
      {"2026-11-2T09:25:52Z", "expected a 2-digit day at character 10, found 'T'"},
      {"2026-11-21T9:25:52Z", "expected a 2-digit hour at character 13, found ':'"},
      {"2026-11-21T09:25:2Z", "expected 2-digit seconds at character 19, found 'Z'"},
      {"02026-11-21T09:25:52Z", "expected '-' after the year at character 5, found '6'"},
      {"10000-01-01T00:00:00Z", "expected '-' after the year at character 5, found '0'"},
      // Offsets other than Z and +-hh:mm.
      {"2026-11-21T09:25:52+02", "expected ':' in the offset at character 23, found the end of "
                                 "the string"},
      {"2026-11-21T09:25:52+0200", "expected ':' in the offset at character 23, found '0'"},
      {"2026-11-21T09:25:52+02:00:30", "unexpected text after the offset at character 26, "
                                       "found ':'"},
      {"2026-11-21T09:25:52+24:00", "offset hour must be 00-23 at character 21"},
      // Fields out of range, an empty fraction, anything else.
      {"2026-13-01T00:00:00Z", "month must be 01-12 at character 6"},
      {"2026-02-29T00:00:00Z", "day must be 01-28 in 2026-02 at character 9"},
      {"2026-11-21T24:00:00Z", "hour must be 00-23 at character 12"},
      {"2026-11-21T09:60:00Z", "minutes must be 00-59 at character 15"},
      {"2026-11-21T09:25:61Z", "seconds must be 00-60 at character 18"},
      {"2026-11-21T09:25:52.Z", "expected a digit after '.' at character 21, found 'Z'"},
      {"infinite-future", "expected a 4-digit year at character 1, found 'i'"},
      {"2026-11-21T09:25:52\u2028", "expected the offset: 'Z', or '+' or '-' and hh:mm at "
                                     "character 20, found character U+2028"},
  };
  for (const Case& c : refused) {
    const std::string shown =
        JsonForMessage(JsonValue::String(std::string(c.text)));
    EXPECT_EQ(error(c.text),
              absl::StrCat("Parameter validation failed:\nInvalid type for parameter StartTime, "
                           "value: ",
                           shown,
                           ", type: string, valid types: number, timestamp-string (RFC 3339 "
                           "date-time: ",
                           std::string(c.rule), ")"))
        << c.text;
  }
  // What Kiln cannot hold: refused as values, as numbers are.
  EXPECT_EQ(error("2026-11-21T09:25:52.1234567891Z"),
            "Parameter validation failed:\nInvalid value for parameter StartTime, value: "
            "\"2026-11-21T09:25:52.1234567891Z\", timestamps take at most 9 fraction digits");
  EXPECT_EQ(error("0000-12-31T23:59:59Z"),
            "Parameter validation failed:\nInvalid value for parameter StartTime, value: "
            "\"0000-12-31T23:59:59Z\", out of range for a timestamp (0001-01-01T00:00:00Z to "
            "9999-12-31T23:59:59.999999999Z)");
  EXPECT_THAT(error("9999-12-31T23:59:59-00:01"), HasSubstr("out of range for a timestamp"));

  // What the grammar allows, read exactly.
  struct Accepted {
    std::string_view text;
    int64_t seconds;
    int32_t nanos;
  };
  const Accepted accepted[] = {
      {"2026-11-21T09:25:52Z", 1795253152, 0},
      {"2026-11-21t09:25:52z", 1795253152, 0},
      {"2026-11-21T09:25:52.1630000000000Z", 1795253152, 163000000},  // zeros lose nothing
      {"2026-11-21T09:25:52.000000001Z", 1795253152, 1},
      {"2026-11-21T09:25:52-00:00", 1795253152, 0},
      {"2026-11-21T00:25:52-09:00", 1795253152, 0},
      {"2026-11-22T08:25:52+23:00", 1795253152, 0},
      {"2024-02-29T00:00:00Z", 1709164800, 0},
      {"2016-12-31T23:59:60Z", 1483228800, 0},  // a leap second: the next minute's :00
      {"0001-01-01T00:00:00Z", -62135596800, 0},
      {"0000-12-31T23:59:59-01:00", -62135593201, 0},
      {"9999-12-31T23:59:59.999999999Z", 253402300799, 999999999},
  };
  for (const Accepted& a : accepted) {
    v1::SecondaryStatusTransition transition;
    const std::string json = absl::StrCat(R"({"StartTime":")", std::string(a.text), R"("})");
    ASSERT_TRUE(ParseJson(json, transition).ok()) << json << ": " << ParseJson(json, transition);
    EXPECT_EQ(transition.start_time().seconds(), a.seconds) << a.text;
    EXPECT_EQ(transition.start_time().nanos(), a.nanos) << a.text;
  }
}

TEST_F(JsonTest, NonFiniteNumbersAreWrittenAsTheProtocolsStrings) {
  v1::MetricData metric;  // a float member
  metric.set_value(std::numeric_limits<float>::infinity());
  EXPECT_EQ(ToJson(metric), R"({"Value":"Infinity"})");
  metric.set_value(-std::numeric_limits<float>::infinity());
  EXPECT_EQ(ToJson(metric), R"({"Value":"-Infinity"})");
  metric.set_value(std::nanf(""));
  EXPECT_EQ(ToJson(metric), R"({"Value":"NaN"})");
  v1::MetricData back;
  ASSERT_TRUE(ParseJson(ToJson(metric), back).ok());
  EXPECT_TRUE(std::isnan(back.value()));
  ASSERT_TRUE(ParseJson(R"({"Value":"-Infinity"})", back).ok());
  EXPECT_EQ(back.value(), -std::numeric_limits<float>::infinity());
  // The model has no double member; the codec's doubles, on a well-known type.
  google::protobuf::DoubleValue d;
  d.set_value(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(ToJson(d), R"({"value":"-Infinity"})");
  d.set_value(std::nan(""));
  EXPECT_EQ(ToJson(d), R"({"value":"NaN"})");
}

TEST_F(JsonTest, DoublesAreWrittenShortestAndTakeAnyNumber) {
  google::protobuf::DoubleValue d;
  d.set_value(0.1);
  EXPECT_EQ(ToJson(d), R"({"value":0.1})");
  d.set_value(1e300);
  EXPECT_EQ(ToJson(d), R"({"value":1e+300})");
  google::protobuf::DoubleValue back;
  ASSERT_TRUE(ParseJson(R"({"value": 3})", back).ok());  // doubles take integers too
  EXPECT_EQ(back.value(), 3.0);
  ASSERT_TRUE(ParseJson(R"({"value": 0.7634999999999998})", back).ok());
  EXPECT_EQ(ToJson(back), R"({"value":0.7634999999999998})");
}

// The model's "float" is 32 bits (MetricData.Value, the only one): the proto
// keeps a float, so values read as the service holds them and are written as
// it prints them (Java's Float.toString: shortest text that reads back).
TEST_F(JsonTest, FloatMembersAreThirtyTwoBitsAsTheModelSays) {
  const google::protobuf::FieldDescriptor* value =
      v1::MetricData::descriptor()->FindFieldByName("value");
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(value->cpp_type(), google::protobuf::FieldDescriptor::CPPTYPE_FLOAT);

  v1::MetricData metric;
  metric.set_value(0.1f);
  EXPECT_EQ(ToJson(metric), R"({"Value":0.1})");  // not 0.10000000149011612
  metric.set_value(std::numeric_limits<float>::max());
  EXPECT_EQ(ToJson(metric), R"({"Value":3.4028235e+38})");
  metric.set_value(std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(ToJson(metric), R"({"Value":1e-45})");

  const auto read = [](std::string_view json) {
    v1::MetricData m;
    const absl::Status status = ParseJson(absl::StrCat(R"({"Value":)", std::string(json), "}"), m);
    return status.ok() ? ToJson(m) : std::string(status.message());
  };
  // Read rounded to the nearest float, written as the service would.
  EXPECT_EQ(read("0.1"), R"({"Value":0.1})");
  EXPECT_EQ(read("0.123456789"), R"({"Value":0.12345679})");
  EXPECT_EQ(read("0.7634999999999998"), R"({"Value":0.7635})");
  EXPECT_EQ(read("16777217"), R"({"Value":16777216})");
  // FLT_MAX as written above reads back, though 3.4028235e38 > FLT_MAX: it
  // rounds to it. Only what rounds beyond the largest float is refused.
  EXPECT_EQ(read("3.4028235e38"), R"({"Value":3.4028235e+38})");
  EXPECT_EQ(read("-3.40282356e38"), R"({"Value":-3.4028235e+38})");
  const std::string range = "out of range for a float (-3.4028235e+38 to 3.4028235e+38)";
  for (std::string_view big : {"3.4028236e38", "1e39", "-1e39", "1e400"}) {
    EXPECT_EQ(read(big), absl::StrCat("Parameter validation failed:\nInvalid value for parameter "
                                      "Value, value: ",
                                      std::string(big), ", ", range))
        << big;
  }
  // Too small for a float: the nearest float, as for any float parser.
  EXPECT_EQ(read("8e-46"), R"({"Value":1e-45})");
  EXPECT_EQ(read("1e-50"), R"({"Value":0})");
  EXPECT_EQ(read("-1e-400"), R"({"Value":-0})");
}

TEST_F(JsonTest, UnknownMemberIsReportedInBotocoresWords) {
  EXPECT_EQ(CreateError(R"({"InputDataConfig":[{"ChannelName":"train","DataSource":{"Foo":{}}}]})"),
            "Parameter validation failed:\n"
            "Unknown parameter in InputDataConfig[0].DataSource: \"Foo\", must be one of: S3DataSource, "
            "FileSystemDataSource, DatasetSource");
  v1::DescribeTrainingJobRequest request;
  EXPECT_EQ(ParseJson(R"({"TrainingJobName":"a","trainingJobName":"b"})", request).message(),
            "Parameter validation failed:\n"
            "Unknown parameter in input: \"trainingJobName\", must be one of: TrainingJobName");
  // The proto field name is not a member name.
  EXPECT_THAT(ParseJson(R"({"training_job_name":"b"})", request).message(),
              HasSubstr("Unknown parameter in input: \"training_job_name\""));
}

TEST_F(JsonTest, TypeMismatchesAreReportedInBotocoresWords) {
  struct Case {
    std::string_view json;
    std::string_view error;
  };
  const Case cases[] = {
      {R"({"ResourceConfig":{"InstanceCount":"2"}})",
       "Invalid type for parameter ResourceConfig.InstanceCount, value: \"2\", type: string, valid types: integer"},
      {R"({"ResourceConfig":{"InstanceCount":2.5}})",
       "Invalid type for parameter ResourceConfig.InstanceCount, value: 2.5, type: number, valid types: integer"},
      {R"({"ResourceConfig":{"InstanceCount":2.0}})",
       "Invalid type for parameter ResourceConfig.InstanceCount, value: 2.0, type: number, valid types: integer"},
      {R"({"ResourceConfig":{"InstanceCount":1e3}})",
       "Invalid type for parameter ResourceConfig.InstanceCount, value: 1e3, type: number, valid types: integer"},
      {R"({"ResourceConfig":{"InstanceCount":true}})",
       "Invalid type for parameter ResourceConfig.InstanceCount, value: true, type: boolean, valid types: integer"},
      {R"({"EnableManagedSpotTraining":"true"})",
       "Invalid type for parameter EnableManagedSpotTraining, value: \"true\", type: string, valid types: boolean"},
      {R"({"EnableManagedSpotTraining":1})",
       "Invalid type for parameter EnableManagedSpotTraining, value: 1, type: integer, valid types: boolean"},
      {R"({"TrainingJobName":5})",
       "Invalid type for parameter TrainingJobName, value: 5, type: integer, valid types: string"},
      {R"({"TrainingJobName":["a"]})",
       "Invalid type for parameter TrainingJobName, value: [\"a\"], type: array, valid types: string"},
      {R"({"HyperParameters":{"epochs":10}})",
       "Invalid type for parameter HyperParameters.epochs, value: 10, type: integer, valid types: string"},
      {R"({"HyperParameters":{"epochs":null}})",
       "Invalid type for parameter HyperParameters.epochs, value: null, type: null, valid types: string"},
      {R"({"HyperParameters":[]})",
       "Invalid type for parameter HyperParameters, value: [], type: array, valid types: object"},
      {R"({"Tags":{"Key":"a"}})",
       "Invalid type for parameter Tags, value: {\"Key\":\"a\"}, type: object, valid types: array"},
      {R"({"Tags":[{"Key":"a","Value":"b"},"c"]})",
       "Invalid type for parameter Tags[1], value: \"c\", type: string, valid types: object"},
      {R"({"Tags":[null]})", "Invalid type for parameter Tags[0], value: null, type: null, valid types: object"},
      {R"({"VpcConfig":{"Subnets":["a",7]}})",
       "Invalid type for parameter VpcConfig.Subnets[1], value: 7, type: integer, valid types: string"},
      {R"({"ResourceConfig":"ml.m5.xlarge"})",
       "Invalid type for parameter ResourceConfig, value: \"ml.m5.xlarge\", type: string, valid types: object"},
      {R"([])", "Invalid type for parameter input, value: [], type: array, valid types: object"},
      {R"("CreateTrainingJob")",
       "Invalid type for parameter input, value: \"CreateTrainingJob\", type: string, valid types: object"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CreateError(c.json), absl::StrCat("Parameter validation failed:\n", std::string(c.error)))
        << c.json;
  }
}

TEST_F(JsonTest, IntegersOutOfTheFieldsRangeAreReported) {
  EXPECT_EQ(CreateError(R"({"ResourceConfig":{"InstanceCount":2147483648}})"),
            "Parameter validation failed:\nInvalid value for parameter ResourceConfig.InstanceCount, "
            "value: 2147483648, valid range: -2147483648 to 2147483647");
  EXPECT_EQ(CreateError(R"({"InputDataConfig":[{"ShuffleConfig":{"Seed":9223372036854775808}}]})"),
            "Parameter validation failed:\nInvalid value for parameter InputDataConfig[0].ShuffleConfig.Seed, "
            "value: 9223372036854775808, valid range: -9223372036854775808 to 9223372036854775807");
  EXPECT_EQ(CreateError(R"({"ResourceConfig":{"InstanceCount":-2147483648}})"), "OK");
  EXPECT_EQ(CreateError(R"({"InputDataConfig":[{"ShuffleConfig":{"Seed":-9223372036854775808}}]})"), "OK");
  google::protobuf::DoubleValue d;
  EXPECT_EQ(ParseJson(R"({"value":1e400})", d).message(),
            "Parameter validation failed:\nInvalid value for parameter value, value: 1e400, out "
            "of range for a double");
  v1::MetricData metric;
  EXPECT_EQ(ParseJson(R"({"Value":"Inf"})", metric).message(),
            "Parameter validation failed:\nInvalid type for parameter Value, value: \"Inf\", type: string, "
            "valid types: number");
}

TEST_F(JsonTest, AllErrorsOfADocumentAreReportedTogether) {
  const std::string_view json = R"({
    "TrainingJobName": 42,
    "Bogus": true,
    "ResourceConfig": {"InstanceCount": "2", "InstanceGroups": [{"InstanceCount": 1.5, "Colour": "red"}]},
    "InputDataConfig": [{"ChannelName": "train", "DataSource": {"Foo": 1}}],
    "Tags": [{"Key": "k", "Value": false}]
  })";
  EXPECT_EQ(CreateError(json),
            "Parameter validation failed:\n"
            "Unknown parameter in input: \"Bogus\", must be one of: TrainingJobName, HyperParameters, "
            "AlgorithmSpecification, RoleArn, InputDataConfig, OutputDataConfig, ResourceConfig, VpcConfig, "
            "StoppingCondition, Tags, EnableNetworkIsolation, EnableInterContainerTrafficEncryption, "
            "EnableManagedSpotTraining, CheckpointConfig, DebugHookConfig, DebugRuleConfigurations, "
            "TensorBoardOutputConfig, ExperimentConfig, ProfilerConfig, ProfilerRuleConfigurations, Environment, "
            "RetryStrategy, RemoteDebugConfig, InfraCheckConfig, SessionChainingConfig, ServerlessJobConfig, "
            "MlflowConfig, ModelPackageConfig\n"
            "Invalid type for parameter TrainingJobName, value: 42, type: integer, valid types: string\n"
            "Invalid type for parameter ResourceConfig.InstanceCount, value: \"2\", type: string, valid types: "
            "integer\n"
            "Unknown parameter in ResourceConfig.InstanceGroups[0]: \"Colour\", must be one of: InstanceType, "
            "InstanceCount, InstanceGroupName\n"
            "Invalid type for parameter ResourceConfig.InstanceGroups[0].InstanceCount, value: 1.5, type: number, "
            "valid types: integer\n"
            "Unknown parameter in InputDataConfig[0].DataSource: \"Foo\", must be one of: S3DataSource, "
            "FileSystemDataSource, DatasetSource\n"
            "Invalid type for parameter Tags[0].Value, value: false, type: boolean, valid types: string");
}

// A valid CreateTrainingJob request with no list members; `extra` (members
// with a leading comma) is added at the end, `algorithm` to
// AlgorithmSpecification, and `name` is the job's name.
std::string SmallRequest(const std::string& extra, const std::string& algorithm = "",
                         const std::string& name = "job-1") {
  return absl::StrCat(R"({"TrainingJobName":")", name,
                      R"(","RoleArn":"arn:aws:iam::123456789012:role/R",)"
                      R"("OutputDataConfig":{"S3OutputPath":"s3://b/o"},)"
                      R"("AlgorithmSpecification":{"TrainingImage":"i","TrainingInputMode":"File")",
                      algorithm,
                      R"(},"ResourceConfig":{"InstanceType":"ml.m5.large","InstanceCount":1,)"
                      R"("VolumeSizeInGB":10},"StoppingCondition":{"MaxRuntimeInSeconds":3600})",
                      extra, "}");
}

// The error of ParseJson, or of ValidateCreateTrainingJobRequest when the
// document parses: what `kiln validate` says of it.
std::string ParseAndValidate(const std::string& json) {
  v1::CreateTrainingJobRequest request;
  absl::Status status = ParseJson(json, request);
  if (!status.ok()) {
    EXPECT_EQ(request.ByteSizeLong(), 0u) << "message not cleared on error";
  } else {
    status = ValidateCreateTrainingJobRequest(request);
  }
  return status.ok() ? "OK" : std::string(status.message());
}

// A document with a problem per element lists the first
// kMaxReportedViolations lines and counts the rest, so that the message
// stays small however many elements are wrong.
TEST_F(JsonTest, ManyProblemsAreCountedPastTheLimit) {
  constexpr int kElements = 5000;
  std::string json = R"({"AlgorithmSpecification": {"ContainerArguments": [)";
  for (int i = 0; i < kElements; ++i) absl::StrAppend(&json, i == 0 ? "" : ",", i);
  json += "]}}";
  const std::string error = CreateError(json);
  std::vector<std::string> lines = absl::StrSplit(error, '\n');
  ASSERT_EQ(lines.size(), static_cast<size_t>(1 + kMaxReportedViolations + 1)) << error.substr(0, 500);
  EXPECT_EQ(lines[0], "Parameter validation failed:");
  EXPECT_EQ(lines[1],
            "Invalid type for parameter AlgorithmSpecification.ContainerArguments[0], value: 0, "
            "type: integer, valid types: string");
  EXPECT_EQ(lines[kMaxReportedViolations],
            absl::StrCat("Invalid type for parameter AlgorithmSpecification.ContainerArguments[",
                         kMaxReportedViolations - 1, "], value: ", kMaxReportedViolations - 1,
                         ", type: integer, valid types: string"));
  EXPECT_EQ(lines.back(), absl::StrCat("... and ", kElements - kMaxReportedViolations, " more"));
}

// When ParseJson reports an empty list, it reports the request's other
// violations with it, bounded the same way.
TEST_F(JsonTest, EmptyListWithManyViolationsIsCountedPastTheLimit) {
  constexpr int kTags = 300;
  std::string tags;
  for (int i = 0; i < kTags; ++i) absl::StrAppend(&tags, i == 0 ? "" : ",", R"({"Key":"k","Value":"v"})");
  v1::CreateTrainingJobRequest request;
  const absl::Status status = ParseJson(
      SmallRequest(absl::StrCat(R"(,"InputDataConfig":[],"Tags":[)", tags, "]")), request);
  ASSERT_FALSE(status.ok());
  const std::string message(status.message());
  // The empty InputDataConfig, the Tags list's size, each repeated key.
  const int total = 1 + 1 + (kTags - 1);
  EXPECT_THAT(message, testing::StartsWith(absl::StrCat(total, " validation errors detected: ")));
  EXPECT_THAT(message, HasSubstr("Value '[]' at 'inputDataConfig'"));
  EXPECT_THAT(message,
              testing::EndsWith(absl::StrCat("; and ", total - kMaxReportedViolations, " more")));
}

// A list the model requires is always on the wire, `[]` when empty, as the
// service writes a List answer with no job; reading it back, the empty list
// is valid (a message cannot tell it from an absent one).
TEST_F(JsonTest, ARequiredListIsWrittenEvenWhenEmpty) {
  v1::ListTrainingJobsResponse none;
  EXPECT_EQ(ToJson(none), R"({"TrainingJobSummaries":[]})");
  v1::ListTrainingJobsResponse back;
  ASSERT_TRUE(ParseJson(ToJson(none), back).ok());
  EXPECT_TRUE(ValidateRequest(back).ok()) << ValidateRequest(back);
  none.set_next_token("t");
  EXPECT_EQ(ToJson(none), R"({"TrainingJobSummaries":[],"NextToken":"t"})");
  // Lists the model does not require stay out when empty.
  EXPECT_EQ(ToJson(v1::DescribeTrainingJobRequest()), "{}");
  v1::CreateTrainingJobRequest request;
  request.set_training_job_name("a");
  EXPECT_EQ(ToJson(request), R"({"TrainingJobName":"a"})");
}

constexpr char kEmptyInputDataConfig[] =
    "Value '[]' at 'inputDataConfig' failed to satisfy constraint: Member must have length "
    "greater than or equal to 1";

TEST_F(JsonTest, EmptyListIsAViolationOnlyWhereTheModelRequiresElements) {
  ASSERT_EQ(ParseAndValidate(SmallRequest("")), "OK");  // InputDataConfig absent
  // A message cannot hold [] apart from an absent member, so ParseJson reports
  // it, in the validator's words.
  EXPECT_EQ(CreateError(SmallRequest(R"(,"InputDataConfig":[])")),
            absl::StrCat("1 validation error detected: ", kEmptyInputDataConfig));
  // Null, or elements: as before.
  EXPECT_EQ(ParseAndValidate(SmallRequest(R"(,"InputDataConfig":null)")), "OK");
  EXPECT_EQ(ParseAndValidate(SmallRequest(
                R"(,"InputDataConfig":[{"ChannelName":"train","DataSource":{"S3DataSource":)"
                R"({"S3DataType":"S3Prefix","S3Uri":"s3://b/d","InstanceGroupNames":[]}}}])")),
            "OK");
  // Lists and maps without a minimum (no map of the model has one), at the
  // top, nested, and in a list's element (InstanceGroupNames above).
  EXPECT_EQ(ParseAndValidate(SmallRequest(R"(,"Tags":[],"HyperParameters":{},"Environment":{})",
                                          R"(,"MetricDefinitions":[])")),
            "OK");
  // Other requests: UpdateTrainingJob's lists have no minimum.
  v1::UpdateTrainingJobRequest update;
  EXPECT_TRUE(ParseJson(R"({"TrainingJobName":"j","ProfilerRuleConfigurations":[],)"
                        R"("ResourceConfig":{"KeepAlivePeriodInSeconds":60}})",
                        update)
                  .ok());
  EXPECT_TRUE(ValidateRequest(update).ok()) << ValidateRequest(update);
}

TEST_F(JsonTest, EmptyNestedListsAreViolationsInModelOrder) {
  EXPECT_EQ(CreateError(SmallRequest("", R"(,"ContainerEntrypoint":[],"ContainerArguments":[])")),
            "2 validation errors detected: Value '[]' at "
            "'algorithmSpecification.containerEntrypoint' failed to satisfy constraint: Member "
            "must have length greater than or equal to 1; Value '[]' at "
            "'algorithmSpecification.containerArguments' failed to satisfy constraint: Member "
            "must have length greater than or equal to 1");
  EXPECT_EQ(ParseAndValidate(SmallRequest(
                "", R"(,"ContainerEntrypoint":["python3"],"ContainerArguments":["train.py"])")),
            "OK");
  // A required list given empty is too short, not missing; an absent one is
  // missing (and found by the validator).
  EXPECT_EQ(CreateError(SmallRequest(R"(,"VpcConfig":{"SecurityGroupIds":["sg-1"],"Subnets":[]})")),
            "1 validation error detected: Value '[]' at 'vpcConfig.subnets' failed to satisfy "
            "constraint: Member must have length greater than or equal to 1");
  EXPECT_EQ(ParseAndValidate(SmallRequest(R"(,"VpcConfig":{"SecurityGroupIds":["sg-1"]})")),
            "1 validation error detected: Value null at 'vpcConfig.subnets' failed to satisfy "
            "constraint: Member must not be null");
  EXPECT_EQ(ParseAndValidate(
                SmallRequest(R"(,"VpcConfig":{"SecurityGroupIds":["sg-1"],"Subnets":["s-1"]})")),
            "OK");
}

TEST_F(JsonTest, EmptyListIsReportedWithTheRequestsOtherViolations) {
  // The model's constraints in model order, then the cross-field rules: what
  // ValidateCreateTrainingJobRequest says of the rest of the request.
  EXPECT_EQ(CreateError(SmallRequest(R"(,"InputDataConfig":[],"EnableManagedSpotTraining":true)",
                                     "", "a_b")),
            absl::StrCat("3 validation errors detected: Value 'a_b' at 'trainingJobName' failed to "
                         "satisfy constraint: Member must satisfy regular expression pattern: "
                         "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}; ",
                         kEmptyInputDataConfig,
                         "; Value null at 'stoppingCondition.maxWaitTimeInSeconds' failed to "
                         "satisfy constraint: MaxWaitTimeInSeconds is required when "
                         "EnableManagedSpotTraining is true"));
  // botocore's errors come first: with them the request is not sent at all.
  EXPECT_EQ(CreateError(R"({"InputDataConfig":[],"TrainingJobName":5})"),
            "Parameter validation failed:\nInvalid type for parameter TrainingJobName, value: 5, "
            "type: integer, valid types: string");
}

TEST_F(JsonTest, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(CreateError("{\n  \"TrainingJobName\": \"a\",\n  \"RoleArn\": \"r\"\n  \"Tags\": []\n}"),
            "Invalid JSON: line 4, column 3: expected ',' or '}' after object member, found '\"'");
  EXPECT_EQ(CreateError(R"({"TrainingJobName": "a",})"), "Invalid JSON: line 1, column 25: trailing comma before '}'");
  EXPECT_EQ(CreateError(R"({"TrainingJobName": "a", "TrainingJobName": "b"})"),
            "Invalid JSON: line 1, column 26: duplicate key \"TrainingJobName\" in object");
  EXPECT_EQ(CreateError(""), "Invalid JSON: line 1, column 1: unexpected end of input, expected a value");
}

TEST_F(JsonTest, NullMeansAbsent) {
  v1::CreateTrainingJobRequest request;
  ASSERT_TRUE(ParseJson(R"({"TrainingJobName":null,"ResourceConfig":null,"Tags":null,"HyperParameters":null,
                            "CheckpointConfig":{"S3Uri":"s3://b/c","LocalPath":null}})",
                        request)
                  .ok());
  EXPECT_FALSE(request.has_training_job_name());
  EXPECT_FALSE(request.has_resource_config());
  EXPECT_EQ(request.tags_size(), 0);
  EXPECT_TRUE(request.has_checkpoint_config());
  EXPECT_FALSE(request.checkpoint_config().has_local_path());
  EXPECT_EQ(ToJson(request), R"({"CheckpointConfig":{"S3Uri":"s3://b/c"}})");
}

TEST_F(JsonTest, MessageIsClearedOnErrorAndBeforeParsing) {
  v1::CreateTrainingJobRequest request;
  ASSERT_TRUE(ParseJson(kCreateTrainingJob, request).ok());
  // Valid parts come before the error: nothing of them may remain.
  EXPECT_FALSE(ParseJson(R"({"TrainingJobName":"x","Tags":[{"Key":"a"}],"ResourceConfig":{"InstanceCount":"1"}})",
                         request)
                   .ok());
  EXPECT_EQ(request.ByteSizeLong(), 0u);
  EXPECT_FALSE(request.has_training_job_name());
  ASSERT_TRUE(ParseJson(kCreateTrainingJob, request).ok());
  EXPECT_FALSE(ParseJson("{\"TrainingJobName\": \"x\"", request).ok());  // syntax error
  EXPECT_EQ(request.ByteSizeLong(), 0u);
  // A successful parse replaces, never merges.
  ASSERT_TRUE(ParseJson(kCreateTrainingJob, request).ok());
  ASSERT_TRUE(ParseJson(R"({"RoleArn":"r"})", request).ok());
  EXPECT_EQ(ToJson(request), R"({"RoleArn":"r"})");
}

TEST_F(JsonTest, LongValuesInMessagesAreCut) {
  const std::string long_name(500, 'n');
  const std::string message = CreateError(absl::StrCat(R"({"RoleArn":[")", long_name, R"("]})"));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("value: [\"", std::string(198, 'n'), "..., type: array")));
}

// Messages get logged as they are. What they show of the input (member
// names, map keys, values, in botocore's lines and in the validator's) is
// escaped, so that no input adds a line to them or forges one, and cut after
// kMaxJsonInMessage bytes, so that no input makes them long.
TEST_F(JsonTest, InputShownInErrorsIsEscapedAndCut) {
  const auto lines = [](const std::string& message) {
    return std::count(message.begin(), message.end(), '\n') + 1;
  };
  const std::string names =
      ", must be one of: TrainingJobName, HyperParameters, AlgorithmSpecification, RoleArn";
  // A member name that would forge a second error line.
  std::string message = CreateError(R"({"Foo\nInvalid type for parameter RoleArn":1})");
  EXPECT_THAT(message,
              HasSubstr(absl::StrCat(R"(Unknown parameter in input: )",
                                     R"("Foo\nInvalid type for parameter RoleArn")", names)));
  EXPECT_EQ(lines(message), 2);
  // Line breaks beyond C0 (DEL, NEL U+0085, U+2028, U+2029), quotes, backslashes.
  message = CreateError(R"({"a\u2028b\u0085c\u007fd\u2029e\u0000\"\\":1})");
  EXPECT_THAT(message, HasSubstr(R"(input: "a\u2028b\u0085c\u007fd\u2029e\u0000\"\\", must)"));
  EXPECT_EQ(message.find("\xE2\x80\xA8"), std::string::npos);
  EXPECT_EQ(message.find("\xC2\x85"), std::string::npos);
  // A long name: cut, and never inside an escape.
  message = CreateError(absl::StrCat(R"({")", std::string(100000, 'k'), R"(":1})"));
  EXPECT_THAT(message, HasSubstr(absl::StrCat(": \"", std::string(199, 'k'), "...", names)));
  EXPECT_LT(message.size(), 1000u);
  std::string tabs;  // 40 JSON escapes of a tab
  for (int i = 0; i < 40; ++i) tabs += R"(\t)";
  message = CreateError(absl::StrCat(R"({")", std::string(150, 'k'), tabs, R"(":1})"));
  // '"' and 150 k take 151 bytes; 24 escapes (48 bytes) fit in 200, the 25th
  // does not: the cut comes before it, not in it.
  EXPECT_THAT(message, HasSubstr(absl::StrCat(": \"", std::string(150, 'k'), tabs.substr(0, 48),
                                              "...", names)));

  // A map key in a path: as it is when safe, else quoted; values escaped.
  EXPECT_EQ(CreateError(R"({"HyperParameters":{"a\nb":1,"c.d":2},"TrainingJobName":["x\u2028y"]})"),
            "Parameter validation failed:\n"
            "Invalid type for parameter HyperParameters.\"a\\nb\", value: 1, type: integer, "
            "valid types: string\n"
            "Invalid type for parameter HyperParameters.c.d, value: 2, type: integer, "
            "valid types: string\n"
            "Invalid type for parameter TrainingJobName, value: [\"x\\u2028y\"], type: array, "
            "valid types: string");
  message = CreateError(absl::StrCat(R"({"HyperParameters":{")", std::string(5000, 'k'),
                                     R"(":1}})"));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("parameter HyperParameters.\"",
                                              std::string(199, 'k'), "..., value: 1,")));

  // The validator's messages, which ParseJson returns when a list is empty:
  // an enumeration value and a map key, escaped in the service's quotes.
  message = CreateError(SmallRequest(
      R"(,"InputDataConfig":[],"DebugRuleConfigurations":[{"RuleConfigurationName":"r",)"
      R"("RuleEvaluatorImage":"i","InstanceType":"ml.m5.large\n2 validation errors detected: x"}],)"
      R"("HyperParameters":{"k\u2028":")" + std::string(2501, 'v') + R"("})"));
  EXPECT_EQ(lines(message), 1) << message;
  EXPECT_THAT(message, HasSubstr("Value 'ml.m5.large\\n2 validation errors detected: x' at "
                                 "'debugRuleConfigurations.1.member.instanceType' failed to "
                                 "satisfy constraint: Member must satisfy enum value set: ["));
  EXPECT_THAT(message, HasSubstr("Value 'k\\u2028' at 'hyperParameters' failed to satisfy "
                                 "constraint: Map keys must satisfy constraint: [Member must "
                                 "satisfy regular expression pattern: ^.*]"));
  EXPECT_THAT(message, HasSubstr("...' at 'hyperParameters.k\\u2028' failed to satisfy constraint: "
                                 "Member must have length less than or equal to 2500"));
  EXPECT_EQ(message.find("\xE2\x80\xA8"), std::string::npos);
}

TEST_F(JsonTest, InvalidUtf8InStringFieldsStillGivesValidJson) {
  v1::Tag tag;
  tag.set_key("caf\xC3");  // truncated UTF-8
  const std::string written = ToJson(tag);
  EXPECT_EQ(written, "{\"Key\":\"caf\xEF\xBF\xBD\"}");
  EXPECT_TRUE(ParseJsonValue(written).ok());
}

TEST_F(JsonTest, MutatedRequestsNeverCrashAndRoundTripWhenAccepted) {
  const std::string alphabet = "{}[],:\"0123456789-.e\\ aZtrue";
  std::mt19937 rng(7);  // fixed seed: the same cases every run
  int accepted = 0;
  int rejected_by_shape = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text(kCreateTrainingJob);
    const size_t at = rng() % text.size();
    const char c = alphabet[rng() % alphabet.size()];
    switch (rng() % 3) {
      case 0: text[at] = c; break;
      case 1: text.erase(at, 1); break;
      default: text.insert(at, 1, c); break;
    }
    v1::CreateTrainingJobRequest request;
    const absl::Status status = ParseJson(text, request);
    if (!status.ok()) {
      EXPECT_EQ(request.ByteSizeLong(), 0u) << text;
      const std::string message(status.message());
      if (message.rfind("Parameter validation failed:\n", 0) == 0) {
        ++rejected_by_shape;
      } else if (message.find(" detected: Value '[]' at '") != std::string::npos) {
        // an array emptied where the model requires elements
      } else {
        EXPECT_THAT(message, ::testing::StartsWith("Invalid JSON: line ")) << text;
      }
      continue;
    }
    ++accepted;
    v1::CreateTrainingJobRequest back;
    ASSERT_TRUE(ParseJson(ToJson(request), back).ok()) << text;
    EXPECT_TRUE(Equal(request, back)) << text;
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected_by_shape, 10);
}

}  // namespace
}  // namespace kiln
