// The FastFile FUSE view: a real FUSE mount (this test needs /dev/fuse and
// the right to mount, as root; without them it fails, saying so), read by
// this process through the kernel like a container would.
#include "local/internal/fuse_view.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/object_store.h"
#include "local/internal/fs.h"
#include "local/local_test_util.h"

namespace kiln::local::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::kiln::local::testing::CountingStore;

constexpr long kFuseSuperMagic = 0x65735546;


std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

bool IsFuseMount(const std::string& path) {
  struct statfs fs;
  return statfs(path.c_str(), &fs) == 0 && fs.f_type == kFuseSuperMagic;
}

class FuseViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    mnt_ = tmp_.path() + "/mnt";
    ASSERT_TRUE(MakeDirs(mnt_).ok());
  }

  // Puts the objects and mounts a view of them (rel -> data).
  std::unique_ptr<FuseView> MountView(const std::vector<std::pair<std::string, std::string>>& objs,
                                      FuseViewOptions options = {}) {
    std::vector<FuseViewFile> files;
    for (const auto& [rel, data] : objs) {
      const std::string uri = absl::StrCat("mem://b/ds/", rel);
      EXPECT_TRUE(store_.Put(uri, data).ok());
      files.push_back({rel, uri, static_cast<int64_t>(data.size())});
    }
    absl::StatusOr<std::unique_ptr<FuseView>> view =
        FuseView::Mount(store_, mnt_, std::move(files), options);
    EXPECT_TRUE(view.ok()) << view.status()
                           << " (this test needs /dev/fuse and the right to mount: run as root)";
    return view.ok() ? *std::move(view) : nullptr;
  }

  local::testing::TempDir tmp_;  // first: outlives the views
  std::string mnt_;
  CountingStore store_;
};

