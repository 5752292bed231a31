// CheckpointSync against the in-memory store (and once against the file
// store) with real temporary directories: restarts restore byte-identical
// files, deletions and changes propagate, objects others add are left alone,
// and no key can write outside the local directory.
#include "kiln/checkpoint_sync.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/clock.h"
#include "kiln/object_store.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "kiln-checkpoint-XXXXXX";
    EXPECT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Sub(const std::string& rel) const { return absl::StrCat(path_, "/", rel); }

 private:
  std::string path_;
};

std::string ReadLocal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Writes `data` to `path` (parents created). With `mtime_s` > 0 the file's
// modification time is set to that many seconds after the epoch, so tests
// control the (size, mtime) stamp instead of racing the clock.
void WriteLocal(const std::string& path, std::string_view data, int64_t mtime_s = 1'600'000'000) {
  fs::create_directories(fs::path(path).parent_path());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    ASSERT_TRUE(out.good()) << path;
  }
  if (mtime_s > 0) {
    struct timespec times[2] = {{mtime_s, 0}, {mtime_s, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  }
}

// Every regular file below `dir`, relative path -> content.
std::map<std::string, std::string> Tree(const std::string& dir) {
  std::map<std::string, std::string> files;
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      files[fs::relative(entry.path(), dir).string()] = ReadLocal(entry.path().string());
    }
  }
  return files;
}

std::string Binary(size_t size, uint32_t seed) {
  std::string data(size, '\0');
  uint32_t x = seed + 1;
  for (char& c : data) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return data;
}

// SyncOnce's counts, or its error.
absl::StatusOr<CheckpointSyncStats> Sync(CheckpointSync& sync) {
  CheckpointSyncStats stats;
  absl::Status status = sync.SyncOnce(&stats);
  if (!status.ok()) return status;
  return stats;
}

constexpr char kPrefix[] = "mem://ckpt/job-1/";

class CheckpointSyncTest : public ::testing::Test {
 protected:
  // key -> content of every object under kPrefix.
  std::map<std::string, std::string> StoreTree() {
    std::map<std::string, std::string> objects;
    absl::StatusOr<std::vector<ObjectInfo>> listed = store_->List(kPrefix);
    EXPECT_TRUE(listed.ok()) << listed.status();
    if (!listed.ok()) return objects;
    for (const ObjectInfo& info : *listed) {
      objects[info.uri.substr(sizeof(kPrefix) - 1)] = store_->Get(info.uri).value();
    }
    return objects;
  }

  TempDir tmp_;
  std::unique_ptr<ObjectStore> store_ = NewInMemoryObjectStore();
};

TEST_F(CheckpointSyncTest, FilesSyncedBeforeARestartAreRestoredByteIdentical) {
  const std::string model = Binary(300'000, 1);
  const std::string optimizer = std::string("\0\0opt\0", 6) + Binary(1000, 2);
  {
    CheckpointSync sync(*store_, kPrefix, tmp_.Sub("run-1"));
    ASSERT_TRUE(sync.Restore().ok());
    WriteLocal(tmp_.Sub("run-1/model.ckpt"), model);
    WriteLocal(tmp_.Sub("run-1/nested/deep/optimizer.bin"), optimizer);
    WriteLocal(tmp_.Sub("run-1/step.txt"), "100");
    WriteLocal(tmp_.Sub("run-1/empty"), "");
    absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->uploaded, 4);
    EXPECT_EQ(stats->deleted, 0);
    EXPECT_EQ(stats->bytes_uploaded, int64_t(model.size() + optimizer.size() + 3));
  }
  // The restarted container gets a fresh directory (not even created yet).
  CheckpointSync restarted(*store_, kPrefix, tmp_.Sub("run-2/checkpoints"));
  ASSERT_TRUE(restarted.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("run-2/checkpoints")),
            (std::map<std::string, std::string>{{"empty", ""},
                                                {"model.ckpt", model},
                                                {"nested/deep/optimizer.bin", optimizer},
                                                {"step.txt", "100"}}));
}

TEST_F(CheckpointSyncTest, UnchangedFilesAreNotUploadedAgain) {
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/a"), "aaa");
  WriteLocal(tmp_.Sub("dir/b/c"), "ccc");
  ASSERT_EQ(Sync(sync).value().uploaded, 2);
  absl::StatusOr<CheckpointSyncStats> again = Sync(sync);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->uploaded, 0);
  EXPECT_EQ(again->deleted, 0);
  EXPECT_EQ(again->bytes_uploaded, 0);
}

TEST_F(CheckpointSyncTest, RestoredFilesAreNotUploadedAgain) {
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "model.ckpt"), "weights").ok());
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "sub/state"), "state").ok());
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  ASSERT_TRUE(sync.Restore().ok());
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 0);
  EXPECT_EQ(stats->deleted, 0);
}

TEST_F(CheckpointSyncTest, ChangedFilesAreUploadedAgain) {
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/grows"), "v1");
  WriteLocal(tmp_.Sub("dir/same-size"), "AAAA");
  WriteLocal(tmp_.Sub("dir/untouched"), "u");
  ASSERT_EQ(Sync(sync).value().uploaded, 3);
  WriteLocal(tmp_.Sub("dir/grows"), "version 2");                // size differs
  WriteLocal(tmp_.Sub("dir/same-size"), "BBBB", 1'600'000'100);  // mtime differs
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 2);
  EXPECT_EQ(stats->bytes_uploaded, 9 + 4);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{
                             {"grows", "version 2"}, {"same-size", "BBBB"}, {"untouched", "u"}}));
}

