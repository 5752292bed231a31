#include "kiln/validation.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/internal/shapes.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using v1::CreateTrainingJobRequest;

// A complete, valid container job: every test below changes one thing.
CreateTrainingJobRequest BaseRequest() {
  CreateTrainingJobRequest r;
  const char* text = R"pb(
    training_job_name: "hpo-17"
    role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
    algorithm_specification {
      training_image: "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:latest"
      training_input_mode: "File"
    }
    output_data_config { s3_output_path: "s3://bucket/output" }
    resource_config { instance_type: "ml.m5.xlarge" instance_count: 1 volume_size_in_gb: 30 }
    stopping_condition { max_runtime_in_seconds: 3600 }
    input_data_config {
      channel_name: "train"
      data_source {
        s3_data_source { s3_data_type: "S3Prefix" s3_uri: "s3://bucket/train/" }
      }
    }
  )pb";
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &r));
  return r;
}

std::string Validate(const CreateTrainingJobRequest& r, ValidationOptions options = {}) {
  absl::Status s = ValidateCreateTrainingJobRequest(r, options);
  if (s.ok()) return "OK";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

std::string One(const std::string& message) {
  return absl::StrCat("1 validation error detected: ", message);
}

TEST(ShapeModelTest, CompiledModelHasTheTrainingShapes) {
  const internal::Shape* name = internal::FindShape("TrainingJobName");
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(name->max, 63);
  EXPECT_EQ(name->pattern->text(), "[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}");
  const internal::Shape* type = internal::FindShape("TrainingInstanceType");
  ASSERT_NE(type, nullptr);
  EXPECT_TRUE(type->enum_values->Contains("ml.p4d.24xlarge"));
  EXPECT_FALSE(type->enum_values->Contains("ml.p4d.24xlarg"));
  EXPECT_EQ(internal::FindShape("NoSuchShape"), nullptr);
}

TEST(ShapeModelTest, PatternsAreFullMatchesWithUnicodeClassesAndLookBehind) {
  const auto& tag = *internal::FindShape("TagKey")->pattern;
  EXPECT_TRUE(tag.Matches("Équipe Ünit_1:/=+-@"));
  EXPECT_FALSE(tag.Matches("bad*key"));
  const auto& arn_or_name = *internal::FindShape("ArnOrName")->pattern;
  EXPECT_TRUE(arn_or_name.Matches("my-algo"));
  EXPECT_FALSE(arn_or_name.Matches("my-algo-"));  // (?<!-) look-behind
  const auto& name = *internal::FindShape("TrainingJobName")->pattern;
  EXPECT_FALSE(name.Matches("ok-prefix_then_bad"));  // not a partial match
  EXPECT_FALSE(name.Matches(std::string("a\xff", 2)));  // invalid UTF-8 never matches
  // Java's ASCII-only \p{Alnum} class.
  const auto& lambda = *internal::FindShape("TrainingRepositoryCredentialsProviderArn")->pattern;
  EXPECT_TRUE(lambda.Matches("arn:aws:lambda:us-east-1:123456789012:function:auth"));
  EXPECT_FALSE(lambda.Matches("arn:a_ws:lambda:us-east-1:123456789012:function:auth"));
}

TEST(ValidationTest, BaseRequestIsValid) { EXPECT_EQ(Validate(BaseRequest()), "OK"); }

struct Case {
  const char* name;
  std::function<void(CreateTrainingJobRequest&)> change;
  std::string expected;  // "OK" or the full message
};

class ValidationTableTest : public testing::TestWithParam<Case> {};

TEST_P(ValidationTableTest, GivesExactMessage) {
  CreateTrainingJobRequest r = BaseRequest();
  GetParam().change(r);
  EXPECT_EQ(Validate(r), GetParam().expected);
}

const char kNamePattern[] =
    "Member must satisfy regular expression pattern: ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}";

// A case per entry, laid out by hand.
// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Constraints, ValidationTableTest,
    testing::Values(
        // --- required members
        Case{"RequiredMissing", [](auto& r) { r.clear_role_arn(); },
             One("Value null at 'roleArn' failed to satisfy constraint: Member must not be null")},
        Case{"NestedRequiredMissing",
             [](auto& r) { r.mutable_input_data_config(0)->clear_channel_name(); },
             One("Value null at 'inputDataConfig.1.member.channelName' failed to satisfy "
                 "constraint: Member must not be null")},
        Case{"NestedRequiredPresent", [](auto& r) { r.mutable_retry_strategy()->set_maximum_retry_attempts(3); },
             "OK"},
        Case{"NestedRequiredMissingInOptionalStruct",
             [](auto& r) { r.mutable_retry_strategy(); },
             One("Value null at 'retryStrategy.maximumRetryAttempts' failed to satisfy "
                 "constraint: Member must not be null")},
        // --- string length
        Case{"NameMaxLengthAccepted", [](auto& r) { r.set_training_job_name(std::string(63, 'a')); },
             "OK"},
        Case{"NameTooLong", [](auto& r) { r.set_training_job_name(std::string(64, 'a')); },
             // The {0,62} pattern fails too, and the service reports both.
             absl::StrCat("2 validation errors detected: Value '", std::string(64, 'a'),
                          "' at 'trainingJobName' failed to satisfy constraint: Member must "
                          "have length less than or equal to 63; Value '", std::string(64, 'a'),
                          "' at 'trainingJobName' failed to satisfy constraint: ", kNamePattern)},
        Case{"RoleArnTooShort", [](auto& r) { r.set_role_arn("arn:aws:iam::1:role"); },
             "2 validation errors detected: Value 'arn:aws:iam::1:role' at 'roleArn' failed to "
             "satisfy constraint: Member must have length greater than or equal to 20; Value "
             "'arn:aws:iam::1:role' at 'roleArn' failed to satisfy constraint: Member must satisfy "
             "regular expression pattern: ^arn:aws[a-z\\-]*:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+"},
        // --- patterns (full match)
        Case{"NamePatternRejectsUnderscore", [](auto& r) { r.set_training_job_name("a_b"); },
             One(absl::StrCat("Value 'a_b' at 'trainingJobName' failed to satisfy constraint: ",
                              kNamePattern))},
        Case{"NamePatternRejectsTrailingDash", [](auto& r) { r.set_training_job_name("job-"); },
             One(absl::StrCat("Value 'job-' at 'trainingJobName' failed to satisfy constraint: ",
                              kNamePattern))},
        Case{"NamePatternAcceptsInnerDashes", [](auto& r) { r.set_training_job_name("a--b-1"); },
             "OK"},
        Case{"ChannelNamePattern",
             [](auto& r) { r.mutable_input_data_config(0)->set_channel_name("tr ain"); },
             One("Value 'tr ain' at 'inputDataConfig.1.member.channelName' failed to satisfy "
                 "constraint: Member must satisfy regular expression pattern: "
                 "^[A-Za-z0-9\\.\\-_]+")},
        Case{"S3UriPattern",
             [](auto& r) { r.mutable_output_data_config()->set_s3_output_path("bucket/out"); },
             One("Value 'bucket/out' at 'outputDataConfig.s3OutputPath' failed to satisfy "
                 "constraint: Member must satisfy regular expression pattern: "
                 "^(https|s3)://([^/]+)/?(.*) or ^file://.+")},
        Case{"LocalUriAccepted",
             [](auto& r) { r.mutable_output_data_config()->set_s3_output_path("file:///tmp/out"); },
             "OK"},
        Case{"TagUnicodeAccepted",
             [](auto& r) {
               auto* tag = r.add_tags();
               tag->set_key("équipe");
               tag->set_value("Zürich 1");
             },
             "OK"},
        Case{"TagPatternRejected",
             [](auto& r) {
               auto* tag = r.add_tags();
               tag->set_key("team");
               tag->set_value("a*b");
             },
             One("Value 'a*b' at 'tags.1.member.value' failed to satisfy constraint: Member must "
                 "satisfy regular expression pattern: ^([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)")},
        // --- enums
        Case{"InputModeEnum",
             [](auto& r) { r.mutable_algorithm_specification()->set_training_input_mode("Stream"); },
             One("Value 'Stream' at 'algorithmSpecification.trainingInputMode' failed to satisfy "
                 "constraint: Member must satisfy enum value set: [Pipe, File, FastFile]")},
        Case{"ChannelInputModeEnumAccepted",
             [](auto& r) { r.mutable_input_data_config(0)->set_input_mode("FastFile"); }, "OK"},
        Case{"OutputCompressionEnum",
             [](auto& r) { r.mutable_output_data_config()->set_compression_type("gzip"); },
             One("Value 'gzip' at 'outputDataConfig.compressionType' failed to satisfy "
                 "constraint: Member must satisfy enum value set: [GZIP, NONE]")},
        // --- numeric ranges
        Case{"KeepAliveMaxAccepted",
             [](auto& r) { r.mutable_resource_config()->set_keep_alive_period_in_seconds(21600); },
             "OK"},
        Case{"KeepAliveTooLarge",
             [](auto& r) { r.mutable_resource_config()->set_keep_alive_period_in_seconds(21601); },
             One("Value '21601' at 'resourceConfig.keepAlivePeriodInSeconds' failed to satisfy "
                 "constraint: Member must have value less than or equal to 21600")},
        Case{"MaxRuntimeZero",
             [](auto& r) { r.mutable_stopping_condition()->set_max_runtime_in_seconds(0); },
             One("Value '0' at 'stoppingCondition.maxRuntimeInSeconds' failed to satisfy "
                 "constraint: Member must have value greater than or equal to 1")},
        Case{"MaxPendingTooSmall",
             [](auto& r) { r.mutable_stopping_condition()->set_max_pending_time_in_seconds(60); },
             One("Value '60' at 'stoppingCondition.maxPendingTimeInSeconds' failed to satisfy "
                 "constraint: Member must have value greater than or equal to 7200")},
        Case{"RetryAttemptsTooMany",
             [](auto& r) { r.mutable_retry_strategy()->set_maximum_retry_attempts(31); },
             One("Value '31' at 'retryStrategy.maximumRetryAttempts' failed to satisfy "
                 "constraint: Member must have value less than or equal to 30")},
        // --- list sizes
        Case{"TooManyChannels",
             [](auto& r) {
               for (int i = 0; i < 20; ++i) {
                 auto* c = r.add_input_data_config();
                 *c = r.input_data_config(0);
                 c->set_channel_name(absl::StrCat("c", i));
               }
             },
             One("Value '[...]' at 'inputDataConfig' failed to satisfy constraint: Member must "
                 "have length less than or equal to 20")},
        Case{"TooManySecurityGroups",
             [](auto& r) {
               auto* vpc = r.mutable_vpc_config();
               vpc->add_subnets("subnet-1");
               for (int i = 0; i < 6; ++i) vpc->add_security_group_ids(absl::StrCat("sg-", i));
             },
             One("Value '[sg-0, sg-1, sg-2, sg-3, sg-4, sg-5]' at 'vpcConfig.securityGroupIds' "
                 "failed to satisfy constraint: Member must have length less than or equal to 5")},
        Case{"ListElementConstraint",
             [](auto& r) {
               auto* vpc = r.mutable_vpc_config();
               vpc->add_subnets("subnet_1");
               vpc->add_security_group_ids("sg-1");
             },
             One("Value 'subnet_1' at 'vpcConfig.subnets.1.member' failed to satisfy constraint: "
                 "Member must satisfy regular expression pattern: ^[-0-9a-zA-Z]+")},
        // --- map sizes, keys and values
        Case{"HyperParameterValueTooLong",
             [](auto& r) { (*r.mutable_hyper_parameters())["lr"] = std::string(2501, '1'); },
             One(absl::StrCat("Value '", std::string(256, '1'),
                              "...' at 'hyperParameters.lr' failed to satisfy constraint: Member "
                              "must have length less than or equal to 2500"))},
        Case{"HyperParameterValueAtMaxAccepted",
             [](auto& r) { (*r.mutable_hyper_parameters())["lr"] = std::string(2500, '1'); },
             "OK"},
        Case{"EnvironmentKeyPattern",
             [](auto& r) { (*r.mutable_environment())["1BAD"] = "x"; },
             One("Value '1BAD' at 'environment' failed to satisfy constraint: Map keys must "
                 "satisfy constraint: [Member must satisfy regular expression pattern: "
                 "^[a-zA-Z_][a-zA-Z0-9_]*]")},
        Case{"TooManyHyperParameters",
             [](auto& r) {
               for (int i = 0; i < 101; ++i) (*r.mutable_hyper_parameters())[absl::StrCat("k", i)] = "v";
             },
             One("Value '{101 entries}' at 'hyperParameters' failed to satisfy constraint: "
                 "Member must have length less than or equal to 100")},
        // --- cross-field rules
        Case{"ImageAndAlgorithmName",
             [](auto& r) { r.mutable_algorithm_specification()->set_algorithm_name("xgboost"); },
             One("Invalid value at 'algorithmSpecification': specify either TrainingImage or "
                 "AlgorithmName, not both")},
        Case{"NeitherImageNorAlgorithm",
             [](auto& r) { r.mutable_algorithm_specification()->clear_training_image(); },
             One("Invalid value at 'algorithmSpecification': specify either TrainingImage or "
                 "AlgorithmName")},
        Case{"InstanceTypeAndGroups",
             [](auto& r) {
               auto* g = r.mutable_resource_config()->add_instance_groups();
               g->set_instance_group_name("gpu");
               g->set_instance_type("ml.p3.2xlarge");
               g->set_instance_count(1);
             },
             One("Invalid value at 'resourceConfig': specify either InstanceType and "
                 "InstanceCount, or InstanceGroups, not both")},
        Case{"NoInstancesAtAll",
             [](auto& r) {
               r.mutable_resource_config()->clear_instance_type();
               r.mutable_resource_config()->clear_instance_count();
             },
             One("Invalid value at 'resourceConfig': specify either InstanceType and "
                 "InstanceCount, or InstanceGroups")},
        Case{"MaxWaitWithoutSpot",
             [](auto& r) { r.mutable_stopping_condition()->set_max_wait_time_in_seconds(7200); },
             One("Invalid MaxWaitTimeInSeconds. It is only supported when "
                 "EnableManagedSpotTraining is set to true")},
        Case{"MaxWaitBelowMaxRuntime",
             [](auto& r) {
               r.set_enable_managed_spot_training(true);
               r.mutable_stopping_condition()->set_max_wait_time_in_seconds(1800);
             },
             One("Value '1800' at 'stoppingCondition.maxWaitTimeInSeconds' failed to satisfy "
                 "constraint: MaxWaitTimeInSeconds must be greater than or equal to "
                 "MaxRuntimeInSeconds (3600)")},
        Case{"MaxWaitEqualMaxRuntimeAccepted",
             [](auto& r) {
               r.set_enable_managed_spot_training(true);
               r.mutable_stopping_condition()->set_max_wait_time_in_seconds(3600);
             },
             "OK"},
        Case{"SpotNeedsMaxWait", [](auto& r) { r.set_enable_managed_spot_training(true); },
             One("Value null at 'stoppingCondition.maxWaitTimeInSeconds' failed to satisfy "
                 "constraint: MaxWaitTimeInSeconds is required when EnableManagedSpotTraining is "
                 "true")},
        Case{"KeepAliveWithSpot",
             [](auto& r) {
               r.set_enable_managed_spot_training(true);
               r.mutable_stopping_condition()->set_max_wait_time_in_seconds(3600);
               r.mutable_resource_config()->set_keep_alive_period_in_seconds(600);
             },
             One("Value '600' at 'resourceConfig.keepAlivePeriodInSeconds' failed to satisfy "
                 "constraint: KeepAlivePeriodInSeconds (warm pools) is not supported with "
                 "EnableManagedSpotTraining")},
        Case{"DuplicateChannel",
             [](auto& r) { *r.add_input_data_config() = r.input_data_config(0); },
             One("Value 'train' at 'inputDataConfig.2.member.channelName' failed to satisfy "
                 "constraint: ChannelName must be unique within the job")},
        Case{"ChannelNamedDot",
             [](auto& r) { r.mutable_input_data_config(0)->set_channel_name("."); },
             One("Value '.' at 'inputDataConfig.1.member.channelName' failed to satisfy "
                 "constraint: ChannelName must not be '.' or '..': it names the channel's "
                 "directory in /opt/ml/input/data")},
        Case{"ChannelNamedDotDot",
             [](auto& r) {
               *r.add_input_data_config() = r.input_data_config(0);
               r.mutable_input_data_config(1)->set_channel_name("..");
             },
             One("Value '..' at 'inputDataConfig.2.member.channelName' failed to satisfy "
                 "constraint: ChannelName must not be '.' or '..': it names the channel's "
                 "directory in /opt/ml/input/data")},
        Case{"ChannelNamesWithDotsAreFine",
             [](auto& r) {
               r.mutable_input_data_config(0)->set_channel_name("...");
               *r.add_input_data_config() = r.input_data_config(0);
               r.mutable_input_data_config(1)->set_channel_name(".train");
             },
             "OK"},
        Case{"FastFileWithManifest",
             [](auto& r) {
               auto* c = r.mutable_input_data_config(0);
               c->set_input_mode("FastFile");
               c->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("ManifestFile");
             },
             One("Value 'ManifestFile' at "
                 "'inputDataConfig.1.member.dataSource.s3DataSource.s3DataType' failed to satisfy "
                 "constraint: FastFile input mode supports only S3DataType S3Prefix")},
        Case{"GzipInFileMode",
             [](auto& r) { r.mutable_input_data_config(0)->set_compression_type("Gzip"); },
             One("Value 'Gzip' at 'inputDataConfig.1.member.compressionType' failed to satisfy "
                 "constraint: CompressionType Gzip is supported only in Pipe input mode")},
        Case{"GzipInPipeModeAccepted",
             [](auto& r) {
               r.mutable_input_data_config(0)->set_compression_type("Gzip");
               r.mutable_input_data_config(0)->set_input_mode("Pipe");
             },
             "OK"},
        Case{"GroupNamesWithoutGroups",
             [](auto& r) {
               r.mutable_input_data_config(0)
                   ->mutable_data_source()
                   ->mutable_s3_data_source()
                   ->add_instance_group_names("gpu");
             },
             One("Value 'gpu' at "
                 "'inputDataConfig.1.member.dataSource.s3DataSource.instanceGroupNames.1.member' "
                 "failed to satisfy constraint: InstanceGroupNames requires "
                 "ResourceConfig.InstanceGroups")},
        Case{"FileChannelNamedAsAPipeChannelsFifo",
             [](auto& r) {
               r.mutable_input_data_config(0)->set_channel_name("train_1");
               auto* pipe = r.add_input_data_config();
               *pipe = r.input_data_config(0);
               pipe->set_channel_name("train");
               pipe->set_input_mode("Pipe");
             },
             One("Invalid value at 'inputDataConfig.1.member.channelName': channels 'train_1' "
                 "(File mode) and 'train' (Pipe mode) collide in /opt/ml/input/data: 'train_1' "
                 "is both the directory of channel 'train_1' and the FIFO of channel 'train' for "
                 "epoch 1 (Pipe mode names its FIFOs <channel>_<epoch>); rename one of the "
                 "channels")},
        // The channel's InputMode overrides TrainingInputMode, either way.
        Case{"FastFileChannelNamedAsTheDefaultPipeChannelsFirstFifo",
             [](auto& r) {
               r.mutable_algorithm_specification()->set_training_input_mode("Pipe");
               auto* fast = r.add_input_data_config();
               *fast = r.input_data_config(0);
               fast->set_channel_name("train_0");
               fast->set_input_mode("FastFile");
             },
             One("Invalid value at 'inputDataConfig.2.member.channelName': channels 'train_0' "
                 "(FastFile mode) and 'train' (Pipe mode) collide in /opt/ml/input/data: "
                 "'train_0' is both the directory of channel 'train_0' and the FIFO of channel "
                 "'train' for epoch 0 (Pipe mode names its FIFOs <channel>_<epoch>); rename one "
                 "of the channels")},
        Case{"MetricRegexInvalid",
             [](auto& r) {
               auto* m = r.mutable_algorithm_specification()->add_metric_definitions();
               m->set_name("loss");
               m->set_regex("loss=([0-9.]+");
             },
             One("Value 'loss=([0-9.]+' at "
                 "'algorithmSpecification.metricDefinitions.1.member.regex' failed to satisfy "
                 "constraint: Member must be a valid regular expression: missing closing "
                 "parenthesis at offset 13")},
        Case{"MetricRegexLazyAccepted",
             [](auto& r) {
               auto* m = r.mutable_algorithm_specification()->add_metric_definitions();
               m->set_name("train:error");
               m->set_regex("Train_error=(.*?);");
             },
             "OK"},
        Case{"DuplicateTagKeys",
             [](auto& r) {
               for (int i = 0; i < 2; ++i) {
                 auto* tag = r.add_tags();
                 tag->set_key("team");
                 tag->set_value("a");
               }
             },
             One("Value 'team' at 'tags.2.member.key' failed to satisfy constraint: Tag keys "
                 "must be unique")}),
    [](const testing::TestParamInfo<Case>& p) { return p.param.name; });
