// The local backend's log streams read as CloudWatch Logs shows them
// (kiln/local/local.h: NewLocalLogReader), written as its runs write them
// (local/log_stream.h), with each line's time.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/local/local.h"
#include "local/internal/fs.h"
#include "local/local_test_util.h"
#include "local/log_stream.h"

namespace kiln::local {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class LogReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-log-reader-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    logs_ = root_ + "/logs";
    reader_ = NewLocalLogReader(logs_);
  }
  void TearDown() override { ASSERT_TRUE(internal::RemoveTree(root_).ok()); }

  std::vector<std::string> Messages(const std::string& stream, const LogRange& range = {},
                                    bool forward = true) {
    absl::StatusOr<std::vector<LogEvent>> events = reader_->ReadEvents(stream, range, forward);
    EXPECT_TRUE(events.ok()) << events.status();
    std::vector<std::string> out;
    if (events.ok()) {
      for (const LogEvent& e : *events) out.push_back(e.message);
    }
    return out;
  }

  std::vector<LogEvent> Events(const std::string& stream, const LogRange& range = {}) {
    absl::StatusOr<std::vector<LogEvent>> events = reader_->ReadEvents(stream, range, true);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<LogEvent>{};
  }

  std::string root_, logs_;
  std::unique_ptr<LogReader> reader_;
};

TEST_F(LogReaderTest, LinesBecomeEventsOnceWholeAndTheLastOneWhenTheRunEnds) {
  internal::RunLog run;
  run.Name(logs_ + "/job-a/algo-1-100");
  internal::LogStream stream(run);
  ASSERT_EQ(stream.Open(), "");
  const absl::Time before = absl::Now();
  stream.AppendOutput("first\nsec");
  EXPECT_THAT(Messages("job-a/algo-1-100"), ElementsAre("first"));
  stream.AppendOutput("ond\r\n");
  stream.AppendPlatformLine("a note");
  stream.AppendOutput("no newline");
  EXPECT_THAT(Messages("job-a/algo-1-100"), ElementsAre("first", "second", "[kiln] a note"));
  ASSERT_EQ(stream.Close(), "");
  const absl::Time after = absl::Now();

  const std::vector<LogEvent> events = Events("job-a/algo-1-100");
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[3].message, "no newline");
  int64_t position = 0;
  absl::Time last = absl::InfinitePast();
  for (const LogEvent& e : events) {
    EXPECT_EQ(e.begin, position);
    EXPECT_GT(e.end, e.begin);
    position = e.end;
    EXPECT_GE(e.timestamp, last);
    EXPECT_GE(e.timestamp, absl::FromUnixMicros(absl::ToUnixMicros(before)));
    EXPECT_LE(e.timestamp, after);
    last = e.timestamp;
  }
  // The index is kept out of the job's directory.
  EXPECT_THAT(testing::ListDir(logs_ + "/job-a"), ElementsAre("algo-1-100"));
}

TEST_F(LogReaderTest, ReadsResumeFromPositionsForwardAndBackward) {
  internal::RunLog run;
  run.Name(logs_ + "/job-b/algo-2-7");
  internal::LogStream stream(run);
  ASSERT_EQ(stream.Open(), "");
  for (const char* line : {"one\n", "two\n", "three\n", "four\n"}) stream.AppendOutput(line);
  const std::vector<LogEvent> all = Events("job-b/algo-2-7");
  ASSERT_EQ(all.size(), 4u);

  LogRange range;
  range.from = all[1].end;
  EXPECT_THAT(Messages("job-b/algo-2-7", range), ElementsAre("three", "four"));
  range.max_events = 1;
  EXPECT_THAT(Messages("job-b/algo-2-7", range), ElementsAre("three"));

  LogRange back;
  back.max_events = 2;
  EXPECT_THAT(Messages("job-b/algo-2-7", back, false), ElementsAre("three", "four"));
  back.to = all[2].begin;
  EXPECT_THAT(Messages("job-b/algo-2-7", back, false), ElementsAre("one", "two"));
  back.to = 0;
  EXPECT_THAT(Messages("job-b/algo-2-7", back, false), IsEmpty());

  LogRange bytes;
  bytes.max_bytes = 4;  // "one" fits, "two" would not: at least one event anyway
  EXPECT_THAT(Messages("job-b/algo-2-7", bytes), ElementsAre("one"));
  range = {};
  range.from = all[3].end;
  EXPECT_THAT(Messages("job-b/algo-2-7", range), IsEmpty());
}