TEST_F(CheckpointSyncTest, SameSizeRewriteWithinOneTimestampTickIsNotMissed) {
  // A file system stamps writes with a coarse clock: a rewrite in the same
  // tick as the write the sync saw keeps (size, mtime). Simulated exactly by
  // giving both versions the same current modification time.
  struct timespec now;
  ASSERT_EQ(::clock_gettime(CLOCK_REALTIME, &now), 0);
  struct timespec times[2] = {now, now};
  std::string path = tmp_.Sub("dir/step");
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  WriteLocal(path, "100", /*mtime_s=*/0);
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  ASSERT_EQ(Sync(sync).value().uploaded, 1);
  WriteLocal(path, "101", /*mtime_s=*/0);
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  ASSERT_TRUE(sync.SyncOnce().ok());
  EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "101");
}

// A container may start a millisecond or two after Restore (a warm local
// start takes ~3 ms) and rewrite a restored file at once. A file system that
// stamps writes with the kernel's coarse clock (ticks of up to 10 ms) gives a
// same-size rewrite in the tick of the restore the (size, mtime) recorded for
// the restored file. Modelled exactly: when the restored file's stamp is one
// a write made now could still get (within 10 ms of now), the rewrite gets
// it; otherwise the rewrite gets the current time.
TEST_F(CheckpointSyncTest, SameSizeRewriteRightAfterRestoreIsNotMissed) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    const std::string dir = tmp_.Sub(absl::StrCat("run-", round));
    const std::string path = absl::StrCat(dir, "/step");
    ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "step"), "100").ok());
    CheckpointSync sync(*store_, kPrefix, dir);
    ASSERT_TRUE(sync.Restore().ok());
    struct stat restored;
    ASSERT_EQ(::stat(path.c_str(), &restored), 0);
    struct timespec now;
    ASSERT_EQ(::clock_gettime(CLOCK_REALTIME, &now), 0);
    const int64_t restored_ns = int64_t{restored.st_mtim.tv_sec} * 1'000'000'000 +
                                restored.st_mtim.tv_nsec;
    const int64_t now_ns = int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
    struct timespec stamp = restored_ns >= now_ns - 10'000'000 ? restored.st_mtim : now;
    WriteLocal(path, "101", /*mtime_s=*/0);
    struct timespec times[2] = {stamp, stamp};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->uploaded, 1);
    EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "101");
  }
}

// A clock that reads what the test set.
class SetClock : public Clock {
 public:
  absl::Time Now() const override { return now; }
  absl::Time now;
};

// A file system with whole-second stamps (ext3, HFS+, some NFS servers), or
// 2 s ones (FAT), gives a same-size rewrite anywhere in the second (or two)
// of the write the sync saw the same (size, mtime). Simulated with stamps on
// such a tick and a clock set late in it, well past the kernel's 20 ms.
TEST_F(CheckpointSyncTest, SameSizeRewriteWithinACoarseTimestampTickIsNotMissed) {
  for (const int64_t tick_s : {1, 2}) {
    SCOPED_TRACE(tick_s);
    store_ = NewInMemoryObjectStore();
    const int64_t stamp_s = tick_s == 1 ? 1'700'000'001 : 1'700'000'000;  // odd, even
    SetClock clock;
    clock.now = absl::FromUnixSeconds(stamp_s + tick_s) - absl::Milliseconds(100);
    const std::string dir = tmp_.Sub(absl::StrCat("dir-", tick_s));
    CheckpointSync sync(*store_, kPrefix, dir, /*trusted_root=*/"", &clock);
    WriteLocal(dir + "/step", "100", stamp_s);
    ASSERT_EQ(Sync(sync).value().uploaded, 1);
    WriteLocal(dir + "/step", "101", stamp_s);  // still in the tick
    clock.now += absl::Seconds(1);
    ASSERT_EQ(Sync(sync).value().uploaded, 1);
    EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "101");
    // Looked at after its tick, the stamp is settled: no more uploads.
    EXPECT_EQ(Sync(sync).value().uploaded, 0);
  }
}

// The in-memory store, but the files it restores get the stamps of a file
// system whose granularity is coarser than the kernel's clock.
class CoarseStampStore : public ObjectStore {
 public:
  CoarseStampStore(ObjectStore& inner, int64_t granularity_ns)
      : inner_(inner), granularity_ns_(granularity_ns) {}
  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    return inner_.List(prefix);
  }
  absl::StatusOr<std::string> Get(std::string_view uri) override { return inner_.Get(uri); }
  absl::Status Put(std::string_view uri, std::string_view data) override {
    return inner_.Put(uri, data);
  }
  absl::Status Delete(std::string_view uri) override { return inner_.Delete(uri); }
  absl::Status GetToFile(std::string_view uri, const std::string& path) override {
    absl::Status got = inner_.GetToFile(uri, path);
    struct stat st;
    if (!got.ok() || ::stat(path.c_str(), &st) != 0) return got;
    const struct timespec stamp = Truncated(st.st_mtim);
    const struct timespec times[2] = {stamp, stamp};
    EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
    return got;
  }
  // `t` as this file system stamps it.
  struct timespec Truncated(struct timespec t) const {
    t.tv_nsec -= t.tv_nsec % granularity_ns_;
    return t;
  }

 private:
  ObjectStore& inner_;
  const int64_t granularity_ns_;
};

