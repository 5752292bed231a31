// kiln::agent's outbox (kiln/agent/outbox.h): numbering that goes on across
// reopening and reclaiming, reads within a byte limit, acknowledgement, a torn
// tail cut off and other damage reported, one opener per directory, a full
// disk, and a process killed while it appends.
#include "kiln/agent/outbox.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/internal/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

using ::testing::HasSubstr;

constexpr size_t kHeader = 16;

// A payload that tells its event: "event <seq>:" and letters up to `n` bytes.
std::string Payload(uint64_t seq, size_t n = 100) {
  std::string p = absl::StrCat("event ", seq, ":");
  while (p.size() < n) p.push_back(static_cast<char>('a' + (seq + p.size()) % 26));
  p.resize(std::max(n, p.size()));
  return p;
}

// The segment files of `dir`, by name.
std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string SegmentName(uint64_t first) {
  std::string digits = std::to_string(first);
  return std::string(20 - digits.size(), '0') + digits + ".log";
}

// Flips one byte of `path` at `offset`.
void FlipByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x20));
}

// Every event after `after`, read in pieces of at most `max_bytes`.
std::vector<OutboxEvent> ReadAll(const Outbox& outbox, uint64_t after = 0,
                                 size_t max_bytes = 1 << 20) {
  std::vector<OutboxEvent> all;
  while (true) {
    absl::StatusOr<std::vector<OutboxEvent>> some = outbox.Read(after, max_bytes);
    EXPECT_TRUE(some.ok()) << some.status();
    if (!some.ok() || some->empty()) return all;
    after = some->back().seq;
    for (auto& e : *some) all.push_back(std::move(e));
  }
}

// The seqs of `events`.
std::vector<uint64_t> Seqs(const std::vector<OutboxEvent>& events) {
  std::vector<uint64_t> seqs;
  for (const auto& e : events) seqs.push_back(e.seq);
  return seqs;
}

std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
  std::vector<uint64_t> seqs;
  for (uint64_t s = first; s <= last; ++s) seqs.push_back(s);
  return seqs;
}

class OutboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln_outbox_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/outbox";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<Outbox> OpenOk(OutboxOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Outbox>> outbox = Outbox::Open(dir_, options);
    EXPECT_TRUE(outbox.ok()) << outbox.status();
    return outbox.ok() ? std::move(*outbox) : nullptr;
  }

  // Appends events last_seq() + 1 .. `last` with Payload(seq, size).
  static void AppendUpTo(Outbox& outbox, uint64_t last, size_t size = 100) {
    for (uint64_t s = outbox.last_seq() + 1; s <= last; ++s) {
      absl::StatusOr<uint64_t> seq = outbox.Append(Payload(s, size));
      ASSERT_TRUE(seq.ok()) << seq.status();
      ASSERT_EQ(*seq, s);
    }
  }

  std::string root_;
  std::string dir_;
};

