// The toolkit's encodings (Python's json.dumps, str and repr of JSON-decoded
// hyperparameters) and the container's config files. The full environment is
// checked against Python itself by contract_check.py in the provider tests.
#include "local/internal/container_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "local/local_test_util.h"

namespace kiln::local::internal {
namespace {

TEST(PyFloatReprTest, MatchesPythonRepr) {
  EXPECT_EQ(PyFloatRepr(0.1), "0.1");
  EXPECT_EQ(PyFloatRepr(2.5), "2.5");
  EXPECT_EQ(PyFloatRepr(100.0), "100.0");
  EXPECT_EQ(PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PyFloatRepr(1.5e16), "1.5e+16");
  EXPECT_EQ(PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PyFloatRepr(1e-5), "1e-05");
  EXPECT_EQ(PyFloatRepr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(PyFloatRepr(1e300), "1e+300");
  EXPECT_EQ(PyFloatRepr(0.0), "0.0");
  EXPECT_EQ(PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PyFloatRepr(123456.789), "123456.789");
}

TEST(PyJsonDumpsTest, DecodedHyperparametersAreWrittenAsPythonWould) {
  auto dumps = [](const char* raw) { return PyJsonDumps(DecodeHyperparameter(raw)); };
  EXPECT_EQ(dumps("10"), "10");
  EXPECT_EQ(dumps("-0"), "0");
  EXPECT_EQ(dumps("1E5"), "100000.0");
  EXPECT_EQ(dumps("1e400"), "Infinity");
  EXPECT_EQ(dumps("true"), "true");
  EXPECT_EQ(dumps("null"), "null");
  EXPECT_EQ(dumps("plain text"), "\"plain text\"");
  EXPECT_EQ(dumps("{\"b\": [1, 2.50], \"a\": {\"z\": null}}"), "{\"a\":{\"z\":null},\"b\":[1,2.5]}");
  // ensure_ascii: \u escapes, surrogate pairs beyond the BMP.
  EXPECT_EQ(dumps("\"caf\xc3\xa9 \xf0\x9f\x98\x80\""), "\"caf\\u00e9 \\ud83d\\ude00\"");
  EXPECT_EQ(dumps("\"tab\\tnl\\n\\u0001\""), "\"tab\\tnl\\n\\u0001\"");
}

TEST(ToEnvValueTest, StringsRawNoneEmptyOthersJson) {
  EXPECT_EQ(ToEnvValue(DecodeHyperparameter("\"resnet\"")), "resnet");
  EXPECT_EQ(ToEnvValue(DecodeHyperparameter("resnet")), "resnet");
  EXPECT_EQ(ToEnvValue(DecodeHyperparameter("null")), "");
  EXPECT_EQ(ToEnvValue(DecodeHyperparameter("0.10")), "0.1");
  EXPECT_EQ(ToEnvValue(DecodeHyperparameter("[1, \"a\"]")), "[1,\"a\"]");
}

TEST(PyStrTest, MatchesPythonStr) {
  EXPECT_EQ(PyStr(DecodeHyperparameter("true")), "True");
  EXPECT_EQ(PyStr(DecodeHyperparameter("[1, \"a\", null, 2.0]")), "[1, 'a', None, 2.0]");
  EXPECT_EQ(PyStr(DecodeHyperparameter("{\"k\": \"it's\"}")), "{'k': \"it's\"}");
  EXPECT_EQ(PyStr(DecodeHyperparameter("1e-5")), "1e-05");
}

class BuildContainerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    request_.set_training_job_name("job");
    request_.mutable_algorithm_specification()->set_training_input_mode("File");
    (*request_.mutable_hyper_parameters())["lr"] = "0.1";
    (*request_.mutable_hyper_parameters())["sagemaker_program"] = "\"train.py\"";
    (*request_.mutable_environment())["FOO"] = "bar";
    v1::Channel* a = request_.add_input_data_config();
    a->set_channel_name("train");
    a->set_content_type("text/csv");
    a->mutable_data_source()->mutable_s3_data_source()->set_s3_data_distribution_type(
        "ShardedByS3Key");
    v1::Channel* b = request_.add_input_data_config();
    b->set_channel_name("cpu-only");
    b->set_input_mode("Pipe");
    b->mutable_data_source()->mutable_s3_data_source()->add_instance_group_names("cpu");
    cluster_.instances = {{"c/algo-1", "algo-1", "gpu", "ml.p4d.24xlarge"},
                          {"c/algo-2", "algo-2", "cpu", "ml.c5.xlarge"},
                          {"c/algo-3", "algo-3", "gpu", "ml.p4d.24xlarge"}};
  }