// A restore on a file system with 100 ms stamps (coarser than the kernel's
// clock): wherever in its tick the restore wrote the file, a rewrite that
// follows it at once (the container starting) must get a stamp of its own.
TEST_F(CheckpointSyncTest, SameSizeRewriteRightAfterRestoreIsNotMissedWithCoarseStamps) {
  CoarseStampStore coarse(*store_, 100'000'000);
  const std::string path = tmp_.Sub("dir/step");
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "step"), "100").ok());
  CheckpointSync sync(coarse, kPrefix, tmp_.Sub("dir"));
  ASSERT_TRUE(sync.Restore().ok());
  struct timespec now;
  ASSERT_EQ(::clock_gettime(CLOCK_REALTIME, &now), 0);
  WriteLocal(path, "101", /*mtime_s=*/0);
  const struct timespec stamp = coarse.Truncated(now);
  const struct timespec times[2] = {stamp, stamp};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "101");
}

// A stamp ahead of the clock (a file server whose clock is ahead of this
// host's, a stamp set by hand) may be given again to a same-size rewrite:
// such a file is uploaded by every call until the clock has passed it.
TEST_F(CheckpointSyncTest, SameSizeRewriteWithAStampAheadOfTheClockIsNotMissed) {
  SetClock clock;
  clock.now = absl::FromUnixSeconds(1'700'000'000) + absl::Milliseconds(500);
  const int64_t ahead_s = 1'700'000'000 + 3600;  // an hour ahead
  const std::string dir = tmp_.Sub("dir");
  CheckpointSync sync(*store_, kPrefix, dir, /*trusted_root=*/"", &clock);
  WriteLocal(dir + "/step", "100", ahead_s);
  ASSERT_EQ(Sync(sync).value().uploaded, 1);
  WriteLocal(dir + "/step", "101", ahead_s);
  clock.now += absl::Minutes(10);
  ASSERT_EQ(Sync(sync).value().uploaded, 1);
  EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "101");
  // Once the clock has passed the stamp (by more than a tick), one last
  // upload records it as settled.
  clock.now = absl::FromUnixSeconds(ahead_s + 3);
  EXPECT_EQ(Sync(sync).value().uploaded, 1);
  EXPECT_EQ(Sync(sync).value().uploaded, 0);
}

// A stamp beyond 2262 does not fit int64 nanoseconds: it is clamped, and
// the file (whose stamp never settles) is uploaded by every call.
TEST_F(CheckpointSyncTest, AStampBeyondTheNanosecondRangeIsClamped) {
  const std::string dir = tmp_.Sub("dir");
  CheckpointSync sync(*store_, kPrefix, dir);
  fs::create_directories(dir);
  WriteLocal(dir + "/step", "100", /*mtime_s=*/0);
  struct timespec far[2] = {{10'000'000'000, 0}, {10'000'000'000, 0}};  // year 2286
  if (::utimensat(AT_FDCWD, (dir + "/step").c_str(), far, 0) != 0) {
    GTEST_SKIP() << "this file system cannot stamp year 2286: " << std::strerror(errno);
  }
  ASSERT_EQ(Sync(sync).value().uploaded, 1);
  EXPECT_EQ(Sync(sync).value().uploaded, 1);
  EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "100");
}

// A stamp before 1677 is clamped too, and is settled (uploaded once). ext4
// cannot keep one; tmpfs (/dev/shm) can.
TEST_F(CheckpointSyncTest, AStampBeforeTheNanosecondRangeIsClamped) {
  std::string pattern = "/dev/shm/kiln-checkpoint-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) GTEST_SKIP() << "no /dev/shm";
  const std::string dir = pattern;
  const std::string path = dir + "/step";
  WriteLocal(path, "100", /*mtime_s=*/0);
  struct timespec early[2] = {{-10'000'000'000, 0}, {-10'000'000'000, 0}};  // year 1653
  struct stat st;
  const bool kept = ::utimensat(AT_FDCWD, path.c_str(), early, 0) == 0 &&
                    ::stat(path.c_str(), &st) == 0 && st.st_mtim.tv_sec == -10'000'000'000;
  if (kept) {
    CheckpointSync sync(*store_, kPrefix, dir);
    EXPECT_EQ(Sync(sync).value().uploaded, 1);
    EXPECT_EQ(Sync(sync).value().uploaded, 0);
    EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "100");
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!kept) GTEST_SKIP() << "this file system cannot stamp year 1653";
}

// The in-memory store, but the files it restores are stamped an hour ahead
// of the clock (a file server whose clock is ahead of this host's).
class AheadStampStore : public CoarseStampStore {
 public:
  explicit AheadStampStore(ObjectStore& inner) : CoarseStampStore(inner, 1) {}
  absl::Status GetToFile(std::string_view uri, const std::string& path) override {
    absl::Status got = CoarseStampStore::GetToFile(uri, path);
    if (!got.ok()) return got;
    const struct timespec times[2] = {Ahead(), Ahead()};
    EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
    return got;
  }
  static struct timespec Ahead() {
    static const struct timespec ahead = [] {
      struct timespec now;
      ::clock_gettime(CLOCK_REALTIME, &now);
      now.tv_sec += 3600;
      return now;
    }();
    return ahead;
  }
};