TEST(Crc32cTest, KnownValuesOnEitherPath) {
  const std::string check = "123456789";
  EXPECT_EQ(internal::Crc32c(0, check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(internal::Crc32cPortable(0, check.data(), check.size()), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(internal::Crc32c(0, zeros.data(), zeros.size()), 0x8A9136AAu);
  // Continued in pieces of every length, as one.
  const std::string text = Payload(7, 1000);
  const uint32_t whole = internal::Crc32cPortable(0, text.data(), text.size());
  for (size_t cut = 0; cut <= 20; ++cut) {
    EXPECT_EQ(internal::Crc32c(internal::Crc32c(0, text.data(), cut), text.data() + cut,
                               text.size() - cut),
              whole);
  }
}

TEST_F(OutboxTest, NewDirectoryIsMadePrivate) {
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(outbox->dir(), dir_);
  EXPECT_EQ(outbox->last_seq(), 0u);
  EXPECT_EQ(outbox->acknowledged(), 0u);
}

TEST_F(OutboxTest, OptionsOutOfRangeAreInvalid) {
  OutboxOptions options;
  options.segment_bytes = 0;
  EXPECT_EQ(Outbox::Open(dir_, options).status().code(), absl::StatusCode::kInvalidArgument);
  options.segment_bytes = int64_t{2} << 30;
  EXPECT_EQ(Outbox::Open(dir_, options).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Outbox::Open("", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(OutboxTest, NumbersGoOnAcrossReopen) {
  {
    auto outbox = OpenOk();
    ASSERT_NE(outbox, nullptr);
    EXPECT_EQ(outbox->Append("one").value(), 1u);
    EXPECT_EQ(outbox->Append("").value(), 2u);
    EXPECT_EQ(outbox->Append("three").value(), 3u);
  }
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  EXPECT_EQ(outbox->last_seq(), 3u);
  EXPECT_EQ(outbox->Append("four").value(), 4u);
  std::vector<OutboxEvent> all = ReadAll(*outbox);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].payload, "one");
  EXPECT_EQ(all[1].payload, "");
  EXPECT_EQ(all[2].payload, "three");
  EXPECT_EQ(all[3].payload, "four");
  EXPECT_EQ(Seqs(all), Range(1, 4));
}

TEST_F(OutboxTest, ReadStaysWithinMaxBytesButGivesAtLeastOne) {
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  AppendUpTo(*outbox, 10);
  EXPECT_EQ(Seqs(outbox->Read(0, 250).value()), Range(1, 2));
  EXPECT_EQ(Seqs(outbox->Read(0, 300).value()), Range(1, 3));
  EXPECT_EQ(Seqs(outbox->Read(0, 50).value()), Range(1, 1));
  EXPECT_EQ(Seqs(outbox->Read(0, 0).value()), Range(1, 1));
  EXPECT_EQ(Seqs(outbox->Read(3, 1000).value()), Range(4, 10));
  EXPECT_TRUE(outbox->Read(10, 1000).value().empty());
  EXPECT_TRUE(outbox->Read(99, 1000).value().empty());
  std::vector<OutboxEvent> some = outbox->Read(6, 1000).value();
  ASSERT_FALSE(some.empty());
  EXPECT_EQ(some[0].payload, Payload(7));
  // An event larger than the limit comes alone.
  ASSERT_TRUE(outbox->Append(std::string(5000, 'x')).ok());
  EXPECT_EQ(Seqs(outbox->Read(10, 100).value()), Range(11, 11));
  EXPECT_EQ(outbox->Read(10, 100).value()[0].payload, std::string(5000, 'x'));
}

TEST_F(OutboxTest, ReadFindsEveryStartAcrossSegments) {
  OutboxOptions options;
  options.segment_bytes = 100 * (kHeader + 20);  // 100 events a segment
  auto outbox = OpenOk(options);
  ASSERT_NE(outbox, nullptr);
  AppendUpTo(*outbox, 350, 20);
  EXPECT_EQ(Segments(dir_).size(), 4u);
  for (uint64_t after : {0, 1, 62, 63, 64, 65, 99, 100, 101, 127, 128, 199, 250, 349}) {
    std::vector<OutboxEvent> events = outbox->Read(after, 30 * 20).value();
    ASSERT_EQ(Seqs(events), Range(after + 1, std::min<uint64_t>(after + 30, 350))) << after;
    for (const auto& e : events) ASSERT_EQ(e.payload, Payload(e.seq, 20));
  }
  EXPECT_EQ(Seqs(ReadAll(*outbox, 0, 1 << 20)), Range(1, 350));
  EXPECT_EQ(Seqs(ReadAll(*outbox, 0, 7)), Range(1, 350));
  // The same after reopening (the index rebuilt from the files).
  outbox.reset();
  outbox = OpenOk(options);
  ASSERT_NE(outbox, nullptr);
  for (uint64_t after : {0, 63, 64, 150, 299, 300, 349}) {
    EXPECT_EQ(Seqs(outbox->Read(after, 5 * 20).value()),
              Range(after + 1, std::min<uint64_t>(after + 5, 350)))
        << after;
  }
}

TEST_F(OutboxTest, AcknowledgeDeletesWholeSegmentsAndNumbersGoOn) {
  OutboxOptions options;
  options.segment_bytes = 2 * (kHeader + 100);  // 2 events a segment
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    AppendUpTo(*outbox, 10);
    EXPECT_EQ(Segments(dir_),
              (std::vector<std::string>{SegmentName(1), SegmentName(3), SegmentName(5),
                                        SegmentName(7), SegmentName(9)}));
    ASSERT_TRUE(outbox->Acknowledge(3).ok());
    EXPECT_EQ(outbox->acknowledged(), 3u);
    EXPECT_EQ(Segments(dir_), (std::vector<std::string>{SegmentName(3), SegmentName(5),
                                                        SegmentName(7), SegmentName(9)}));
    // Acknowledged events are not read again.
    EXPECT_EQ(Seqs(ReadAll(*outbox)), Range(4, 10));
    // Lower: nothing changes; beyond the last: refused.
    EXPECT_TRUE(outbox->Acknowledge(2).ok());
    EXPECT_EQ(outbox->acknowledged(), 3u);
    absl::Status beyond = outbox->Acknowledge(11);
    EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(beyond.message(), HasSubstr("the last event is 10"));
    EXPECT_EQ(outbox->acknowledged(), 3u);
  }
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    EXPECT_EQ(outbox->acknowledged(), 3u);
    EXPECT_EQ(outbox->last_seq(), 10u);
    EXPECT_EQ(Seqs(ReadAll(*outbox)), Range(4, 10));
    // Everything: no segment is left.
    ASSERT_TRUE(outbox->Acknowledge(10).ok());
    EXPECT_TRUE(Segments(dir_).empty());
    EXPECT_TRUE(outbox->Read(0, 1000).value().empty());
    EXPECT_FALSE(outbox->WaitFor(10, absl::ZeroDuration()));
  }
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    EXPECT_EQ(outbox->last_seq(), 10u);
    EXPECT_EQ(outbox->acknowledged(), 10u);
    EXPECT_EQ(outbox->Append(Payload(11)).value(), 11u);
    EXPECT_EQ(Segments(dir_), std::vector<std::string>{SegmentName(11)});
    ASSERT_TRUE(outbox->Acknowledge(11).ok());
    EXPECT_EQ(outbox->Append(Payload(12)).value(), 12u);
  }
  auto outbox = OpenOk(options);
  ASSERT_NE(outbox, nullptr);
  EXPECT_EQ(outbox->last_seq(), 12u);
  std::vector<OutboxEvent> all = ReadAll(*outbox);
  ASSERT_EQ(Seqs(all), Range(12, 12));
  EXPECT_EQ(all[0].payload, Payload(12));
}

TEST_F(OutboxTest, SegmentsLeftByAnInterruptedAcknowledgeAreDeletedAtOpen) {
  OutboxOptions options;
  options.segment_bytes = 2 * (kHeader + 100);
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    AppendUpTo(*outbox, 6);
  }
  // What a kill between writing the number and deleting leaves: 4 acknowledged.
  const std::string saved = root_ + "/saved";
  std::filesystem::create_directory(saved);
  for (const auto& name : Segments(dir_)) {
    std::filesystem::copy_file(dir_ + "/" + name, saved + "/" + name);
  }
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    ASSERT_TRUE(outbox->Acknowledge(4).ok());
  }
  for (const auto& name : Segments(saved)) {
    std::filesystem::copy_file(saved + "/" + name, dir_ + "/" + name,
                               std::filesystem::copy_options::skip_existing);
  }
  ASSERT_EQ(Segments(dir_).size(), 3u);
  auto outbox = OpenOk(options);
  ASSERT_NE(outbox, nullptr);
  EXPECT_EQ(Segments(dir_), std::vector<std::string>{SegmentName(5)});
  EXPECT_EQ(Seqs(ReadAll(*outbox)), Range(5, 6));
}