// clang-format on

TEST(ValidationTest, AllViolationsAreReportedAtOnceInModelOrder) {
  CreateTrainingJobRequest r = BaseRequest();
  r.set_training_job_name("a_b");
  r.clear_role_arn();
  r.mutable_stopping_condition()->set_max_wait_time_in_seconds(7200);
  EXPECT_EQ(Validate(r),
            "3 validation errors detected: Value 'a_b' at 'trainingJobName' failed to satisfy "
            "constraint: Member must satisfy regular expression pattern: "
            "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}; Value null at 'roleArn' failed to satisfy "
            "constraint: Member must not be null; Invalid MaxWaitTimeInSeconds. It is only "
            "supported when EnableManagedSpotTraining is set to true");
}

// A request with a violation per element (here 20,000 tags, each key
// repeated) lists the first kMaxReportedViolations and counts the rest, in
// the model's order and then the cross-field rules', so the message stays
// small.
TEST(ValidationTest, ManyViolationsAreCountedPastTheLimit) {
  CreateTrainingJobRequest r = BaseRequest();
  constexpr int kTags = 20000;
  for (int i = 0; i < kTags; ++i) {
    v1::Tag* t = r.add_tags();
    t->set_key(std::string(100, 'k'));
    t->set_value("v");
  }
  const std::string message = Validate(r);
  // One for the list's size, one per repeated key after the first.
  const int total = 1 + (kTags - 1);
  EXPECT_EQ(message.substr(0, message.find(':')),
            absl::StrCat(total, " validation errors detected"));
  EXPECT_TRUE(message.starts_with(
      absl::StrCat(total, " validation errors detected: Value '[...]' at 'tags' failed to "
                          "satisfy constraint: Member must have length less than or equal to 50; "
                          "Value '")))
      << message.substr(0, 300);
  const std::string tail = absl::StrCat("; and ", total - kMaxReportedViolations, " more");
  EXPECT_TRUE(message.ends_with(tail)) << message.substr(message.size() - 300);
  // The messages listed: kMaxReportedViolations of them, the separators between.
  size_t separators = 0;
  for (size_t at = message.find("; "); at != std::string::npos; at = message.find("; ", at + 2)) {
    ++separators;
  }
  // 99 between the messages, 1 before "and N more".
  EXPECT_EQ(separators, static_cast<size_t>(kMaxReportedViolations));
  EXPECT_LT(message.size(), 100000u);
}