// Restore does not wait for a stamp ahead of the clock, and the first sync
// uploads that file again, since a same-size rewrite may get its stamp.
TEST_F(CheckpointSyncTest, ARestoredFileStampedAheadOfTheClockIsUploadedByTheFirstSync) {
  AheadStampStore ahead(*store_);
  const std::string path = tmp_.Sub("dir/step");
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "step"), "100").ok());
  CheckpointSync sync(ahead, kPrefix, tmp_.Sub("dir"));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(sync.Restore().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // bounded by one tick, not the hour
  WriteLocal(path, "101", /*mtime_s=*/0);
  const struct timespec times[2] = {AheadStampStore::Ahead(), AheadStampStore::Ahead()};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "step")).value_or(""), "101");
}

TEST_F(CheckpointSyncTest, DeletedFilesAreDeletedFromTheStoreAndStayDeleted) {
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/ckpt-100"), "old");
  WriteLocal(tmp_.Sub("dir/ckpt-200"), "new");
  WriteLocal(tmp_.Sub("dir/old/nested"), "n");
  ASSERT_EQ(Sync(sync).value().uploaded, 3);
  fs::remove(tmp_.Sub("dir/ckpt-100"));
  fs::remove_all(tmp_.Sub("dir/old"));
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->deleted, 2);
  EXPECT_EQ(stats->uploaded, 0);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"ckpt-200", "new"}}));
  EXPECT_EQ(Sync(sync).value().deleted, 0);

  CheckpointSync restarted(*store_, kPrefix, tmp_.Sub("fresh"));
  ASSERT_TRUE(restarted.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("fresh")), (std::map<std::string, std::string>{{"ckpt-200", "new"}}));
}

TEST_F(CheckpointSyncTest, ObjectsAddedAfterRestoreAreNeitherPulledNorDeleted) {
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "algo-1/ckpt"), "mine").ok());
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  ASSERT_TRUE(sync.Restore().ok());
  // Another host of the job writes its own file under the shared prefix.
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "algo-2/ckpt"), "theirs").ok());
  WriteLocal(tmp_.Sub("dir/algo-1/ckpt"), "mine, later", 1'600'000'500);
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(stats->deleted, 0);
  EXPECT_EQ(Tree(tmp_.Sub("dir")),
            (std::map<std::string, std::string>{{"algo-1/ckpt", "mine, later"}}));
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"algo-1/ckpt", "mine, later"},
                                                             {"algo-2/ckpt", "theirs"}}));
}

TEST_F(CheckpointSyncTest, SecondJobResumesFromTheSamePrefix) {
  {
    CheckpointSync job1(*store_, kPrefix, tmp_.Sub("job-1"));
    ASSERT_TRUE(job1.Restore().ok());
    WriteLocal(tmp_.Sub("job-1/epoch-1.pt"), "e1");
    WriteLocal(tmp_.Sub("job-1/latest"), "epoch-1.pt");
    ASSERT_TRUE(job1.SyncOnce().ok());
  }
  {
    CheckpointSync job2(*store_, kPrefix, tmp_.Sub("job-2"));
    ASSERT_TRUE(job2.Restore().ok());
    EXPECT_EQ(ReadLocal(tmp_.Sub("job-2/latest")), "epoch-1.pt");
    WriteLocal(tmp_.Sub("job-2/epoch-2.pt"), "e2");
    WriteLocal(tmp_.Sub("job-2/latest"), "epoch-2.pt", 1'600'000'900);
    fs::remove(tmp_.Sub("job-2/epoch-1.pt"));
    absl::StatusOr<CheckpointSyncStats> stats = Sync(job2);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->uploaded, 2);
    EXPECT_EQ(stats->deleted, 1);
  }
  CheckpointSync job3(*store_, kPrefix, tmp_.Sub("job-3"));
  ASSERT_TRUE(job3.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("job-3")),
            (std::map<std::string, std::string>{{"epoch-2.pt", "e2"}, {"latest", "epoch-2.pt"}}));
}

TEST_F(CheckpointSyncTest, PrefixWithoutTrailingSlashCoversOnlyItsOwnKeys) {
  ASSERT_TRUE(store_->Put("mem://ckpt/job/x", "x").ok());
  ASSERT_TRUE(store_->Put("mem://ckpt/job-2/y", "y").ok());
  CheckpointSync sync(*store_, "mem://ckpt/job", tmp_.Sub("dir"));
  ASSERT_TRUE(sync.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("dir")), (std::map<std::string, std::string>{{"x", "x"}}));
  WriteLocal(tmp_.Sub("dir/z"), "z");
  ASSERT_TRUE(sync.SyncOnce().ok());
  EXPECT_EQ(store_->Get("mem://ckpt/job/z").value_or(""), "z");
}

