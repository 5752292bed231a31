// Pipe mode's pieces on their own: the epoch order (shuffle, sharding), the
// RecordIO framing, gzip decompression, and the FIFO writer's stop and EPIPE
// handling.
#include "local/internal/pipe_stream.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "local/local_test_util.h"

namespace kiln::local::internal {
namespace {

using ::testing::ElementsAre;

TEST(EpochOrderTest, WithoutASeedTheOrderIsTheSortedOrder) {
  EXPECT_THAT(EpochOrder(4, false, 0, 0, false, 0, 1), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(EpochOrder(4, false, 0, 7, false, 0, 1), ElementsAre(0, 1, 2, 3));
}

TEST(EpochOrderTest, ASeedGivesAPermutationThatChangesPerEpochAndRepeatsPerSeed) {
  std::vector<size_t> identity(50);
  std::iota(identity.begin(), identity.end(), size_t{0});
  std::set<std::vector<size_t>> distinct;
  for (uint64_t epoch = 0; epoch < 5; ++epoch) {
    std::vector<size_t> order = EpochOrder(50, true, 1234, epoch, false, 0, 1);
    EXPECT_EQ(order, EpochOrder(50, true, 1234, epoch, false, 0, 1)) << "not deterministic";
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "not a permutation";
    distinct.insert(order);
  }
  EXPECT_EQ(distinct.size(), 5u);
  EXPECT_NE(EpochOrder(50, true, 1, 0, false, 0, 1), EpochOrder(50, true, 2, 0, false, 0, 1));
}

TEST(EpochOrderTest, ShardsAreDisjointAndTogetherEverything) {
  for (bool seeded : {false, true}) {
    std::vector<size_t> all;
    for (size_t i = 0; i < 3; ++i) {
      std::vector<size_t> share = EpochOrder(10, seeded, 9, 2, true, i, 3);
      EXPECT_GE(share.size(), 3u);
      EXPECT_LE(share.size(), 4u);
      all.insert(all.end(), share.begin(), share.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_THAT(all, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)) << "seeded " << seeded;
  }
  // Without a seed, instance i gets positions i, i + n, ...
  EXPECT_THAT(EpochOrder(7, false, 0, 0, true, 1, 3), ElementsAre(1, 4));
}

TEST(RecordIOTest, FramesARecordWithHeaderAndPadding) {
  std::string out;
  ASSERT_TRUE(AppendRecordIO("abcde", &out).ok());
  EXPECT_EQ(out, std::string("\x0a\x23\xd7\xce\x05\0\0\0abcde\0\0\0", 16));
  out.clear();
  ASSERT_TRUE(AppendRecordIO("", &out).ok());
  EXPECT_EQ(out, std::string("\x0a\x23\xd7\xce\0\0\0\0", 8));
}

TEST(RecordIOTest, SplitsAtAnAlignedMagicNumberAsDmlcDoes) {
  // "abcd" MAGIC "ef": parts "abcd" (flag 1) and "ef" (flag 3).
  std::string out;
  ASSERT_TRUE(AppendRecordIO(std::string("abcd\x0a\x23\xd7\xce" "ef", 10), &out).ok());
  EXPECT_EQ(out, std::string("\x0a\x23\xd7\xce\x04\0\0\x20" "abcd"
                             "\x0a\x23\xd7\xce\x02\0\0\x60" "ef\0\0",
                             24));
}

TEST(InflaterTest, DecompressesConcatenatedMembersFedInTinyChunks) {
  testing::TempDir tmp;
  ASSERT_EQ(std::system(absl::StrCat("cd ", tmp.path(), " && printf hello, | gzip -c > z && ",
                                     "printf world | gzip -c >> z").c_str()),
            0);
  const std::string z = testing::ReadFile(tmp.path() + "/z");
  Inflater inflater;
  std::string out;
  for (char c : z) {
    ASSERT_TRUE(inflater.Feed(std::string_view(&c, 1), [&](std::string_view d) {
      out.append(d.data(), d.size());
      return absl::OkStatus();
    }).ok());
  }
  EXPECT_TRUE(inflater.Finish().ok());
  EXPECT_EQ(out, "hello,world");
}

TEST(InflaterTest, TruncatedDataIsAnError) {
  testing::TempDir tmp;
  ASSERT_EQ(std::system(absl::StrCat("head -c 100000 /dev/zero | gzip -c > ", tmp.path(), "/z").c_str()), 0);
  std::string z = testing::ReadFile(tmp.path() + "/z");
  z.resize(z.size() / 2);
  Inflater inflater;
  ASSERT_TRUE(inflater.Feed(z, [](std::string_view) { return absl::OkStatus(); }).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(inflater.Finish()));
}

TEST(FifoWriterTest, ReaderClosingGivesReaderClosedNotSigpipe) {
  testing::TempDir tmp;
  const std::string fifo = tmp.path() + "/f";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  StopSignal stop;
  auto reader = std::async(std::launch::async, [&] {
    int fd = open(fifo.c_str(), O_RDONLY);
    char buf[10];
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    return n;
  });
  FifoWriter writer(stop);
  ASSERT_EQ(*writer.Open(fifo), FifoWriter::Result::kOk);
  const std::string block(1 << 20, 'x');
  absl::StatusOr<FifoWriter::Result> r = FifoWriter::Result::kOk;
  for (int i = 0; i < 100 && r.ok() && *r == FifoWriter::Result::kOk; ++i) r = writer.Write(block);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, FifoWriter::Result::kReaderClosed);  // and the process is alive
  EXPECT_GT(reader.get(), 0);
  // No SIGPIPE is left pending on this thread.
  sigset_t pending;
  sigpending(&pending);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));
}

TEST(FifoWriterTest, StopEndsAWriterWaitingForAReader) {
  testing::TempDir tmp;
  const std::string fifo = tmp.path() + "/f";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  StopSignal stop;
  auto opened = std::async(std::launch::async, [&] {
    FifoWriter writer(stop);
    return writer.Open(fifo);
  });
  EXPECT_EQ(opened.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  stop.Stop();
  ASSERT_EQ(opened.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(*opened.get(), FifoWriter::Result::kStopped);
}

// The FIFO's path holds the channel's name, which can be anything when the
// channel is used without the engine: shown escaped.
TEST(FifoWriterTest, AFileInPlaceOfTheFifoIsNamedEscaped) {
  testing::TempDir tmp;
  const std::string odd = "a\nb'c\"d\xff" "e";
  testing::WriteFile(absl::StrCat(tmp.path(), "/", odd, "_0"), "not a FIFO");
  StopSignal stop;
  FifoWriter writer(stop);
  absl::StatusOr<FifoWriter::Result> r = writer.Open(absl::StrCat(tmp.path(), "/", odd, "_0"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_EQ(r.status().message(),
            absl::StrCat("'", tmp.path(), R"(/a\nb'c"d\xFFe_0' is no longer a FIFO)"));
}

TEST(FifoWriterTest, ARemovedFifoIsGone) {
  testing::TempDir tmp;
  StopSignal stop;
  FifoWriter writer(stop);
  EXPECT_EQ(*writer.Open(tmp.path() + "/missing"), FifoWriter::Result::kGone);
}

}  // namespace
}  // namespace kiln::local::internal