TEST(ValidationTest, ExactlyTheLimitIsListedWhole) {
  std::vector<ValidationError> errors(kMaxReportedViolations, ValidationError{"p", "m"});
  std::string want = absl::StrCat(kMaxReportedViolations, " validation errors detected: m");
  for (int i = 1; i < kMaxReportedViolations; ++i) want += "; m";
  EXPECT_EQ(FormatValidationErrors(errors), want);
  errors.push_back(ValidationError{"p", "last"});
  EXPECT_EQ(FormatValidationErrors(errors),
            absl::StrCat(kMaxReportedViolations + 1, " validation errors detected: ",
                         want.substr(want.find(": ") + 2), "; and 1 more"));
}

TEST(ValidationTest, CheckShapeConstraintsReturnsTheFirstViolations) {
  CreateTrainingJobRequest r = BaseRequest();
  for (int i = 0; i < 500; ++i) r.add_tags()->set_key("bad*key");
  const std::vector<ValidationError> errors = CheckShapeConstraints(r);
  ASSERT_EQ(errors.size(), static_cast<size_t>(kMaxReportedViolations));
  EXPECT_EQ(errors[0].path, "tags");
  EXPECT_EQ(errors[1].path, "tags.1.member.key");
}

TEST(ValidationTest, HeterogeneousJobWithPerGroupChannelsIsValid) {
  CreateTrainingJobRequest r = BaseRequest();
  auto* rc = r.mutable_resource_config();
  rc->clear_instance_type();
  rc->clear_instance_count();
  for (const char* name : {"gpu", "cpu"}) {
    auto* g = rc->add_instance_groups();
    g->set_instance_group_name(name);
    g->set_instance_type("ml.c5.xlarge");
    g->set_instance_count(2);
  }
  r.mutable_input_data_config(0)
      ->mutable_data_source()
      ->mutable_s3_data_source()
      ->add_instance_group_names("cpu");
  EXPECT_EQ(Validate(r), "OK");
  r.mutable_input_data_config(0)
      ->mutable_data_source()
      ->mutable_s3_data_source()
      ->add_instance_group_names("tpu");
  EXPECT_EQ(Validate(r),
            One("Value 'tpu' at "
                "'inputDataConfig.1.member.dataSource.s3DataSource.instanceGroupNames.2.member' "
                "failed to satisfy constraint: InstanceGroupNames must name an instance group "
                "declared in ResourceConfig.InstanceGroups"));
  rc->set_keep_alive_period_in_seconds(60);
  EXPECT_NE(Validate(r).find("KeepAlivePeriodInSeconds (warm pools) is not supported with "
                             "InstanceGroups"),
            std::string::npos);
}

