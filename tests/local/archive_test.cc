// The local backend's tar archives: the errors of unpacking and reading one
// show the archive's path, its entries' names (an image tarball is
// untrusted) and libarchive's text about them escaped and cut.
#include "local/internal/archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <string>
#include <vector>

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

// A newline, a quote and a byte that is not UTF-8, and how messages show them.
constexpr char kOdd[] = "a\nb'c\"d\xff" "e";
constexpr char kShown[] = R"(a\nb'c"d\xFFe)";

bool OneLine(absl::string_view message) {
  return message.find_first_of("\n\xff") == absl::string_view::npos;
}

// Writes a tar archive at `path` holding a one-byte file for each of `names`,
// as given (GNU tar: names of any length, their bytes as they are).
void WriteArchive(const std::string& path, const std::vector<std::string>& names) {
  struct archive* a = archive_write_new();
  archive_write_set_format_gnutar(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const std::string& name : names) {
    struct archive_entry* entry = archive_entry_new();
    archive_entry_copy_pathname(entry, name.c_str());
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_entry_set_size(entry, 1);
    EXPECT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << archive_error_string(a);
    EXPECT_EQ(archive_write_data(a, "x", 1), 1);
    archive_entry_free(entry);
  }
  EXPECT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
}

// An entry that would land outside the image is refused naming it, and the
// archive, escaped; a long name is cut.
TEST(ArchiveTest, AnUnsafeEntryIsNamedEscapedAndCut) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string archive = absl::StrCat(tmp.path(), "/", kOdd, ".tar");
  const std::string shown_archive = absl::StrCat(tmp.path(), "/", kShown, ".tar");
  WriteArchive(archive, {"ok", absl::StrCat("../", kOdd)});
  absl::Status s = ExtractArchive(archive, tmp.path() + "/image");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("archive '", shown_archive, "': entry '../", kShown,
                                      "' would land outside the image"));

  const std::string long_name = "../" + std::string(2000, 'n');
  WriteArchive(archive, {long_name});
  s = ExtractArchive(archive, tmp.path() + "/image");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("archive '", shown_archive, "': entry '",
                                      long_name.substr(0, 1024),
                                      "...' would land outside the image"));
}

// libarchive's own text quotes the path it could not open: escaped too.
TEST(ArchiveTest, AnArchiveThatCannotBeReadIsNamedEscaped) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string missing = absl::StrCat(tmp.path(), "/no-", kOdd, ".tar");
  for (const absl::Status& s : {ExtractArchive(missing, tmp.path() + "/image"),
                                ReadArchive(missing).status()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(OneLine(s.message())) << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("cannot read archive '", tmp.path(), "/no-",
                                                    kShown, ".tar': ")));
  }
}

}  // namespace
}  // namespace kiln::local::internal