TEST_F(CheckpointSyncTest, RestoreRefusesKeysThatLeaveTheDirectory) {
  for (const char* key : {"../evil", "a/../../evil", "/evil", "a//b", "./x", "a/./b", "a/.."}) {
    SCOPED_TRACE(key);
    std::unique_ptr<ObjectStore> store = NewInMemoryObjectStore();
    std::string prefix = "mem://ckpt/job/";
    ASSERT_TRUE(store->Put(absl::StrCat(prefix, "aaa-good"), "fine").ok());
    ASSERT_TRUE(store->Put(absl::StrCat(prefix, key), "bad").ok());
    std::string dir = tmp_.Sub(absl::StrCat("case-", std::hash<std::string>{}(key), "/inner"));
    CheckpointSync sync(*store, prefix, dir);
    absl::Status status = sync.Restore();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(prefix, key)));
    // Nothing written at all, inside or outside.
    EXPECT_THAT(Tree(fs::path(dir).parent_path().string()), IsEmpty());
  }
}

TEST_F(CheckpointSyncTest, RestoreDoesNotWriteThroughASymbolicLink) {
  fs::create_directories(tmp_.Sub("outside"));
  fs::create_directories(tmp_.Sub("dir"));
  fs::create_directory_symlink(tmp_.Sub("outside"), tmp_.Sub("dir/sub"));
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "sub/file"), "payload").ok());
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  absl::Status status = sync.Restore();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(tmp_.Sub("dir/sub")));
  EXPECT_THAT(Tree(tmp_.Sub("outside")), IsEmpty());
}

TEST_F(CheckpointSyncTest, RestoreReplacesSameNamedFilesAndKeepsOthers) {
  WriteLocal(tmp_.Sub("dir/a"), "old local a");
  WriteLocal(tmp_.Sub("dir/mine"), "only here");
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "a"), "from store").ok());
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  ASSERT_TRUE(sync.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("dir")),
            (std::map<std::string, std::string>{{"a", "from store"}, {"mine", "only here"}}));
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 1);  // "mine" is new to the store
  EXPECT_EQ(store_->Get(absl::StrCat(kPrefix, "mine")).value_or(""), "only here");
}

TEST_F(CheckpointSyncTest, TemporaryFilesAndDirectoryMarkersAreIgnored) {
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "folder/"), "").ok());
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, ".kiln-tmp-0011223344556677"), "junk").ok());
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "real"), "r").ok());
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  ASSERT_TRUE(sync.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("dir")), (std::map<std::string, std::string>{{"real", "r"}}));
  WriteLocal(tmp_.Sub("dir/.kiln-tmp-8899aabbccddeeff"), "half");
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 0);
  EXPECT_EQ(stats->deleted, 0);
  EXPECT_EQ(StoreTree().size(), 3u);
}

// A container can nest directories as deep as it likes: the walk must not
// hold a descriptor (or two) per level, or a deep enough tree makes every
// sync fail with EMFILE, and starves the rest of the process of descriptors
// while it runs. Walked here with 48 descriptors to spare, 200 levels deep.
TEST_F(CheckpointSyncTest, DeeplyNestedDirectoriesNeedNoDescriptorPerLevel) {
  std::string deep = "d";
  for (int i = 1; i < 200; ++i) absl::StrAppend(&deep, "/d");
  WriteLocal(tmp_.Sub(absl::StrCat("dir/", deep, "/bottom")), "b");
  WriteLocal(tmp_.Sub("dir/top"), "t");
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  int highest = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // the lowest free descriptor
  ASSERT_GE(highest, 0);
  ::close(highest);
  struct rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(highest + 48);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 2);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{
                             {absl::StrCat(deep, "/bottom"), "b"}, {"top", "t"}}));
}

// While it lives, takes CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH out of the
// calling thread's effective capabilities, so that root (as which these tests
// run) is refused a folder its mode denies to its owner, as any user would
// be. capset(2) changes the calling thread only, and the permitted set keeps
// both, so the destructor can raise them again. (A user without them loses
// nothing.)
class WithoutPermissionOverride {
 public:
  WithoutPermissionOverride() {
    if (::syscall(SYS_capget, &header_, saved_) != 0) return;
    struct __user_cap_data_struct lowered[2] = {saved_[0], saved_[1]};
    lowered[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    lowered_ = ::syscall(SYS_capset, &header_, lowered) == 0;
  }
  ~WithoutPermissionOverride() {
    if (lowered_) {
      EXPECT_EQ(::syscall(SYS_capset, &header_, saved_), 0);
    }
  }
  WithoutPermissionOverride(const WithoutPermissionOverride&) = delete;
  WithoutPermissionOverride& operator=(const WithoutPermissionOverride&) = delete;

 private:
  struct __user_cap_header_struct header_ = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct saved_[2] = {};
  bool lowered_ = false;
};

// A folder the sync cannot read (a container made it mode 000, or 0400:
// listable, but its entries cannot be examined) hides what it holds: its
// keys may not be deleted, but the files elsewhere must still go up, or one
// odd folder stops every checkpoint of the job from being saved.
TEST_F(CheckpointSyncTest, AnUnreadableFolderKeepsItsKeysAndTheRestIsStillSynced) {
  for (const mode_t mode : {0000, 0400}) {
    SCOPED_TRACE(mode);
    store_ = NewInMemoryObjectStore();
    const std::string dir = tmp_.Sub(absl::StrCat("dir-", mode));
    const std::string locked = absl::StrCat(dir, "/locked");
    CheckpointSync sync(*store_, kPrefix, dir);
    WriteLocal(absl::StrCat(locked, "/kept"), "k");
    WriteLocal(absl::StrCat(locked, "/deeper/also"), "d");
    WriteLocal(absl::StrCat(dir, "/old"), "o");
    ASSERT_EQ(Sync(sync).value().uploaded, 3);

    WriteLocal(absl::StrCat(dir, "/new"), "n");
    WriteLocal(absl::StrCat(dir, "/sub/newer"), "s");
    fs::remove(absl::StrCat(dir, "/old"));
    ASSERT_EQ(::chmod(locked.c_str(), mode), 0);
    absl::StatusOr<CheckpointSyncStats> stats;
    bool denied;
    {
      WithoutPermissionOverride guard;
      struct stat st;
      denied = ::fstatat(AT_FDCWD, absl::StrCat(locked, "/kept").c_str(), &st, 0) != 0 &&
               errno == EACCES;
      if (denied) stats = Sync(sync);
    }
    ASSERT_EQ(::chmod(locked.c_str(), 0700), 0);
    if (!denied) GTEST_SKIP() << "this process cannot be denied access to '" << locked << "'";
    EXPECT_EQ(stats.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(stats.status().message(), HasSubstr(absl::StrCat("'", locked)));
    // "old" went, the new files came, the unseen ones stayed.
    EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"locked/deeper/also", "d"},
                                                               {"locked/kept", "k"},
                                                               {"new", "n"},
                                                               {"sub/newer", "s"}}));

    // Readable again, its keys are still known: removed now, they are deleted.
    fs::remove_all(locked);
    stats = Sync(sync);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->uploaded, 0);
    EXPECT_EQ(stats->deleted, 2);
    EXPECT_EQ(StoreTree(),
              (std::map<std::string, std::string>{{"new", "n"}, {"sub/newer", "s"}}));
  }
}