// Adds to `r` a channel `name` in input mode `mode` ("" for the job's).
void AddChannel(CreateTrainingJobRequest& r, const std::string& name, const std::string& mode) {
  v1::Channel* c = r.add_input_data_config();
  *c = r.input_data_config(0);
  c->set_channel_name(name);
  if (mode.empty()) {
    c->clear_input_mode();
  } else {
    c->set_input_mode(mode);
  }
}

// A Pipe channel's FIFOs are <channel>_<epoch>, the epoch in decimal without
// sign or leading zero, below 2^64: only such names are refused.
TEST(ValidationTest, OnlyADirectoryNamedExactlyAsAFifoCollides) {
  CreateTrainingJobRequest r = BaseRequest();
  r.mutable_input_data_config(0)->set_input_mode("Pipe");  // "train"
  for (const char* name : {"train_01", "train_x", "train_", "train_+1", "train_ 1", "train_1_",
                           "train_18446744073709551616", "tra_1", "rain_1"}) {
    SCOPED_TRACE(name);
    CreateTrainingJobRequest with = r;
    AddChannel(with, name, "File");
    const std::string message = Validate(with);
    EXPECT_EQ(message.find("collide"), std::string::npos) << message;
  }
  // Two Pipe channels never meet (a_1_<e> is never a_<e>), nor two
  // directories with different names.
  CreateTrainingJobRequest pipes = r;
  AddChannel(pipes, "train_1", "Pipe");
  EXPECT_EQ(Validate(pipes), "OK");
  CreateTrainingJobRequest files = BaseRequest();
  AddChannel(files, "train_1", "");
  EXPECT_EQ(Validate(files), "OK");
  // The largest epoch does, and every collision is reported.
  AddChannel(r, "train_18446744073709551615", "File");
  AddChannel(r, "train_7", "FastFile");
  const std::string message = Validate(r);
  EXPECT_EQ(message.find("2 validation errors detected: Invalid value at "
                         "'inputDataConfig.2.member.channelName': channels "
                         "'train_18446744073709551615' (File mode) and 'train' (Pipe mode)"),
            0u)
      << message;
  EXPECT_NE(message.find("Invalid value at 'inputDataConfig.3.member.channelName': channels "
                         "'train_7' (FastFile mode) and 'train' (Pipe mode)"),
            std::string::npos)
      << message;
}

