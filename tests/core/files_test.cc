// ReadUserFile: a file a user names is read whole when it is a regular file
// within the limit, and refused, without waiting on it or reading it
// endlessly, when it is anything else.
#include "kiln/plugin/files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

class ReadUserFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir();
    if (!dir_.empty() && dir_.back() == '/') dir_.pop_back();
    dir_ += "/kiln-files-XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override {
    for (const char* name : {"f", "link", "fifo", "sock", "big"}) {
      ::unlink(Path(name).c_str());
    }
    ::rmdir(Path("d").c_str());
    ::rmdir(dir_.c_str());
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
    return Path(name);
  }

  std::string dir_;
};

TEST_F(ReadUserFileTest, ARegularFileWithinTheLimitIsReadWhole) {
  const std::string path = Write("f", "0123456789");
  absl::StatusOr<std::string> text = ReadUserFile(path, 10, "a request file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "0123456789");
  text = ReadUserFile(Write("f", ""), 0, "a request file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "");
}

TEST_F(ReadUserFileTest, ASymbolicLinkToARegularFileIsFollowed) {
  Write("f", "{}");
  ASSERT_EQ(::symlink(Path("f").c_str(), Path("link").c_str()), 0);
  absl::StatusOr<std::string> text = ReadUserFile(Path("link"), 10, "a request file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{}");
}

TEST_F(ReadUserFileTest, AFileOverTheLimitIsRefusedByItsSize) {
  const std::string path = Write("f", "0123456789x");
  absl::Status status = ReadUserFile(path, 10, "a request file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "11 bytes; a request file may hold at most 10 bytes");
  // A large limit is written in MiB; a sparse file costs nothing to refuse.
  UniqueFd fd(::open(Path("big").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::ftruncate(fd.get(), (int64_t{8} << 20) + 1), 0);
  status = ReadUserFile(Path("big"), int64_t{8} << 20, "a request file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "8388609 bytes; a request file may hold at most 8 MiB (8388608 bytes)");
}

// A file whose size says nothing of its content (as /proc's, size 0), or
// that grows while read, is read no further than one byte past the limit.
TEST_F(ReadUserFileTest, AFileThatHoldsMoreThanItsSizeIsCutAtTheLimit) {
  struct stat st;
  ASSERT_EQ(::stat("/proc/self/status", &st), 0);
  ASSERT_EQ(st.st_size, 0);
  const absl::Status status = ReadUserFile("/proc/self/status", 16, "a trace file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "more than 16 bytes; a trace file may hold at most 16 bytes");
  EXPECT_TRUE(ReadUserFile("/proc/self/status", 1 << 20, "a trace file").ok());
}

TEST_F(ReadUserFileTest, ADirectoryIsRefused) {
  ASSERT_EQ(::mkdir(Path("d").c_str(), 0755), 0);
  const absl::Status status = ReadUserFile(Path("d"), 100, "a request file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "a directory, not a regular file; a request file must be a regular file");
}

// Without a writer, a FIFO would block the open; with one, the read.
TEST_F(ReadUserFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  const absl::Status status = ReadUserFile(Path("fifo"), 100, "a scenario file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "a FIFO, not a regular file; a scenario file must be a regular file");
}

TEST_F(ReadUserFileTest, AnEndlessDeviceIsRefusedUnread) {
  const absl::Status status = ReadUserFile("/dev/zero", 100, "a trace file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "a character device, not a regular file; a trace file must be a regular file");
}

TEST_F(ReadUserFileTest, ASocketIsRefusedAsNotARegularFile) {
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(s.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = Path("sock");
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  const absl::Status status = ReadUserFile(path, 100, "a request file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "a socket, not a regular file; a request file must be a regular file");
}

TEST_F(ReadUserFileTest, AMissingFileIsNotFoundWithStrerrorsText) {
  const absl::Status status = ReadUserFile(Path("missing"), 100, "a request file").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "No such file or directory");
}

}  // namespace
}  // namespace kiln::internal