// S3 can hold an object `a` and an object `a/b`; a directory cannot hold
// both a file and a directory named `a`. Found before anything is written,
// or a restart is left with half a checkpoint restored.
TEST_F(CheckpointSyncTest, RestoreRefusesAKeyThatIsAlsoADirectoryAndWritesNothing) {
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "a"), "file").ok());
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "a.txt"), "sorts between").ok());
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "a/b"), "below").ok());
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, "z"), "fine").ok());
  const std::string dir = tmp_.Sub("restored/inner");
  CheckpointSync sync(*store_, kPrefix, dir);
  absl::Status status = sync.Restore();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", kPrefix, "a'")));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", kPrefix, "a/b'")));
  EXPECT_THAT(Tree(tmp_.Sub("restored")), IsEmpty());
}

// Fails the next `failing_puts` uploads and `failing_deletes` deletes; the
// next `lost_put_answers` uploads are stored but reported as failed (the
// answer was lost on the way). `before_put` sees each upload start.
class FlakyStore : public ObjectStore {
 public:
  explicit FlakyStore(ObjectStore& inner) : inner_(inner) {}
  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    return inner_.List(prefix);
  }
  absl::StatusOr<std::string> Get(std::string_view uri) override { return inner_.Get(uri); }
  absl::Status Put(std::string_view uri, std::string_view data) override {
    if (before_put) before_put(uri);
    if (failing_puts > 0) {
      --failing_puts;
      return absl::UnavailableError("store is down");
    }
    if (lost_put_answers > 0) {
      --lost_put_answers;
      absl::Status stored = inner_.Put(uri, data);
      return stored.ok() ? absl::UnavailableError("connection reset before the answer") : stored;
    }
    return inner_.Put(uri, data);
  }
  absl::Status Delete(std::string_view uri) override {
    if (failing_deletes > 0) {
      --failing_deletes;
      return absl::UnavailableError("store is down");
    }
    return inner_.Delete(uri);
  }
  int failing_puts = 0;
  int failing_deletes = 0;
  int lost_put_answers = 0;
  std::function<void(std::string_view uri)> before_put;  // called as each upload starts

 private:
  ObjectStore& inner_;
};

TEST_F(CheckpointSyncTest, FailedUploadsAndDeletesAreRetriedOnTheNextCall) {
  FlakyStore flaky(*store_);
  CheckpointSync sync(flaky, kPrefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/a"), "a");
  WriteLocal(tmp_.Sub("dir/b"), "b");
  flaky.failing_puts = 1;
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(stats.status().message(), HasSubstr(tmp_.Sub("dir/a")));
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"b", "b"}}));
  stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"a", "a"}, {"b", "b"}}));

  fs::remove(tmp_.Sub("dir/a"));
  flaky.failing_deletes = 1;
  stats = Sync(sync);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(stats.status().message(), HasSubstr(absl::StrCat(kPrefix, "a")));
  stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->deleted, 1);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"b", "b"}}));
}