TEST_F(OutboxTest, TornTailIsTruncatedAway) {
  {
    auto outbox = OpenOk();
    ASSERT_NE(outbox, nullptr);
    AppendUpTo(*outbox, 5);
  }
  const std::string segment = dir_ + "/" + SegmentName(1);
  const auto whole = static_cast<int64_t>(std::filesystem::file_size(segment));
  ASSERT_EQ(whole, 5 * static_cast<int64_t>(kHeader + 100));
  // The last record cut short.
  std::filesystem::resize_file(segment, whole - 7);
  {
    auto outbox = OpenOk();
    ASSERT_NE(outbox, nullptr);
    EXPECT_EQ(outbox->last_seq(), 4u);
    EXPECT_EQ(std::filesystem::file_size(segment), 4 * (kHeader + 100));
    std::vector<OutboxEvent> all = ReadAll(*outbox);
    ASSERT_EQ(Seqs(all), Range(1, 4));
    for (const auto& e : all) EXPECT_EQ(e.payload, Payload(e.seq));
    EXPECT_EQ(outbox->Append("again").value(), 5u);
    EXPECT_EQ(outbox->Read(4, 100).value()[0].payload, "again");
  }
  // Zeros after the last record (a size written before its data).
  std::filesystem::resize_file(segment, std::filesystem::file_size(segment) + 4096);
  {
    auto outbox = OpenOk();
    ASSERT_NE(outbox, nullptr);
    EXPECT_EQ(outbox->last_seq(), 5u);
    EXPECT_EQ(outbox->Append(Payload(6)).value(), 6u);
  }
  // The last record's payload not as written.
  FlipByte(segment, static_cast<int64_t>(std::filesystem::file_size(segment)) - 3);
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  EXPECT_EQ(outbox->last_seq(), 5u);
  std::vector<OutboxEvent> all = ReadAll(*outbox);
  ASSERT_EQ(Seqs(all), Range(1, 5));
  EXPECT_EQ(all[4].payload, "again");
}