TEST_F(LogReaderTest, TimesSelectEvents) {
  internal::RunLog run;
  run.Name(logs_ + "/job-c/algo-1-5");
  internal::LogStream stream(run);
  ASSERT_EQ(stream.Open(), "");
  stream.AppendOutput("early\n");
  absl::SleepFor(absl::Milliseconds(20));
  stream.AppendOutput("middle\n");
  absl::SleepFor(absl::Milliseconds(20));
  stream.AppendOutput("late\n");
  const std::vector<LogEvent> all = Events("job-c/algo-1-5");
  ASSERT_EQ(all.size(), 3u);
  ASSERT_LT(all[0].timestamp, all[1].timestamp);
  ASSERT_LT(all[1].timestamp, all[2].timestamp);

  LogRange range;
  range.start_time = all[1].timestamp;
  EXPECT_THAT(Messages("job-c/algo-1-5", range), ElementsAre("middle", "late"));
  range.end_time = all[2].timestamp;
  EXPECT_THAT(Messages("job-c/algo-1-5", range), ElementsAre("middle"));
  EXPECT_THAT(Messages("job-c/algo-1-5", range, false), ElementsAre("middle"));
}

// Reads that skip ahead (a window at the end for the last events, the time
// index for a start time) give what reading every event would.
TEST_F(LogReaderTest, SkippingAheadGivesWhatReadingEverythingGives) {
  internal::RunLog run;
  run.Name(logs_ + "/big/algo-1-1");
  internal::LogStream stream(run);
  ASSERT_EQ(stream.Open(), "");
  for (int i = 0; i < 20000; ++i) stream.AppendOutput("line number " + std::to_string(i) + "\n");
  absl::SleepFor(absl::Milliseconds(5));
  for (int i = 0; i < 3000; ++i) stream.AppendOutput("later " + std::to_string(i) + "\n");
  LogRange everything;
  everything.max_events = 1 << 20;
  everything.max_bytes = size_t{1} << 30;
  const std::vector<LogEvent> all = Events("big/algo-1-1", everything);
  ASSERT_EQ(all.size(), 23000u);

  // The last events of a range, read one by one: as many as fit.
  auto last_of = [&](const LogRange& r) {
    std::vector<int64_t> begins;
    size_t bytes = 0;
    for (auto e = all.rbegin(); e != all.rend(); ++e) {
      if (e->end > r.to || e->timestamp >= r.end_time || e->timestamp < r.start_time) continue;
      if (begins.size() == r.max_events ||
          (!begins.empty() && bytes + e->message.size() > r.max_bytes)) {
        break;
      }
      bytes += e->message.size();
      begins.insert(begins.begin(), e->begin);
    }
    return begins;
  };
  LogRange r;
  r.max_bytes = 40000;  // (a window of 80,000 bytes at the end first)
  for (const size_t n : {size_t{1}, size_t{3}, size_t{5000}}) {
    for (const absl::Time end :
         {absl::InfiniteFuture(), all[20000].timestamp, all[500].timestamp}) {
      r.max_events = n;
      r.end_time = end;
      std::vector<int64_t> got;
      const absl::StatusOr<std::vector<LogEvent>> read =
          reader_->ReadEvents("big/algo-1-1", r, false);
      ASSERT_TRUE(read.ok()) << read.status();
      for (const LogEvent& e : *read) got.push_back(e.begin);
      EXPECT_EQ(got, last_of(r)) << n << " " << end;
      EXPECT_FALSE(got.empty());
    }
  }
  LogRange before = everything;
  before.max_events = 4;
  before.to = all[10000].begin;
  EXPECT_THAT(
      Messages("big/algo-1-1", before, false),
      ElementsAre("line number 9996", "line number 9997", "line number 9998", "line number 9999"));

  LogRange later = everything;
  later.start_time = all[20000].timestamp;
  ASSERT_GT(later.start_time, all[19999].timestamp);
  const std::vector<LogEvent> after = Events("big/algo-1-1", later);
  ASSERT_EQ(after.size(), 3000u);
  EXPECT_EQ(after.front().message, "later 0");
  EXPECT_EQ(after.front().begin, all[20000].begin);
  later.max_events = 2;
  EXPECT_THAT(Messages("big/algo-1-1", later, false), ElementsAre("later 2998", "later 2999"));
}