// A failed upload does not stop the others, so a failed call has still
// changed the store: it says how, for what was done before the failure and
// after it.
TEST_F(CheckpointSyncTest, AFailedCallCountsTheUploadsAndDeletionsItMade) {
  FlakyStore flaky(*store_);
  CheckpointSync sync(flaky, kPrefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/old"), "o");
  ASSERT_EQ(Sync(sync).value().uploaded, 1);
  fs::remove(tmp_.Sub("dir/old"));
  WriteLocal(tmp_.Sub("dir/a"), "a");
  WriteLocal(tmp_.Sub("dir/b"), "bb");
  WriteLocal(tmp_.Sub("dir/c"), "ccc");
  int puts = 0;
  flaky.before_put = [&](std::string_view) {
    if (++puts == 2) flaky.failing_puts = 1;  // "b"
  };
  CheckpointSyncStats stats;
  absl::Status status = sync.SyncOnce(&stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr(tmp_.Sub("dir/b")));
  EXPECT_EQ(stats.uploaded, 2);
  EXPECT_EQ(stats.bytes_uploaded, 1 + 3);
  EXPECT_EQ(stats.deleted, 1);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"a", "a"}, {"c", "ccc"}}));
}

// A script that keeps only its latest checkpoint writes the new one and
// deletes the old. Were the old one deleted from the store before the new
// one is there, a crash (of the host, or of a spot instance whose deadline
// came) during the upload would leave the store with no checkpoint at all.
TEST_F(CheckpointSyncTest, ACrashDuringAnUploadLeavesTheCheckpointItReplaces) {
  FlakyStore observing(*store_);
  CheckpointSync sync(observing, kPrefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/ckpt-100"), "old");
  ASSERT_TRUE(sync.SyncOnce().ok());
  WriteLocal(tmp_.Sub("dir/ckpt-200"), "new");
  fs::remove(tmp_.Sub("dir/ckpt-100"));
  std::map<std::string, std::string> during_upload;
  observing.before_put = [&](std::string_view) { during_upload = StoreTree(); };
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(stats->deleted, 1);
  EXPECT_EQ(during_upload, (std::map<std::string, std::string>{{"ckpt-100", "old"}}));
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"ckpt-200", "new"}}));
}

// An upload reported as failed may have stored the object all the same (a
// lost answer, a timeout after the store took it): if the file is then
// removed locally, the object must go too, or a restart restores a
// checkpoint the script had deleted.
TEST_F(CheckpointSyncTest, AFailedUploadThatLandedIsDeletedWithItsFile) {
  FlakyStore flaky(*store_);
  CheckpointSync sync(flaky, kPrefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/ckpt-1"), "one");
  flaky.lost_put_answers = 1;
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"ckpt-1", "one"}}));
  fs::remove(tmp_.Sub("dir/ckpt-1"));
  WriteLocal(tmp_.Sub("dir/ckpt-2"), "two");
  stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(stats->deleted, 1);
  EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{"ckpt-2", "two"}}));

  CheckpointSync restarted(*store_, kPrefix, tmp_.Sub("restored"));
  ASSERT_TRUE(restarted.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("restored")), (std::map<std::string, std::string>{{"ckpt-2", "two"}}));
}

TEST_F(CheckpointSyncTest, WorksWithTheFileStoreIncludingAFileReplacedByADirectory) {
  std::unique_ptr<ObjectStore> files = NewFileObjectStore();
  std::string prefix = absl::StrCat("file://", tmp_.Sub("bucket/ckpt"));  // no trailing '/'
  CheckpointSync sync(*files, prefix, tmp_.Sub("dir"));
  ASSERT_TRUE(sync.Restore().ok());
  WriteLocal(tmp_.Sub("dir/a"), "file a");
  WriteLocal(tmp_.Sub("dir/n/m/deep.bin"), Binary(2'000'000, 9));
  ASSERT_EQ(Sync(sync).value().uploaded, 2);
  EXPECT_EQ(Tree(tmp_.Sub("bucket/ckpt")), Tree(tmp_.Sub("dir")));

  fs::remove(tmp_.Sub("dir/a"));
  WriteLocal(tmp_.Sub("dir/a/inside"), "now a directory");
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->deleted, 1);
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(Tree(tmp_.Sub("bucket/ckpt")), Tree(tmp_.Sub("dir")));

  CheckpointSync restarted(*files, prefix + "/", tmp_.Sub("restored"));
  ASSERT_TRUE(restarted.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("restored")), Tree(tmp_.Sub("dir")));
  EXPECT_THAT(Tree(tmp_.Sub("restored")), UnorderedElementsAre(Pair("a/inside", "now a directory"),
                                                               Pair("n/m/deep.bin", ::testing::_)));
}

// And back: a directory replaced by a file of its name. The file cannot go
// up while the directory's objects are in the file store: they are deleted
// first, and the file goes up in the same round.
TEST_F(CheckpointSyncTest, WorksWithTheFileStoreIncludingADirectoryReplacedByAFile) {
  std::unique_ptr<ObjectStore> files = NewFileObjectStore();
  std::string prefix = absl::StrCat("file://", tmp_.Sub("bucket/ckpt/"));
  CheckpointSync sync(*files, prefix, tmp_.Sub("dir"));
  WriteLocal(tmp_.Sub("dir/a/inside"), "a directory");
  WriteLocal(tmp_.Sub("dir/a/deeper/second"), "also");  // (a folder is left in the store)
  ASSERT_EQ(Sync(sync).value().uploaded, 2);
  fs::remove_all(tmp_.Sub("dir/a"));
  WriteLocal(tmp_.Sub("dir/a"), "now a file");
  absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->deleted, 2);
  EXPECT_EQ(stats->uploaded, 1);
  EXPECT_EQ(Tree(tmp_.Sub("bucket/ckpt")), Tree(tmp_.Sub("dir")));
  EXPECT_EQ(Sync(sync).value().uploaded, 0);

  CheckpointSync restarted(*files, prefix, tmp_.Sub("restored"));
  ASSERT_TRUE(restarted.Restore().ok());
  EXPECT_EQ(Tree(tmp_.Sub("restored")),
            (std::map<std::string, std::string>{{"a", "now a file"}}));
}

