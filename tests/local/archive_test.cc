// The local backend's tar archives: the errors of unpacking and reading one
// show the archive's path, its entries' names (an image tarball is
// untrusted) and libarchive's text about them escaped and cut.
#include "local/internal/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "local/internal/fs.h"
#include "local/local_test_util.h"

namespace kiln::local::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
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

// One entry of an archive a test writes: a file (with `data`), a directory, a
// symbolic link (to `target`), a hard link (to `target`), or a node of
// another type (a device, a FIFO).
struct Entry {
  std::string name;
  mode_t type = AE_IFREG;
  mode_t perm = 0644;
  std::string data;
  std::string target;
  bool hardlink = false;
};

Entry File(std::string name, std::string data, mode_t perm = 0644) {
  Entry e;
  e.name = std::move(name);
  e.data = std::move(data);
  e.perm = perm;
  return e;
}
Entry Dir(std::string name, mode_t perm) {
  Entry e;
  e.name = std::move(name);
  e.type = AE_IFDIR;
  e.perm = perm;
  return e;
}
Entry Symlink(std::string name, std::string target) {
  Entry e;
  e.name = std::move(name);
  e.type = AE_IFLNK;
  e.target = std::move(target);
  return e;
}
Entry HardLink(std::string name, std::string target) {
  Entry e;
  e.name = std::move(name);
  e.target = std::move(target);
  e.hardlink = true;
  return e;
}
Entry Node(std::string name, mode_t type) {
  Entry e;
  e.name = std::move(name);
  e.type = type;
  e.perm = 0666;
  return e;
}

void WriteEntries(const std::string& path, const std::vector<Entry>& entries) {
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const Entry& e : entries) {
    struct archive_entry* entry = archive_entry_new();
    archive_entry_copy_pathname(entry, e.name.c_str());
    archive_entry_set_filetype(entry, e.type);
    archive_entry_set_perm(entry, e.perm);
    archive_entry_set_uid(entry, 65534);
    archive_entry_set_gid(entry, 65534);
    if (e.hardlink) {
      archive_entry_copy_hardlink(entry, e.target.c_str());
    } else if (e.type == AE_IFLNK) {
      archive_entry_copy_symlink(entry, e.target.c_str());
    } else if (e.type == AE_IFCHR || e.type == AE_IFBLK) {
      archive_entry_set_rdev(entry, makedev(1, 3));
    }
    archive_entry_set_size(entry, static_cast<la_int64_t>(e.data.size()));
    EXPECT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << archive_error_string(a);
    if (!e.data.empty()) {
      EXPECT_EQ(archive_write_data(a, e.data.data(), e.data.size()),
                static_cast<la_ssize_t>(e.data.size()));
    }
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

// The refusals that name an entry after its path was replaced by the
// destination's (a hard link outside the image, a hard link to an entry not
// yet unpacked, a write through a symbolic link) name the entry as the
// archive gives it: the message reads no freed memory (ASan checks it).
TEST(ArchiveTest, RefusedLinksAreNamedAsTheArchiveGivesThem) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string archive = tmp.path() + "/image.tar";
  const std::string image = tmp.path() + "/image";
  const std::string long_name(300, 'n');

  WriteEntries(archive, {HardLink(long_name, "../../etc/passwd")});
  absl::Status s = ExtractArchive(archive, image);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("archive '", archive, "': hard link '", long_name,
                                      "' points outside the image"));

  WriteEntries(archive, {HardLink(long_name, "not-yet"), File("not-yet", "x")});
  s = ExtractArchive(archive, image);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), StartsWith(absl::StrCat("archive '", archive, "': entry '",
                                                   long_name, "': ")));

  WriteEntries(archive, {Symlink("out", tmp.path()), File("out/" + long_name, "x")});
  s = ExtractArchive(archive, tmp.path() + "/image2");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), StartsWith(absl::StrCat("archive '", archive, "': entry 'out/",
                                                   long_name, "': ")));
  EXPECT_NE(access((tmp.path() + "/" + long_name).c_str(), F_OK), 0);
}

// A hard link through a symbolic link of the image to a file outside it is
// refused: the image would hold the host's file.
TEST(ArchiveTest, AHardLinkThroughASymbolicLinkIsRefused) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  ASSERT_TRUE(WriteFileAtomic(tmp.path() + "/secret", "host").ok());
  const std::string archive = tmp.path() + "/image.tar";
  WriteEntries(archive, {Symlink("host", tmp.path()), HardLink("stolen", "host/secret")});
  absl::Status s = ExtractArchive(archive, tmp.path() + "/image");
  EXPECT_FALSE(s.ok());
  struct stat st;
  EXPECT_NE(lstat((tmp.path() + "/image/stolen").c_str(), &st), 0);
  ASSERT_EQ(stat((tmp.path() + "/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);
}

// An image's files keep their read, write and execute bits only, belong to
// the unpacking user whatever the archive says, and its device nodes and
// FIFOs are left out.
TEST(ArchiveTest, AnImageHasNoSetIdBitsForeignOwnersOrSpecialFiles) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string archive = tmp.path() + "/image.tar";
  const std::string image = tmp.path() + "/image";
  WriteEntries(archive, {Dir("bin", 03777), File("bin/suid", "#!/bin/sh\n", 04755),
                         File("bin/sgid", "#!/bin/sh\n", 02755), HardLink("bin/link", "bin/suid"),
                         Node("dev-null", AE_IFCHR), Node("dev-block", AE_IFBLK),
                         Node("fifo", AE_IFIFO)});
  ASSERT_TRUE(ExtractArchive(archive, image).ok());
  struct stat st;
  for (const char* name : {"bin/suid", "bin/sgid", "bin/link"}) {
    ASSERT_EQ(stat(absl::StrCat(image, "/", name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 07777, 0755u) << name;
    EXPECT_EQ(st.st_uid, getuid()) << name;
    EXPECT_EQ(st.st_gid, getgid()) << name;
  }
  ASSERT_EQ(stat((image + "/bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07000, 0u);
  for (const char* name : {"dev-null", "dev-block", "fifo"}) {
    EXPECT_NE(lstat(absl::StrCat(image, "/", name).c_str(), &st), 0) << name;
  }
}

// A directory image is copied the same way: no set-ID bits, nothing but
// files, directories and links.
TEST(ArchiveTest, ADirectoryCopyHasNoSetIdBitsOrSpecialFiles) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string src = tmp.path() + "/src";
  ASSERT_TRUE(MakeDirs(src + "/bin").ok());
  ASSERT_TRUE(WriteFileAtomic(src + "/bin/suid", "#!/bin/sh\n").ok());
  ASSERT_EQ(chmod((src + "/bin/suid").c_str(), 06755), 0);
  ASSERT_EQ(chmod((src + "/bin").c_str(), 02755), 0);
  ASSERT_EQ(mkfifo((src + "/fifo").c_str(), 0666), 0);
  ASSERT_TRUE(CopyTree(src, tmp.path() + "/copy").ok());
  struct stat st;
  ASSERT_EQ(stat((tmp.path() + "/copy/bin/suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat((tmp.path() + "/copy/bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07000, 0u);
  EXPECT_NE(lstat((tmp.path() + "/copy/fifo").c_str(), &st), 0);
}

}  // namespace
}  // namespace kiln::local::internal