  ContainerConfig Build(int index) {
    ContainerConfigInput in;
    in.request = &request_;
    in.job_name = "job";
    in.job_arn = "arn:aws:sagemaker:eu-west-1:000000000000:training-job/job";
    in.cluster = &cluster_;
    in.instance = &cluster_.instances[index];
    in.base_dir = "/opt/ml";
    in.program_dir = "/opt/program";
    in.tmp_dir = "/tmp";
    in.cpu_count = 4;
    in.network_interface_name = "lo";
    in.host_path = "/usr/bin:/bin";
    return BuildContainerConfig(in);
  }

  v1::CreateTrainingJobRequest request_;
  Cluster cluster_;
};

TEST_F(BuildContainerConfigTest, ResourceConfigHasTheGroupFacts) {
  ContainerConfig c = Build(2);
  EXPECT_EQ(c.resourceconfig_json,
            "{\"current_host\":\"algo-3\",\"current_instance_type\":\"ml.p4d.24xlarge\","
            "\"current_group_name\":\"gpu\",\"hosts\":[\"algo-1\",\"algo-2\",\"algo-3\"],"
            "\"instance_groups\":[{\"instance_group_name\":\"gpu\",\"instance_type\":"
            "\"ml.p4d.24xlarge\",\"hosts\":[\"algo-1\",\"algo-3\"]},{\"instance_group_name\":"
            "\"cpu\",\"instance_type\":\"ml.c5.xlarge\",\"hosts\":[\"algo-2\"]}],"
            "\"network_interface_name\":\"lo\"}");
  EXPECT_EQ(c.env["SM_CURRENT_INSTANCE_GROUP_HOSTS"], "[\"algo-1\",\"algo-3\"]");
  EXPECT_EQ(c.env["SM_INSTANCE_GROUPS"], "[\"gpu\",\"cpu\"]");
  EXPECT_EQ(c.env["SM_IS_HETERO"], "true");
  EXPECT_EQ(c.env["SM_HOSTS"], "[\"algo-1\",\"algo-2\",\"algo-3\"]");
}

TEST_F(BuildContainerConfigTest, ChannelsGoOnlyToTheirGroups) {
  ContainerConfig gpu = Build(0);
  EXPECT_EQ(gpu.inputdataconfig_json,
            "{\"train\":{\"ContentType\":\"text/csv\",\"TrainingInputMode\":\"File\","
            "\"S3DistributionType\":\"ShardedByS3Key\",\"RecordWrapperType\":\"None\"}}");
  EXPECT_EQ(gpu.env["SM_CHANNELS"], "[\"train\"]");
  EXPECT_EQ(gpu.env.count("SM_CHANNEL_CPU-ONLY"), 0u);
  ContainerConfig cpu = Build(1);
  EXPECT_EQ(cpu.env["SM_CHANNELS"], "[\"cpu-only\",\"train\"]");
  EXPECT_EQ(cpu.env["SM_CHANNEL_CPU-ONLY"], "/opt/ml/input/data/cpu-only");
  EXPECT_THAT(cpu.inputdataconfig_json, ::testing::HasSubstr("\"TrainingInputMode\":\"Pipe\""));
}

TEST_F(BuildContainerConfigTest, PlatformVariablesAndEnvironment) {
  ContainerConfig c = Build(0);
  EXPECT_EQ(c.env["TRAINING_JOB_NAME"], "job");
  EXPECT_EQ(c.env["TRAINING_JOB_ARN"], "arn:aws:sagemaker:eu-west-1:000000000000:training-job/job");
  EXPECT_EQ(c.env["AWS_REGION"], "eu-west-1");
  EXPECT_EQ(c.env["FOO"], "bar");
  EXPECT_EQ(c.env["SAGEMAKER_BASE_DIR"], "/opt/ml");
  EXPECT_EQ(c.env["PATH"], "/opt/program:/usr/bin:/bin");
  EXPECT_EQ(c.env["SM_HPS"], "{\"lr\":0.1}");
  EXPECT_EQ(c.env["SM_HP_LR"], "0.1");
  EXPECT_EQ(c.env.count("SM_HP_SAGEMAKER_PROGRAM"), 0u);
  EXPECT_EQ(c.env["SM_USER_ENTRY_POINT"], "train.py");
  EXPECT_EQ(c.env["SM_MODULE_NAME"], "train");
  EXPECT_EQ(c.env["SM_USER_ARGS"], "[\"--lr\",\"0.1\"]");
  EXPECT_EQ(c.env["SM_NUM_CPUS"], "4");
  EXPECT_EQ(c.env["SM_NUM_GPUS"], "0");
  EXPECT_EQ(c.env["SM_LOG_LEVEL"], "20");
  EXPECT_EQ(c.env["SM_MODEL_DIR"], "/opt/ml/model");
  EXPECT_EQ(c.env["SM_OUTPUT_INTERMEDIATE_DIR"], "/opt/ml/output/intermediate");
  EXPECT_EQ(c.hyperparameters_json, "{\"lr\":\"0.1\",\"sagemaker_program\":\"\\\"train.py\\\"\"}");
}

TEST_F(BuildContainerConfigTest, ConfigFilesAreWrittenIntoTheDirectory) {
  const ContainerConfig c = Build(1);
  testing::TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  ASSERT_TRUE(WriteConfigFiles(c, tmp.path()).ok());
  EXPECT_THAT(testing::ListDir(tmp.path()),
              ::testing::ElementsAre("hyperparameters.json", "inputdataconfig.json",
                                     "resourceconfig.json"));
  EXPECT_EQ(testing::ReadFile(tmp.path() + "/hyperparameters.json"), c.hyperparameters_json);
  EXPECT_EQ(testing::ReadFile(tmp.path() + "/inputdataconfig.json"), c.inputdataconfig_json);
  EXPECT_EQ(testing::ReadFile(tmp.path() + "/resourceconfig.json"), c.resourceconfig_json);
}

// A config file that does not fit, whether its bytes (a full disk) or the
// file itself (no inode left), is named in the error with the system's
// reason, and no temporary file stays behind. (Each disk is a small tmpfs of
// a child process: testing::RunWithSmallDisks.)
TEST_F(BuildContainerConfigTest, ConfigFileThatDoesNotFitIsNamedAndLeavesNoTemporaryFile) {
  ContainerConfig big = Build(0);
  big.hyperparameters_json = absl::StrCat("{\"big\":\"", std::string(64 << 10, 'h'), "\"}");
  const ContainerConfig small = Build(0);
  testing::TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string full = tmp.path() + "/full";
  const std::string no_inodes = tmp.path() + "/no-inodes";
  // (A tmpfs's root directory takes one of its inodes.)
  testing::Facts f = testing::RunWithSmallDisks({{full, 16, 0}, {no_inodes, 64, 2}}, [&] {
    testing::Facts got;
    const int filler = open((no_inodes + "/filler").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (filler >= 0) close(filler);
    got["full"] = WriteConfigFiles(big, full).ToString();
    got["full.files"] = absl::StrJoin(testing::ListDir(full), " ");
    got["no-inodes"] = WriteConfigFiles(small, no_inodes).ToString();
    got["no-inodes.files"] = absl::StrJoin(testing::ListDir(no_inodes), " ");
    return got;
  });
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["full"], absl::StrCat("RESOURCE_EXHAUSTED: write '", full,
                                    "/hyperparameters.json': No space left on device"));
  EXPECT_EQ(f["full.files"], "");
  EXPECT_EQ(f["no-inodes"], absl::StrCat("RESOURCE_EXHAUSTED: create '", no_inodes,
                                         "/hyperparameters.json': No space left on device"));
  EXPECT_EQ(f["no-inodes.files"], "filler");
}

}  // namespace
}  // namespace kiln::local::internal