// On a store that can hold `a` beside `a/inside` (S3, the in-memory store),
// a path that changed kind (file to directory, or back) must not end a round
// with both in the store, or the next Restore refuses the prefix: when the
// old key cannot be deleted, the new file waits, and the store keeps the old
// checkpoint whole until the next round replaces it.
TEST_F(CheckpointSyncTest, APathThatChangedKindIsNeverLeftAsBothFileAndDirectory) {
  for (const bool to_file : {true, false}) {
    SCOPED_TRACE(to_file ? "directory to file" : "file to directory");
    store_ = NewInMemoryObjectStore();
    FlakyStore flaky(*store_);
    const std::string dir = tmp_.Sub(to_file ? "to-file" : "to-dir");
    const std::string old_key = to_file ? "a/inside" : "a";
    const std::string new_key = to_file ? "a" : "a/inside";
    CheckpointSync sync(flaky, kPrefix, dir);
    WriteLocal(absl::StrCat(dir, "/", old_key), "old");
    ASSERT_EQ(Sync(sync).value().uploaded, 1);
    fs::remove_all(absl::StrCat(dir, "/a"));
    WriteLocal(absl::StrCat(dir, "/", new_key), "new");

    flaky.failing_deletes = 1;
    absl::StatusOr<CheckpointSyncStats> stats = Sync(sync);
    EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(stats.status().message(), HasSubstr(absl::StrCat(kPrefix, old_key)));
    EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{old_key, "old"}}));
    CheckpointSync restarted(*store_, kPrefix, absl::StrCat(dir, "-restored"));
    EXPECT_TRUE(restarted.Restore().ok());

    stats = Sync(sync);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->deleted, 1);
    EXPECT_EQ(stats->uploaded, 1);
    EXPECT_EQ(StoreTree(), (std::map<std::string, std::string>{{new_key, "new"}}));
  }
}

// Keys are names the container chose: a message that names a file, its key
// or its URI shows them escaped and cut, so that none can add a line to a log,
// forge text after it, or make the message long. The store's own message
// (escaped by the store) follows as it is.
TEST_F(CheckpointSyncTest, SyncErrorsShowPathsAndKeysEscapedAndCut) {
  FlakyStore flaky(*store_);
  CheckpointSync sync(flaky, kPrefix, tmp_.Sub("dir"));
  const std::string odd = "a\nb'c\"d\xff" "e";
  const std::string shown = R"(a\nb'c"d\xFFe)";
  WriteLocal(tmp_.Sub("dir/" + odd), "x");
  flaky.failing_puts = 1;
  absl::Status status = sync.SyncOnce();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), absl::StrCat("checkpoint sync: upload '", tmp_.Sub("dir/" + shown),
                                           "' to '", kPrefix, shown, "': store is down"));
  ASSERT_TRUE(sync.SyncOnce().ok());
  fs::remove(tmp_.Sub("dir/" + odd));
  flaky.failing_deletes = 1;
  status = sync.SyncOnce();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(),
            absl::StrCat("checkpoint sync: delete '", kPrefix, shown, "' (removed from '",
                         tmp_.Sub("dir/" + shown), "'): store is down"));

  // A key of 5 x 250 bytes: the message keeps the first 1024 of the path
  // and of the URI.
  std::string deep;
  for (int i = 0; i < 5; ++i) absl::StrAppend(&deep, i == 0 ? "" : "/", std::string(250, 'k'));
  WriteLocal(tmp_.Sub("dir/" + deep), "x");
  flaky.failing_puts = 1;
  status = sync.SyncOnce();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  const std::string path = tmp_.Sub("dir/" + deep);
  const std::string uri = absl::StrCat(kPrefix, deep);
  EXPECT_EQ(status.message(),
            absl::StrCat("checkpoint sync: upload '", path.substr(0, 1024), "...' to '",
                         uri.substr(0, 1024), "...': store is down"));
}

TEST_F(CheckpointSyncTest, RestoreErrorsShowKeysEscaped) {
  const std::string odd = "../a\nb'c\"d\xff" "e";
  const std::string shown = R"(../a\nb'c"d\xFFe)";
  ASSERT_TRUE(store_->Put(absl::StrCat(kPrefix, odd), "bad").ok());
  CheckpointSync sync(*store_, kPrefix, tmp_.Sub("dir"));
  absl::Status status = sync.Restore();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("checkpoint restore: object '", kPrefix, shown,
                                     "' has key '", shown, "', which is not a clean")));
  EXPECT_EQ(std::string(status.message()).find_first_of("\n\xff"), std::string::npos)
      << status;
}

TEST_F(CheckpointSyncTest, StoreErrorOnRestoreNamesThePrefix) {
  std::unique_ptr<ObjectStore> files = NewFileObjectStore();
  CheckpointSync sync(*files, "s3://bucket/ckpt", tmp_.Sub("dir"));
  absl::Status status = sync.Restore();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("s3://bucket/ckpt/"));
}

}  // namespace
}  // namespace kiln