TEST_F(LogReaderTest, LongLinesComeInPiecesAsObserversGetThem) {
  internal::RunLog run;
  run.Name(logs_ + "/job-d/algo-1-9");
  internal::LogStream stream(run);
  ASSERT_EQ(stream.Open(), "");
  const std::string big(internal::kMaxLineBytes * 2 + 10, 'x');
  stream.AppendOutput(big + "\nafter\n");
  const std::vector<LogEvent> events = Events("job-d/algo-1-9");
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].message.size(), internal::kMaxLineBytes);
  EXPECT_EQ(events[1].message.size(), internal::kMaxLineBytes);
  EXPECT_EQ(events[2].message, std::string(10, 'x'));
  EXPECT_EQ(events[3].message, "after");
  EXPECT_EQ(events[1].begin, static_cast<int64_t>(internal::kMaxLineBytes));
}

TEST_F(LogReaderTest, ListsStreamsByPrefixWithTheirTimes) {
  for (const char* name : {"/train-1/algo-1-100", "/train-1/algo-2-100", "/train-1/algo-1-100-2",
                           "/train-2/algo-1-300", "/other/algo-1-50"}) {
    internal::RunLog run;
    run.Name(logs_ + name);
    internal::LogStream stream(run);
    ASSERT_EQ(stream.Open(), "");
    stream.AppendOutput("hello\n");
    ASSERT_EQ(stream.Close(), "");
  }
  ASSERT_TRUE(internal::MakeDirs(logs_ + "/train-1/not-a-stream").ok());

  auto names = [&](std::string_view prefix) {
    std::vector<std::string> out;
    absl::StatusOr<std::vector<LogStreamInfo>> streams = reader_->ListStreams(prefix);
    EXPECT_TRUE(streams.ok()) << streams.status();
    if (streams.ok()) {
      for (const LogStreamInfo& s : *streams) out.push_back(s.name);
    }
    return out;
  };
  EXPECT_THAT(names("train-1/"),
              ElementsAre("train-1/algo-1-100", "train-1/algo-1-100-2", "train-1/algo-2-100"));
  EXPECT_THAT(names("train"), ElementsAre("train-1/algo-1-100", "train-1/algo-1-100-2",
                                          "train-1/algo-2-100", "train-2/algo-1-300"));
  EXPECT_THAT(names("train-1/algo-2"), ElementsAre("train-1/algo-2-100"));
  EXPECT_THAT(names("nothing"), IsEmpty());
  EXPECT_EQ(names("").size(), 5u);

  absl::StatusOr<std::vector<LogStreamInfo>> one = reader_->ListStreams("train-2/");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].creation_time, absl::FromUnixSeconds(300));
  EXPECT_EQ((*one)[0].stored_bytes, 6);
  EXPECT_NE((*one)[0].first_event_time, absl::InfinitePast());
  EXPECT_GE((*one)[0].last_event_time, (*one)[0].first_event_time);
}

TEST_F(LogReaderTest, NamesOutsideTheStreamsAreNotFound) {
  ASSERT_TRUE(internal::MakeDirs(logs_ + "/job").ok());
  ASSERT_TRUE(internal::WriteFileAtomic(root_ + "/secret", "x\n").ok());
  for (const char* name : {"job/algo-1-1", "../secret", "job/../../secret", "job/secret",
                           ".times/job/algo-1-1", "/job/algo-1-1", "job", ""}) {
    absl::StatusOr<std::vector<LogEvent>> events = reader_->ReadEvents(name, {}, true);
    EXPECT_EQ(events.status().code(), absl::StatusCode::kNotFound) << name;
  }
}

TEST_F(LogReaderTest, AStreamWithoutTimesTakesItsModificationTime) {
  ASSERT_TRUE(internal::MakeDirs(logs_ + "/old").ok());
  ASSERT_TRUE(internal::WriteFileAtomic(logs_ + "/old/algo-1-1", "a\nb\npartial").ok());
  const std::vector<LogEvent> events = Events("old/algo-1-1");
  ASSERT_EQ(events.size(), 2u);  // (no closing record: "partial" may still grow)
  struct stat st;
  ASSERT_EQ(stat((logs_ + "/old/algo-1-1").c_str(), &st), 0);
  EXPECT_EQ(events[0].timestamp, absl::TimeFromTimespec(st.st_mtim));
}

}  // namespace
}  // namespace kiln::local
