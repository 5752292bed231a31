// The credentials file of kiln serve (kiln::serve::ReadCredentialsFile).
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/serve/server.h"

namespace kiln::serve {
namespace {

using ::testing::HasSubstr;

class CredentialsTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    char pattern[] = "/tmp/kiln-keys-XXXXXX";
    const int fd = mkstemp(pattern);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = pattern;
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override {
    if (!path_.empty()) unlink(path_.c_str());
  }
  std::string path_;
};

TEST_F(CredentialsTest, KeysCommentsAndBlankLines) {
  auto accounts = ReadCredentialsFile(Write(
      "# id secret account\n\nAKID1 s1 111122223333  # the first\n\tAKID2\ts2\t444455556666\n"));
  ASSERT_TRUE(accounts.ok()) << accounts.status();
  ASSERT_EQ(accounts->size(), 2u);
  EXPECT_EQ((*accounts)[0].access_key_id, "AKID1");
  EXPECT_EQ((*accounts)[0].secret_access_key, "s1");
  EXPECT_EQ((*accounts)[0].account_id, "111122223333");
  EXPECT_EQ((*accounts)[1].account_id, "444455556666");
}

TEST_F(CredentialsTest, AMalformedLineIsNamed) {
  const std::string path = Write("AKID1 s1 111122223333\nAKID2 s2\n");
  auto accounts = ReadCredentialsFile(path);
  EXPECT_TRUE(absl::IsInvalidArgument(accounts.status()));
  EXPECT_THAT(std::string(accounts.status().message()), HasSubstr(absl::StrCat(path, ":2: ")));
  EXPECT_THAT(std::string(accounts.status().message()), HasSubstr("found 2 fields"));
}

TEST_F(CredentialsTest, AnAccountIsTwelveDigits) {
  auto accounts = ReadCredentialsFile(Write("AKID1 s1 12345\n"));
  EXPECT_THAT(std::string(accounts.status().message()), HasSubstr(":1: the account id"));
}

TEST_F(CredentialsTest, AKeyGivenTwiceIsRefused) {
  auto accounts = ReadCredentialsFile(Write("AKID1 s1 111122223333\nAKID1 s2 111122223333\n"));
  EXPECT_THAT(std::string(accounts.status().message()), HasSubstr(":2: access key id 'AKID1'"));
}

TEST_F(CredentialsTest, AFileWithoutKeysOrMissingIsRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(ReadCredentialsFile(Write("# nothing\n")).status()));
  EXPECT_TRUE(absl::IsNotFound(ReadCredentialsFile("/nonexistent/keys").status()));
}

}  // namespace
}  // namespace kiln::serve