TEST_F(OutboxTest, DamageInAnEarlierSegmentIsDataLoss) {
  OutboxOptions options;
  options.segment_bytes = 3 * (kHeader + 100);
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    AppendUpTo(*outbox, 9);
  }
  const std::string first = dir_ + "/" + SegmentName(1);
  const int64_t second_record = static_cast<int64_t>(kHeader) + 100;
  FlipByte(first, second_record + kHeader + 10);
  absl::StatusOr<std::unique_ptr<Outbox>> outbox = Outbox::Open(dir_, options);
  ASSERT_EQ(outbox.status().code(), absl::StatusCode::kDataLoss) << outbox.status();
  EXPECT_THAT(outbox.status().message(), HasSubstr(first));
  EXPECT_THAT(outbox.status().message(), HasSubstr(absl::StrCat("offset ", second_record)));
  EXPECT_THAT(outbox.status().message(), HasSubstr("checksum"));
  // Cut short: the tail of a segment that is not the last is not a torn tail.
  FlipByte(first, second_record + kHeader + 10);
  std::filesystem::resize_file(first, 3 * second_record - 1);
  outbox = Outbox::Open(dir_, options);
  ASSERT_EQ(outbox.status().code(), absl::StatusCode::kDataLoss) << outbox.status();
  EXPECT_THAT(outbox.status().message(), HasSubstr(first));
  EXPECT_THAT(outbox.status().message(), HasSubstr(absl::StrCat("offset ", 2 * second_record)));
}