// Channels collide only if some instance receives both: one without
// InstanceGroupNames reaches every instance.
TEST(ValidationTest, ChannelsCollideOnlyWhereTheirInstanceGroupsMeet) {
  CreateTrainingJobRequest r = BaseRequest();
  auto* rc = r.mutable_resource_config();
  rc->clear_instance_type();
  rc->clear_instance_count();
  for (const char* name : {"gpu", "cpu", "io"}) {
    auto* g = rc->add_instance_groups();
    g->set_instance_group_name(name);
    g->set_instance_type("ml.c5.xlarge");
    g->set_instance_count(1);
  }
  auto groups = [&](int channel, std::vector<std::string> names) {
    auto* s3 =
        r.mutable_input_data_config(channel)->mutable_data_source()->mutable_s3_data_source();
    s3->clear_instance_group_names();
    for (const std::string& n : names) s3->add_instance_group_names(n);
  };
  AddChannel(r, "train_2", "File");
  r.mutable_input_data_config(0)->set_input_mode("Pipe");  // "train"
  groups(0, {"gpu"});
  groups(1, {"cpu", "io"});
  EXPECT_EQ(Validate(r), "OK");
  groups(1, {"cpu", "gpu"});
  EXPECT_NE(Validate(r).find("channels 'train_2' (File mode) and 'train' (Pipe mode) collide"),
            std::string::npos);
  groups(1, {});
  EXPECT_NE(Validate(r), "OK");
  groups(0, {});
  groups(1, {"io"});
  EXPECT_NE(Validate(r), "OK");
}

