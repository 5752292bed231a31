// Credentials, region and endpoint found the AWS way: environment first, then
// the shared credentials and config files; and the clear error without any.
#include "aws/internal/aws_config.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "aws/tests_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/aws/s3.h"

namespace kiln::aws::internal {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

class AwsConfigTest : public ::testing::Test {
 protected:
  absl::StatusOr<S3Options> Resolve(S3Options options = {}) {
    env_.emplace("HOME", tmp_.path());
    return ResolveS3OptionsWith(options, [&](const char* name) -> std::optional<std::string> {
      auto it = env_.find(name);
      return it == env_.end() ? std::nullopt : std::optional<std::string>(it->second);
    });
  }
  TempDir tmp_;
  std::map<std::string, std::string> env_;
};

TEST_F(AwsConfigTest, NoCredentialsAnywhereIsAClearError) {
  absl::StatusOr<S3Options> o = Resolve();
  EXPECT_TRUE(absl::IsFailedPrecondition(o.status())) << o.status();
  EXPECT_THAT(o.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
  EXPECT_THAT(o.status().message(), HasSubstr(tmp_.path() + "/.aws/credentials: not found"));
  // The factory refuses unresolved options too.
  EXPECT_TRUE(absl::IsInvalidArgument(NewS3ObjectStore({}).status()));
}

TEST_F(AwsConfigTest, EnvironmentVariablesComeFirst) {
  WriteFile(tmp_.path() + "/.aws/credentials", "[default]\naws_access_key_id = FILE\n"
                                              "aws_secret_access_key = filesecret\n");
  env_ = {{"AWS_ACCESS_KEY_ID", "ENVKEY"},
          {"AWS_SECRET_ACCESS_KEY", "envsecret"},
          {"AWS_SESSION_TOKEN", "token"},
          {"AWS_DEFAULT_REGION", "eu-west-1"}};
  absl::StatusOr<S3Options> o = Resolve();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->credentials->access_key_id, "ENVKEY");
  EXPECT_EQ(o->credentials->secret_access_key, "envsecret");
  EXPECT_EQ(o->credentials->session_token, "token");
  EXPECT_EQ(o->region, "eu-west-1");
  EXPECT_EQ(o->endpoint_url, "https://s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(o->addressing_style, S3AddressingStyle::kVirtual);
  env_["AWS_REGION"] = "ap-south-1";  // wins over AWS_DEFAULT_REGION
  EXPECT_EQ(Resolve()->region, "ap-south-1");
}

TEST_F(AwsConfigTest, HalfAKeyIsRefused) {
  env_ = {{"AWS_ACCESS_KEY_ID", "ENVKEY"}};
  absl::StatusOr<S3Options> o = Resolve();
  EXPECT_TRUE(absl::IsInvalidArgument(o.status()));
  EXPECT_THAT(o.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY is not"));
}

TEST_F(AwsConfigTest, SharedFilesGiveTheProfilesCredentialsRegionAndEndpoint) {
  WriteFile(tmp_.path() + "/.aws/credentials",
            "# comment\n[default]\naws_access_key_id=DEF\naws_secret_access_key=defsecret\n\n"
            "[train]\naws_access_key_id = TRAIN\naws_secret_access_key = trainsecret\n"
            "aws_session_token = tok\n");
  WriteFile(tmp_.path() + "/.aws/config",
            "[default]\nregion = us-west-2\n[profile train]\nregion = eu-central-1\n"
            "endpoint_url = http://127.0.0.1:9000/\ns3 =\n  addressing_style = virtual\n");
  absl::StatusOr<S3Options> o = Resolve();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->credentials->access_key_id, "DEF");
  EXPECT_EQ(o->region, "us-west-2");
  env_["AWS_PROFILE"] = "train";
  o = Resolve();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->profile, "train");
  EXPECT_EQ(o->credentials->access_key_id, "TRAIN");
  EXPECT_EQ(o->credentials->session_token, "tok");
  EXPECT_EQ(o->region, "eu-central-1");
  EXPECT_EQ(o->endpoint_url, "http://127.0.0.1:9000");
  EXPECT_EQ(o->addressing_style, S3AddressingStyle::kVirtual);
}

TEST_F(AwsConfigTest, EndpointVariablesAndThePerServiceOverride) {
  env_ = {{"AWS_ACCESS_KEY_ID", "K"},
          {"AWS_SECRET_ACCESS_KEY", "S"},
          {"AWS_ENDPOINT_URL", "http://127.0.0.1:5000"}};
  absl::StatusOr<S3Options> o = Resolve();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoint_url, "http://127.0.0.1:5000");
  EXPECT_EQ(o->addressing_style, S3AddressingStyle::kPath);  // custom endpoint
  env_["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:6000";
  EXPECT_EQ(Resolve()->endpoint_url, "http://127.0.0.1:6000");
  env_["AWS_ENDPOINT_URL_S3"] = "127.0.0.1:6000";
  EXPECT_TRUE(absl::IsInvalidArgument(Resolve().status()));
  // A path would be dropped (requests go to the root): refused, not ignored.
  env_["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:6000/gateway/s3/";
  EXPECT_TRUE(absl::IsInvalidArgument(Resolve().status()));
  EXPECT_THAT(Resolve().status().message(),
              HasSubstr("'http://127.0.0.1:6000/gateway/s3' has a path"));
  // Options already set are kept.
  S3Options set;
  set.endpoint_url = "https://minio.example:9000";
  set.credentials = AwsCredentials{"A", "B", ""};
  set.addressing_style = S3AddressingStyle::kVirtual;
  o = Resolve(set);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->endpoint_url, "https://minio.example:9000");
  EXPECT_EQ(o->credentials->access_key_id, "A");
  EXPECT_EQ(o->addressing_style, S3AddressingStyle::kVirtual);
}

// Settings come from the environment and the caller: an endpoint or a
// profile name that could break a message's line is shown escaped.
TEST_F(AwsConfigTest, SettingsInErrorsAreShownEscaped) {
  env_ = {{"AWS_ENDPOINT_URL_S3", "ftp://x\n[forged]"}};
  absl::StatusOr<S3Options> o = Resolve();
  EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << o.status();
  EXPECT_THAT(o.status().message(), HasSubstr(R"(S3 endpoint 'ftp://x\n[forged]' must start)"));
  env_ = {{"AWS_PROFILE", "a\x1b[2Jb"}};
  o = Resolve();
  EXPECT_TRUE(absl::IsFailedPrecondition(o.status())) << o.status();
  EXPECT_THAT(o.status().message(), HasSubstr(R"(add profile 'a\u001b[2Jb' to the shared)"));
}

TEST(AwsConfigIniTest, NestedKeysAndComments) {
  IniFile ini = ParseIni("[profile x]\n; c\nregion=a\ns3 =\n  addressing_style = path\n"
                         "  max_concurrent_requests = 20\nother = 1\n");
  EXPECT_EQ(ini["profile x"]["region"], "a");
  EXPECT_EQ(ini["profile x"]["s3.addressing_style"], "path");
  EXPECT_EQ(ini["profile x"]["s3.max_concurrent_requests"], "20");
  EXPECT_EQ(ini["profile x"]["other"], "1");
}

TEST(S3OptionsTest, PartSizeUnderS3sMinimumIsRefused) {
  S3Options o;
  o.credentials = AwsCredentials{"A", "B", ""};
  o.region = "us-east-1";
  o.endpoint_url = "http://127.0.0.1:1";
  o.part_size = 4 << 20;
  absl::StatusOr<std::unique_ptr<ObjectStore>> store = NewS3ObjectStore(o);
  EXPECT_TRUE(absl::IsInvalidArgument(store.status()));
  EXPECT_THAT(store.status().message(), HasSubstr("5 MiB"));
}

// A request that gets no answer fails naming the object and the URL, both
// shown escaped: a bucket goes into the URL's host as given (virtual-hosted
// style), and neither it nor the key may break the message's line.
TEST(S3OptionsTest, AFailedExchangeShowsTheUriAndTheUrlEscaped) {
  S3Options o;
  o.credentials = AwsCredentials{"A", "B", ""};
  o.region = "us-east-1";
  o.endpoint_url = "http://127.0.0.1:1";
  o.addressing_style = S3AddressingStyle::kVirtual;
  o.max_attempts = 1;
  absl::StatusOr<std::unique_ptr<ObjectStore>> store = NewS3ObjectStore(o);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::string> got = (*store)->Get("s3://a\nb/key\x1b");
  EXPECT_TRUE(absl::IsUnavailable(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(R"(GET s3://a\nb/key\u001b: failed after 1 )"));
  EXPECT_THAT(got.status().message(), HasSubstr(R"(last: GET http://a\nb.127.0.0.1:1/key%1B: )"));
  EXPECT_EQ(got.status().message().find_first_of("\n\x1b"), absl::string_view::npos)
      << got.status();

  o.endpoint_url = "ftp://x\n";
  EXPECT_THAT(NewS3ObjectStore(o).status().message(),
              HasSubstr(R"(endpoint_url 'ftp://x\n' must start with)"));
}

}  // namespace
}  // namespace kiln::aws::internal