TEST_F(OutboxTest, DamageBeforeTheLastRecordOfTheLastSegmentIsDataLoss) {
  {
    auto outbox = OpenOk();
    ASSERT_NE(outbox, nullptr);
    AppendUpTo(*outbox, 5);
  }
  const std::string segment = dir_ + "/" + SegmentName(1);
  const int64_t record = static_cast<int64_t>(kHeader) + 100;
  // A payload byte of event 2, then the seq of event 3 (not only the payload
  // checked), then a length that runs past the end of the file.
  for (int64_t offset : {record + 16 + 50, 2 * record + 8, record + 2}) {
    FlipByte(segment, offset);
    absl::StatusOr<std::unique_ptr<Outbox>> outbox = Outbox::Open(dir_);
    ASSERT_EQ(outbox.status().code(), absl::StatusCode::kDataLoss) << offset;
    EXPECT_THAT(outbox.status().message(), HasSubstr(segment));
    EXPECT_THAT(outbox.status().message(),
                HasSubstr(absl::StrCat("offset ", offset - offset % record)));
    FlipByte(segment, offset);
  }
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  EXPECT_EQ(outbox->last_seq(), 5u);
}

TEST_F(OutboxTest, MissingSegmentIsDataLoss) {
  OutboxOptions options;
  options.segment_bytes = 2 * (kHeader + 100);
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    AppendUpTo(*outbox, 6);
  }
  std::filesystem::remove(dir_ + "/" + SegmentName(3));
  absl::StatusOr<std::unique_ptr<Outbox>> outbox = Outbox::Open(dir_, options);
  ASSERT_EQ(outbox.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(outbox.status().message(), HasSubstr(SegmentName(5)));
  EXPECT_THAT(outbox.status().message(), HasSubstr("where event 3 was due"));
  // The first one gone: events 1 and 2 are in no segment.
  std::filesystem::remove(dir_ + "/" + SegmentName(1));
  outbox = Outbox::Open(dir_, options);
  ASSERT_EQ(outbox.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(outbox.status().message(), HasSubstr("events 1 to 4 are in no segment"));
}

TEST_F(OutboxTest, DamagedAcknowledgedFileIsDataLoss) {
  {
    auto outbox = OpenOk();
    ASSERT_NE(outbox, nullptr);
    AppendUpTo(*outbox, 3);
    ASSERT_TRUE(outbox->Acknowledge(2).ok());
  }
  FlipByte(dir_ + "/acknowledged", 0);
  absl::StatusOr<std::unique_ptr<Outbox>> outbox = Outbox::Open(dir_);
  ASSERT_EQ(outbox.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(outbox.status().message(), HasSubstr(dir_ + "/acknowledged"));
}

TEST_F(OutboxTest, WaitForWakesOnAppendFromAnotherThread) {
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  constexpr uint64_t kEvents = 200;
  // The waiter waits for each event in turn; most waits begin before the
  // append they wait for, so they are woken by it.
  const absl::Time start = absl::Now();
  std::vector<uint64_t> seen;
  std::thread waiter([&] {
    for (uint64_t after = 0; after < kEvents; ++after) {
      if (!outbox->WaitFor(after, absl::Seconds(60))) return;
      seen.push_back(outbox->Read(after, 1).value().at(0).seq);
    }
  });
  for (uint64_t s = 1; s <= kEvents; ++s) {
    ASSERT_EQ(outbox->Append(Payload(s)).value(), s);
    std::this_thread::yield();
  }
  waiter.join();
  EXPECT_EQ(seen, Range(1, kEvents));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST_F(OutboxTest, WaitForEndsAtTimeoutWakeAndClose) {
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  ASSERT_TRUE(outbox->Append("x").ok());
  EXPECT_TRUE(outbox->WaitFor(0, absl::ZeroDuration()));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(outbox->WaitFor(1, absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));

  // Wake and Close: the waiter returns false; they are called until it has.
  for (bool close : {false, true}) {
    absl::Notification returned;
    bool result = true;
    std::thread waiter([&] {
      result = outbox->WaitFor(1, absl::Seconds(120));
      returned.Notify();
    });
    while (!returned.WaitForNotificationWithTimeout(absl::Milliseconds(1))) {
      if (close) {
        outbox->Close();
      } else {
        outbox->Wake();
      }
    }
    waiter.join();
    EXPECT_FALSE(result);
  }
  EXPECT_FALSE(outbox->WaitFor(1, absl::Seconds(120)));  // closed: at once
  EXPECT_EQ(outbox->Append("y").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(outbox->Read(0, 10).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(outbox->Acknowledge(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(outbox->last_seq(), 1u);
  // Closed, the directory can be opened again.
  auto again = OpenOk();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->last_seq(), 1u);
}

TEST_F(OutboxTest, SecondOpenIsRefusedInThisProcessAndAnother) {
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  absl::StatusOr<std::unique_ptr<Outbox>> second = Outbox::Open(dir_);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr(dir_));

  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    absl::StatusOr<std::unique_ptr<Outbox>> other = Outbox::Open(dir_);
    _exit(other.status().code() == absl::StatusCode::kFailedPrecondition ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the other process opened the outbox";

  outbox.reset();
  EXPECT_TRUE(Outbox::Open(dir_).ok());
}

TEST_F(OutboxTest, ThreadsAppendReadAndAcknowledgeAtOnce) {
  OutboxOptions options;
  options.segment_bytes = 4096;
  auto outbox = OpenOk(options);
  ASSERT_NE(outbox, nullptr);
  constexpr int kWriters = 4;
  constexpr int kEach = 3000;
  std::mutex mu;
  std::map<uint64_t, std::string> appended;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kEach; ++i) {
        std::string payload = absl::StrCat("writer ", w, " event ", i);
        absl::StatusOr<uint64_t> seq = outbox->Append(payload);
        if (!seq.ok()) return;
        std::lock_guard<std::mutex> lock(mu);
        appended[*seq] = std::move(payload);
      }
    });
  }
  // The reader reads on as events come and acknowledges what it read.
  std::vector<OutboxEvent> read;
  std::thread reader([&] {
    uint64_t after = 0;
    while (after < kWriters * kEach && outbox->WaitFor(after, absl::Seconds(60))) {
      absl::StatusOr<std::vector<OutboxEvent>> some = outbox->Read(after, 500);
      if (!some.ok() || some->empty() || some->front().seq != after + 1) return;
      after = some->back().seq;
      if (!outbox->Acknowledge(after).ok()) return;
      for (auto& e : *some) read.push_back(std::move(e));
    }
  });
  for (auto& t : writers) t.join();
  reader.join();
  ASSERT_EQ(appended.size(), static_cast<size_t>(kWriters * kEach));
  ASSERT_EQ(Seqs(read), Range(1, kWriters * kEach));
  for (const auto& e : read) ASSERT_EQ(e.payload, appended[e.seq]) << e.seq;
  EXPECT_TRUE(Segments(dir_).empty());
}

// Fills the outbox with 1000-byte events until an Append fails, checks that
// it is ResourceExhausted naming a segment and that nothing of it is left,
// then that Appends work once Acknowledge freed segments.
void FillUntilFull(const std::string& dir, OutboxOptions options, uint64_t* last) {
  auto outbox = Outbox::Open(dir, options).value();
  absl::StatusOr<uint64_t> seq;
  for (int i = 0; i < 100000; ++i) {
    seq = outbox->Append(Payload(outbox->last_seq() + 1, 1000));
    if (!seq.ok()) break;
  }
  ASSERT_FALSE(seq.ok()) << "never full";
  EXPECT_EQ(seq.status().code(), absl::StatusCode::kResourceExhausted) << seq.status();
  EXPECT_THAT(seq.status().message(), HasSubstr(dir + "/"));
  EXPECT_THAT(seq.status().message(), HasSubstr(".log"));
  *last = outbox->last_seq();
  ASSERT_GT(*last, 2u);
  for (const auto& name : Segments(dir)) {
    EXPECT_EQ(std::filesystem::file_size(dir + "/" + name) % (kHeader + 1000), 0u) << name;
  }
  // Still full: refused again, nothing changes.
  EXPECT_EQ(outbox->Append(Payload(*last + 1, 1000)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(outbox->last_seq(), *last);
  std::vector<OutboxEvent> all = ReadAll(*outbox);
  ASSERT_EQ(Seqs(all), Range(1, *last));
  for (const auto& e : all) ASSERT_EQ(e.payload, Payload(e.seq, 1000));
}

TEST_F(OutboxTest, FullDiskIsResourceExhaustedAndRecovers) {
  ASSERT_TRUE(std::filesystem::create_directory(dir_));
  if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0) {
    GTEST_SKIP() << "cannot mount a 64 KiB tmpfs on " << dir_ << " (" << strerror(errno)
                 << "; needs root or CAP_SYS_ADMIN), so the full disk is not tested here; "
                 << "FileSizeLimitIsResourceExhaustedAndRecovers covers the same path";
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir_};
  OutboxOptions options;
  options.segment_bytes = 8 * (kHeader + 1000);
  uint64_t last = 0;
  FillUntilFull(dir_, options, &last);
  if (HasFailure()) return;
  {
    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    EXPECT_EQ(outbox->last_seq(), last);
    // Freeing the first segments makes room.
    ASSERT_TRUE(outbox->Acknowledge(16).ok());
    EXPECT_EQ(outbox->Append(Payload(last + 1, 1000)).value(), last + 1);
  }
  auto outbox = OpenOk(options);
  ASSERT_NE(outbox, nullptr);
  EXPECT_EQ(Seqs(ReadAll(*outbox)), Range(17, last + 1));
}

TEST_F(OutboxTest, FileSizeLimitIsResourceExhaustedAndRecovers) {
  // RLIMIT_FSIZE: a write past it is cut short, the next fails with EFBIG
  // (SIGXFSZ ignored, as it is here).
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &old_action), 0);
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit limit = old_limit;
  limit.rlim_cur = 5 * (kHeader + 1000) + 500;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  uint64_t last = 0;
  FillUntilFull(dir_, {}, &last);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ASSERT_EQ(sigaction(SIGXFSZ, &old_action, nullptr), 0);
  if (HasFailure()) return;
  EXPECT_EQ(last, 5u);
  auto outbox = OpenOk();
  ASSERT_NE(outbox, nullptr);
  EXPECT_EQ(outbox->Append(Payload(6, 1000)).value(), 6u);
  EXPECT_EQ(Seqs(ReadAll(*outbox)), Range(1, 6));
}

TEST_F(OutboxTest, KilledWhileAppendingLeavesAWholePrefix) {
  OutboxOptions options;
  options.segment_bytes = 64 << 10;
  auto size_of = [](uint64_t seq) -> size_t { return 20 + (seq * 7919) % 300; };
  uint64_t before = 0;
  for (int round = 0; round < 3; ++round) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(ready[0]);
      absl::StatusOr<std::unique_ptr<Outbox>> outbox = Outbox::Open(dir_, options);
      if (!outbox.ok()) _exit(2);
      const uint64_t start = (*outbox)->last_seq();
      for (uint64_t s = start + 1; s <= start + 2000000; ++s) {
        if (!(*outbox)->Append(Payload(s, size_of(s))).ok()) _exit(3);
        // Told after 3,000 events: the parent kills it from then on.
        if (s == start + 3000 && write(ready[1], "r", 1) != 1) _exit(4);
      }
      _exit(5);
    }
    close(ready[1]);
    char c = 0;
    const ssize_t n = read(ready[0], &c, 1);
    close(ready[0]);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_EQ(n, 1) << "the child ended early, status " << status;
    ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;

    auto outbox = OpenOk(options);
    ASSERT_NE(outbox, nullptr);
    const uint64_t k = outbox->last_seq();
    EXPECT_GE(k, before + 3000);
    std::vector<OutboxEvent> all = ReadAll(*outbox);
    ASSERT_EQ(all.size(), k);
    for (uint64_t s = 1; s <= k; ++s) {
      ASSERT_EQ(all[s - 1].seq, s);
      ASSERT_EQ(all[s - 1].payload, Payload(s, size_of(s))) << s;
    }
    before = k;
  }
}

}  // namespace
}  // namespace kiln::agent