// The names a collision shows are input: escaped like any value shown.
TEST(ValidationTest, CollidingChannelNamesAreEscapedInTheMessage) {
  CreateTrainingJobRequest r = BaseRequest();
  r.mutable_input_data_config(0)->set_channel_name("a\nb");
  r.mutable_input_data_config(0)->set_input_mode("Pipe");
  AddChannel(r, "a\nb_1", "File");
  const std::string message = Validate(r);
  EXPECT_NE(message.find("Invalid value at 'inputDataConfig.2.member.channelName': channels "
                         "'a\\nb_1' (File mode) and 'a\\nb' (Pipe mode) collide"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ValidationTest, LocalUrisCanBeTurnedOff) {
  CreateTrainingJobRequest r = BaseRequest();
  r.mutable_output_data_config()->set_s3_output_path("file:///tmp/out");
  ValidationOptions strict;
  strict.allow_local_uris = false;
  EXPECT_EQ(Validate(r, strict),
            One("Value 'file:///tmp/out' at 'outputDataConfig.s3OutputPath' failed to satisfy "
                "constraint: Member must satisfy regular expression pattern: "
                "^(https|s3)://([^/]+)/?(.*)"));
}

TEST(ValidationTest, LengthCountsUtf16UnitsLikeTheService) {
  CreateTrainingJobRequest r = BaseRequest();
  auto* t = r.add_tags();
  // 128 characters, each one UTF-16 unit but two UTF-8 bytes: at the limit.
  std::string key;
  for (int i = 0; i < 128; ++i) key += "é";
  t->set_key(key);
  t->set_value("v");
  EXPECT_EQ(Validate(r), "OK");
}

// The model's patterns are Java regexes, and Java's `.` matches any character
// but a line terminator: \n, \r, U+0085, U+2028 and U+2029 (not only \n, as
// in PCRE2). Other control characters are ordinary characters to it.
TEST(ValidationTest, PatternDotRejectsEveryJavaLineTerminator) {
  const std::string dot_pattern = "Member must satisfy regular expression pattern: ^.*";
  // Each terminator, and how the message shows it (escaped: see
  // InputInMessagesCannotBreakTheLine).
  const std::pair<std::string, std::string> terminators[] = {
      {"\n", "\\n"},           {"\r", "\\r"},           {"\r\n", "\\r\\n"},
      {"\xc2\x85", "\\u0085"}, {"\xe2\x80\xa8", "\\u2028"}, {"\xe2\x80\xa9", "\\u2029"}};
  for (const auto& [terminator, shown] : terminators) {
    SCOPED_TRACE(absl::CEscape(terminator));
    CreateTrainingJobRequest r = BaseRequest();
    (*r.mutable_hyper_parameters())["lr"] = "x" + terminator + "y";
    EXPECT_EQ(Validate(r), One(absl::StrCat("Value 'x", shown,
                                            "y' at 'hyperParameters.lr' failed to satisfy "
                                            "constraint: ",
                                            dot_pattern)));
    // A pattern decided by an automaton: (https|s3)://([^/]+)/?(.*).
    r = BaseRequest();
    r.mutable_output_data_config()->set_s3_output_path("s3://bucket/a" + terminator + "b");
    EXPECT_NE(Validate(r).find("at 'outputDataConfig.s3OutputPath' failed to satisfy"),
              std::string::npos);
  }
  for (const std::string& other : std::vector<std::string>{
           "\t", "\v", "\f", std::string("\0", 1), "\xc2\xa0", "\xe2\x80\x8b"}) {
    SCOPED_TRACE(absl::CEscape(other));
    CreateTrainingJobRequest r = BaseRequest();
    (*r.mutable_hyper_parameters())["lr"] = "x" + other + "y";
    r.mutable_output_data_config()->set_s3_output_path("s3://bucket/a" + other + "b");
    EXPECT_EQ(Validate(r), "OK");
  }
  // A line terminator where the pattern has a class, not a dot, is fine:
  // [^/]+ takes the bucket's \r.
  CreateTrainingJobRequest r = BaseRequest();
  r.mutable_output_data_config()->set_s3_output_path("s3://buck\ret/key");
  EXPECT_EQ(Validate(r), "OK");
  // Kiln's own `file://.+` follows the same rule.
  r.mutable_output_data_config()->set_s3_output_path("file:///tmp/a\xe2\x80\xa8" "b");
  EXPECT_NE(Validate(r), "OK");
}

// Messages get logged as they are. A value or map key they show is escaped
// (control characters JSON-style, U+2028/U+2029, bytes that are not UTF-8),
// so that none can break the line or forge another one, and cut.
TEST(ValidationTest, InputInMessagesCannotBreakTheLine) {
  CreateTrainingJobRequest r = BaseRequest();
  r.mutable_algorithm_specification()->set_training_input_mode(
      "File\n1 validation error detected: Value 'x'");
  EXPECT_EQ(Validate(r),
            One("Value 'File\\n1 validation error detected: Value 'x'' at "
                "'algorithmSpecification.trainingInputMode' failed to satisfy constraint: Member "
                "must satisfy enum value set: [Pipe, File, FastFile]"));
  // A map key, both as a value and in a path; quotes and backslashes stay as
  // the service shows them.
  r = BaseRequest();
  (*r.mutable_hyper_parameters())["a\x85\xE2\x80\xA8\tb\\'"] = std::string(2501, 'v');
  EXPECT_EQ(Validate(r),
            absl::StrCat("2 validation errors detected: Value 'a\\x85\\u2028\\tb\\'' at "
                         "'hyperParameters' failed to satisfy constraint: Map keys must satisfy "
                         "constraint: [Member must satisfy regular expression pattern: ^.*]; "
                         "Value '",
                         std::string(256, 'v'),
                         "...' at 'hyperParameters.a\\x85\\u2028\\tb\\'' failed to satisfy "
                         "constraint: Member must have length less than or equal to 2500"));
  // A long key in a path is cut too (after 1024 bytes).
  r = BaseRequest();
  (*r.mutable_hyper_parameters())[std::string(5000, 'k')] = std::string(2501, 'v');
  const std::string message = Validate(r);
  EXPECT_NE(message.find(absl::StrCat("at 'hyperParameters.", std::string(1024 - 16, 'k'),
                                      "...' failed")),
            std::string::npos)
      << message;
  EXPECT_LT(message.size(), 2000u);
}

// A string no pattern constrains must still be text: the service's JSON
// cannot carry other bytes, and a request holding them does not survive
// protobuf serialization (proto3 strings are UTF-8).
TEST(ValidationTest, StringWithoutPatternMustBeValidUtf8) {
  CreateTrainingJobRequest r = BaseRequest();
  auto* spec = r.mutable_resource_config()
                   ->mutable_instance_placement_config()
                   ->add_placement_specifications();
  spec->set_instance_count(1);
  spec->set_ultra_server_id("us-\xc3\xa9");
  EXPECT_EQ(Validate(r), "OK");
  spec->set_ultra_server_id("us-\xc3");
  EXPECT_EQ(Validate(r),
            One("Value 'us-\\xC3' at "
                "'resourceConfig.instancePlacementConfig.placementSpecifications.1.member."
                "ultraServerId' failed to satisfy constraint: Member must be valid UTF-8"));
}

TEST(ValidationTest, OtherRequestsAreCheckedAgainstTheModel) {
  v1::ListTrainingJobsRequest list;
  list.set_max_results(101);
  list.set_status_equals("Running");
  absl::Status s = ValidateRequest(list);
  EXPECT_EQ(s.message(),
            "2 validation errors detected: Value '101' at 'maxResults' failed to satisfy "
            "constraint: Member must have value less than or equal to 100; Value 'Running' at "
            "'statusEquals' failed to satisfy constraint: Member must satisfy enum value set: "
            "[InProgress, Completed, Failed, Stopping, Stopped, Deleting]");
  v1::UpdateTrainingJobRequest update;
  update.set_training_job_name("job");
  update.mutable_resource_config();
  EXPECT_EQ(ValidateRequest(update).message(),
            "1 validation error detected: Value null at "
            "'resourceConfig.keepAlivePeriodInSeconds' failed to satisfy constraint: Member must "
            "not be null");
  update.mutable_resource_config()->set_keep_alive_period_in_seconds(0);
  EXPECT_TRUE(ValidateRequest(update).ok());
}

// The overloads per request type (what the engine calls) give what the
// overload for any message gives, valid or not.
TEST(ValidationTest, TypedOverloadsAgreeWithTheGenericOne) {
  auto generic = [](const google::protobuf::Message& m) { return ValidateRequest(m); };
  v1::DescribeTrainingJobRequest describe;
  describe.set_training_job_name("job-1");
  EXPECT_TRUE(ValidateRequest(describe).ok());
  describe.set_training_job_name("-bad name");
  EXPECT_FALSE(ValidateRequest(describe).ok());
  EXPECT_EQ(ValidateRequest(describe), generic(describe));
  v1::DescribeTrainingJobRequest unnamed;
  EXPECT_EQ(ValidateRequest(unnamed).message(),
            "1 validation error detected: Value null at 'trainingJobName' failed to satisfy "
            "constraint: Member must not be null");
  EXPECT_EQ(ValidateRequest(unnamed), generic(unnamed));

  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name(std::string(64, 'a'));
  EXPECT_FALSE(ValidateRequest(stop).ok());
  EXPECT_EQ(ValidateRequest(stop), generic(stop));
  v1::DeleteTrainingJobRequest del;
  del.set_training_job_name("job_1");
  EXPECT_FALSE(ValidateRequest(del).ok());
  EXPECT_EQ(ValidateRequest(del), generic(del));
  del.set_training_job_name("job-1");
  EXPECT_TRUE(ValidateRequest(del).ok());

  v1::ListTrainingJobsRequest list;
  list.set_max_results(0);
  EXPECT_FALSE(ValidateRequest(list).ok());
  EXPECT_EQ(ValidateRequest(list), generic(list));
  v1::UpdateTrainingJobRequest update;
  update.set_training_job_name("job");
  update.mutable_resource_config();
  EXPECT_EQ(ValidateRequest(update), generic(update));

  v1::CreateTrainingJobRequest create;
  EXPECT_FALSE(ValidateRequest(create).ok());
  EXPECT_EQ(ValidateRequest(create), generic(create));
}

}  // namespace
}  // namespace kiln
