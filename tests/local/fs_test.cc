// The local backend's file-system helpers: their errors show the path they
// name escaped and cut, whoever passed it.
#include "local/internal/fs.h"

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "local/local_test_util.h"

namespace kiln::local::internal {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

// Paths hold input (a request's LocalPath, a channel's keys, names a
// container chose): ErrnoStatus, which every file-system error of the local
// backend goes through, shows a path with a newline, a quote or bytes that
// are not UTF-8 escaped, and a long one cut; a plain path reads as written.
TEST(ErrnoStatusTest, ShowsThePathEscapedAndCut) {
  absl::Status s = ErrnoStatus(ENOENT, "open", "/data/a\nb'c\"d\xff" "e");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(s.message(), R"(open '/data/a\nb'c"d\xFFe': No such file or directory)");

  s = ErrnoStatus(EACCES, "open", "/data/plain file-1.csv");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(s.message(), "open '/data/plain file-1.csv': Permission denied");

  const std::string long_path = "/" + std::string(5000, 'p');
  s = ErrnoStatus(ENOSPC, "write", long_path);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat("write '", long_path.substr(0, 1024), "...': No space left on device"));
}

// The helpers' own messages (and so their callers') show paths the same way.
TEST(ErrnoStatusTest, TheHelpersShowTheirPathsEscaped) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  absl::StatusOr<std::string> read = ReadFilePrefix(tmp.path() + "/no\nsuch\x1b[0m", 16);
  EXPECT_TRUE(absl::IsNotFound(read.status())) << read.status();
  EXPECT_THAT(read.status().message(),
              HasSubstr(absl::StrCat("open '", tmp.path(), R"(/no\nsuch\u001b[0m': )")));

  WriteFile(tmp.path() + "/file\n", "not a directory");
  absl::Status s = MakeDirs(tmp.path() + "/file\n");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("'", tmp.path(), R"(/file\n' is not a directory)"));
}

}  // namespace
}  // namespace kiln::local::internal