TEST_F(FuseViewTest, ShowsTheObjectsAsATreeWithTheirBytes) {
  const std::string big = Pattern(5 * 1000 * 1000 + 7, 1);
  auto view = MountView({{"train/a.csv", "1,2,3\n"},
                         {"train/sub/deep/b.bin", big},
                         {"train/empty", ""},
                         {"top.txt", "top"}});
  ASSERT_NE(view, nullptr);
  EXPECT_TRUE(IsFuseMount(mnt_));
  EXPECT_THAT(local::testing::ListDir(mnt_), ElementsAre("top.txt", "train"));
  EXPECT_THAT(local::testing::ListDir(mnt_ + "/train"), ElementsAre("a.csv", "empty", "sub"));
  EXPECT_THAT(local::testing::ListDir(mnt_ + "/train/sub/deep"), ElementsAre("b.bin"));
  struct stat st;
  ASSERT_EQ(stat((mnt_ + "/train/sub/deep/b.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(big.size()));
  EXPECT_TRUE(S_ISREG(st.st_mode));
  ASSERT_EQ(stat((mnt_ + "/train/sub").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(ReadFilePrefix(mnt_ + "/train/a.csv", 1 << 20).value_or("?"), "1,2,3\n");
  EXPECT_EQ(ReadFilePrefix(mnt_ + "/top.txt", 1 << 20).value_or("?"), "top");
  EXPECT_EQ(ReadFilePrefix(mnt_ + "/train/empty", 1 << 20).value_or("?"), "");
  EXPECT_TRUE(local::testing::ReadFile(mnt_ + "/train/sub/deep/b.bin") == big);
  EXPECT_EQ(stat((mnt_ + "/train/nope").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  // Nothing was read whole: only ranges.
  EXPECT_EQ(store_.gets_.load(), 0);
  view->Unmount();
  EXPECT_FALSE(IsFuseMount(mnt_));
}

TEST_F(FuseViewTest, EveryChangeIsRefusedAsReadOnly) {
  auto view = MountView({{"d/a", "abc"}});
  ASSERT_NE(view, nullptr);
  const std::string a = mnt_ + "/d/a";
  EXPECT_EQ(open(a.c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(open(a.c_str(), O_RDWR), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(open((mnt_ + "/d/new").c_str(), O_WRONLY | O_CREAT, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(mkdir((mnt_ + "/d/x").c_str(), 0755), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(unlink(a.c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(rename(a.c_str(), (mnt_ + "/d/b").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(truncate(a.c_str(), 0), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(chmod(a.c_str(), 0777), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(ReadFilePrefix(a, 100).value_or("?"), "abc");
}

TEST_F(FuseViewTest, ReadsFetchOnlyTheTouchedBlocksOnce) {
  const std::string big = Pattern(64 << 20, 2);  // 64 blocks of 1 MiB
  FuseViewOptions options;
  options.block_size = 1 << 20;
  options.cache_blocks = 8;
  auto view = MountView({{"big.bin", big}}, options);
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(store_.ranges_.load(), 0);  // mounting reads nothing
  const std::string path = mnt_ + "/big.bin";
  int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  // 4 KiB in the middle of block 40, then again: one range.
  char buf[4096];
  const off_t at = (off_t{40} << 20) + 12345;
  ASSERT_EQ(pread(fd, buf, sizeof(buf), at), static_cast<ssize_t>(sizeof(buf)));
  EXPECT_EQ(std::string(buf, sizeof(buf)), big.substr(static_cast<size_t>(at), sizeof(buf)));
  ASSERT_EQ(pread(fd, buf, sizeof(buf), at + 8192), static_cast<ssize_t>(sizeof(buf)));
  EXPECT_EQ(std::string(buf, sizeof(buf)), big.substr(static_cast<size_t>(at) + 8192, sizeof(buf)));
  close(fd);
  const int after_two = store_.ranges_.load();
  // The kernel may read ahead into the next block; never the whole file.
  EXPECT_GE(after_two, 1);
  EXPECT_LE(after_two, 2);
  EXPECT_LE(view->stats().bytes_read, int64_t{2} << 20);
  EXPECT_EQ(view->stats().ranges_read, after_two);
}

TEST_F(FuseViewTest, AFailedFetchIsEioAndTheNextReadTriesAgain) {
  auto view = MountView({{"f", "hello"}});
  ASSERT_NE(view, nullptr);
  const std::string path = mnt_ + "/f";
  store_.fail_.store(true);
  int fd = open(path.c_str(), O_RDONLY | O_DIRECT);  // no page cache between tries
  if (fd < 0) fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[16];
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), -1);
  EXPECT_EQ(errno, EIO);
  store_.fail_.store(false);
  ASSERT_EQ(pread(fd, buf, sizeof(buf), 0), 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  close(fd);
}

TEST_F(FuseViewTest, UnmountWithAFileStillOpenDetachesAtOnce) {
  auto view = MountView({{"a", "abc"}, {"b", "xyz"}});
  ASSERT_NE(view, nullptr);
  int fd = open((mnt_ + "/a").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  view->Unmount();
  view->Unmount();  // idempotent
  EXPECT_FALSE(IsFuseMount(mnt_));
  // The open file's connection is gone: an error, never a hang.
  char buf[8];
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), -1);
  close(fd);
  // The mount point is an empty directory again, removable.
  EXPECT_TRUE(local::testing::ListDir(mnt_).empty());
  EXPECT_EQ(rmdir(mnt_.c_str()), 0);
}

TEST_F(FuseViewTest, DestructionUnmounts) {
  {
    auto view = MountView({{"a", "abc"}});
    ASSERT_NE(view, nullptr);
    EXPECT_TRUE(IsFuseMount(mnt_));
  }
  EXPECT_FALSE(IsFuseMount(mnt_));
}

TEST_F(FuseViewTest, PathsThatCollideOrEscapeAreInvalidArgumentNamingTheObject) {
  auto mount = [&](std::vector<FuseViewFile> files) {
    return FuseView::Mount(store_, mnt_, std::move(files)).status();
  };
  absl::Status s = mount({{"a", "mem://b/a", 1}, {"a/b", "mem://b/a/b", 1}});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("mem://b/a/b"));
  s = mount({{"a/b", "mem://b/a/b", 1}, {"a", "mem://b/a", 1}});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("mem://b/a"));
  s = mount({{"../x", "mem://b/x", 1}});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_FALSE(IsFuseMount(mnt_));
}

// Keys come from a listing: the messages that name one show it, and its URI,
// escaped and cut.
TEST_F(FuseViewTest, KeysInErrorsAreShownEscapedAndCut) {
  const std::string odd = "a\nb'c\"d\xff" "e";
  const std::string shown = R"(a\nb'c"d\xFFe)";
  absl::Status s = FuseView::Mount(store_, mnt_,
                                   {{odd, "mem://b/" + odd, 1}, {odd + "/x", "mem://b/x", 1}})
                       .status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("object 'mem://b/x': its path '", shown,
                                      "/x' needs a directory where another object is a file"));
  const std::string long_key = std::string(2000, 'k');
  s = FuseView::Mount(store_, mnt_, {{"../" + odd, "mem://b/" + long_key, 1}}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("object 'mem://b/", long_key.substr(0, 1024 - 8),
                                      "...': its path '../", shown,
                                      "' is not a safe relative path"));
  EXPECT_FALSE(IsFuseMount(mnt_));
}

TEST_F(FuseViewTest, AMissingMountPointFailsNamingIt) {
  absl::StatusOr<std::unique_ptr<FuseView>> view =
      FuseView::Mount(store_, tmp_.path() + "/missing", {{"a", "mem://b/a", 1}});
  EXPECT_TRUE(absl::IsFailedPrecondition(view.status())) << view.status();
  EXPECT_THAT(view.status().message(), HasSubstr(tmp_.path() + "/missing"));
}

}  // namespace
}  // namespace kiln::local::internal
