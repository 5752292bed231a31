// The SQLite journal for real, in a temporary directory: records come back
// after a reopen; a second writer, a corrupt file, a newer journal and a
// full disk are refused with errors that name the file; an engine recovers
// from it.
#include "kiln/journal_sqlite/sqlite_journal.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/requests.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/sim/sim.h"

namespace kiln::journal_sqlite {
namespace {

class SqliteJournalTest : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kiln-journal-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Journal> Open(bool read_only = false, int64_t max_bytes = 0) {
    absl::StatusOr<std::unique_ptr<Journal>> j =
        OpenSqliteJournal({.state_dir = dir_, .read_only = read_only, .max_bytes = max_bytes});
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *std::move(j) : nullptr;
  }
  std::map<uint64_t, JobRecord> RecoverAll(Journal& j) {
    std::map<uint64_t, JobRecord> out;
    EXPECT_TRUE(j.Recover([&](JobRecord&& r) {
                   out[r.id] = std::move(r);
                   return absl::OkStatus();
                 }).ok());
    return out;
  }
  static JobRecord Record(uint64_t id, const std::string& name) {
    JobRecord r;
    r.id = id;
    r.name = name;
    r.request = std::make_shared<v1::CreateTrainingJobRequest>(tests::MinimalRequest(""));
    r.creation_time = absl::FromUnixSeconds(1700000000);
    r.last_modified_time = r.creation_time + absl::Seconds(5);
    r.status = "InProgress";
    r.transitions.push_back(JournalTransition{"Starting", "Launching requested ML instances", "",
                                              r.creation_time, absl::InfiniteFuture()});
    return r;
  }

  std::string dir_;
};

TEST_F(SqliteJournalTest, RecordsComeBackWholeAfterReopening) {
  JobRecord full = Record(7, "full");
  full.status = "Failed";
  full.transitions[0].end = full.creation_time + absl::Seconds(1);
  full.transitions.push_back(JournalTransition{
      "Failed", "Training job failed", "1 lost instance(s)", full.creation_time + absl::Seconds(1),
      full.creation_time + absl::Seconds(1)});
  full.training_start_time = full.creation_time + absl::Milliseconds(1500);
  full.training_end_time = full.creation_time + absl::Seconds(90);
  full.failure_reason = "AlgorithmError: \xe2\x9c\x97 bad";
  full.metrics.push_back(JournalMetric{"loss", 0.125, full.creation_time + absl::Seconds(30)});
  full.held = absl::Seconds(88) + absl::Nanoseconds(3);
  full.held_since = full.creation_time + absl::Seconds(2);
  full.attempt = 3;
  full.spot_interruptions = 1;
  full.infrastructure_failures = 1;
  full.on_spot = true;
  full.stop_cause = "MaxWait";
  full.cluster =
      Cluster{"c-1", {Instance{"i-1", "algo-1", "homogeneousCluster", "ml.m5.xlarge"}}, true};
  full.containers_running = true;
  {
    std::unique_ptr<Journal> j = Open();
    j->Append(full);
    ASSERT_TRUE(j->Flush().ok());
  }
  std::unique_ptr<Journal> j = Open();
  std::map<uint64_t, JobRecord> back = RecoverAll(*j);
  ASSERT_EQ(back.size(), 1u);
  const JobRecord& r = back[7];
  EXPECT_EQ(r.name, "full");
  EXPECT_EQ(r.request->SerializeAsString(), full.request->SerializeAsString());
  EXPECT_EQ(r.status, "Failed");
  ASSERT_EQ(r.transitions.size(), 2u);
  EXPECT_EQ(r.transitions[1].detail, "1 lost instance(s)");
  EXPECT_EQ(r.transitions[0].end, full.transitions[0].end);
  EXPECT_EQ(r.training_start_time, full.training_start_time);
  EXPECT_EQ(r.failure_reason, full.failure_reason);
  ASSERT_EQ(r.metrics.size(), 1u);
  EXPECT_EQ(r.metrics[0].value, 0.125);
  EXPECT_EQ(r.held, full.held);
  EXPECT_EQ(r.held_since, full.held_since);
  EXPECT_EQ(r.attempt, 3);
  EXPECT_TRUE(r.on_spot);
  EXPECT_EQ(r.stop_cause, "MaxWait");
  ASSERT_TRUE(r.cluster.has_value());
  EXPECT_EQ(r.cluster->instances[0].host_name, "algo-1");
  EXPECT_TRUE(r.cluster->spot);
  EXPECT_TRUE(r.containers_running);
}

TEST_F(SqliteJournalTest, LatestRecordWinsAndKeepsTheRequestOfTheFirst) {
  std::unique_ptr<Journal> j = Open();
  j->Append(Record(1, "a"));
  JobRecord later = Record(1, "a");
  later.request = nullptr;  // unchanged
  later.status = "Completed";
  const Journal::Ticket t = j->Append(std::move(later));
  j->Append(Record(2, "b"));
  j->Erase(2);
  ASSERT_TRUE(j->Wait(t).ok());
  ASSERT_TRUE(j->Flush().ok());
  j.reset();
  j = Open();
  std::map<uint64_t, JobRecord> back = RecoverAll(*j);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[1].status, "Completed");
  ASSERT_NE(back[1].request, nullptr);
  EXPECT_EQ(back[1].request->role_arn(), tests::MinimalRequest("").role_arn());
}

TEST_F(SqliteJournalTest, SecondWriterIsRefusedNamingTheHoldersPid) {
  std::unique_ptr<Journal> first = Open();
  absl::StatusOr<std::unique_ptr<Journal>> second = OpenSqliteJournal({.state_dir = dir_});
  ASSERT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_NE(second.status().message().find(absl::StrCat("process ", getpid())), std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find(dir_ + "/journal.lock"), std::string::npos);
  // A reader is welcome, and sees what the writer committed.
  first->Append(Record(1, "a"));
  ASSERT_TRUE(first->Flush().ok());
  std::unique_ptr<Journal> reader = Open(/*read_only=*/true);
  EXPECT_TRUE(reader->read_only());
  EXPECT_EQ(RecoverAll(*reader).size(), 1u);
  // Once the writer is gone, the next one may write.
  first.reset();
  EXPECT_TRUE(OpenSqliteJournal({.state_dir = dir_}).ok());
}

TEST_F(SqliteJournalTest, CorruptFileIsRefusedNamingIt) {
  {
    std::ofstream out(dir_ + "/journal.sqlite");
    out << std::string(8192, 'x');
  }
  absl::StatusOr<std::unique_ptr<Journal>> j = OpenSqliteJournal({.state_dir = dir_});
  ASSERT_TRUE(absl::IsDataLoss(j.status())) << j.status();
  EXPECT_NE(j.status().message().find(dir_ + "/journal.sqlite"), std::string::npos);
  EXPECT_NE(j.status().message().find("corrupt"), std::string::npos) << j.status();
}

TEST_F(SqliteJournalTest, CorruptRecordFailsRecoveryNamingTheJob) {
  {
    std::unique_ptr<Journal> j = Open();
    j->Append(Record(4, "a"));
    ASSERT_TRUE(j->Flush().ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/journal.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET state = x'0102'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::unique_ptr<Journal> j = Open();
  absl::Status s = j->Recover([](JobRecord&&) { return absl::OkStatus(); });
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("job 4"), std::string::npos) << s;
}

TEST_F(SqliteJournalTest, JournalOfANewerKilnIsRefused) {
  Open().reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/journal.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE kiln_schema SET version = 2", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  absl::StatusOr<std::unique_ptr<Journal>> j = OpenSqliteJournal({.state_dir = dir_});
  ASSERT_TRUE(absl::IsFailedPrecondition(j.status())) << j.status();
  EXPECT_NE(j.status().message().find("newer Kiln"), std::string::npos) << j.status();
  EXPECT_NE(j.status().message().find(dir_ + "/journal.sqlite"), std::string::npos);
}

TEST_F(SqliteJournalTest, FullDiskReachesTheWaiterAndTheJournalStaysFailed) {
  std::unique_ptr<Journal> j = Open(/*read_only=*/false, /*max_bytes=*/64 * 1024);
  auto big = std::make_shared<v1::CreateTrainingJobRequest>(tests::MinimalRequest(""));
  (*big->mutable_hyper_parameters())["blob"] = std::string(2000, 'h');
  absl::Status status;
  for (uint64_t id = 1; id <= 200 && status.ok(); ++id) {
    JobRecord r = Record(id, absl::StrCat("job-", id));
    r.request = big;
    status = j->Wait(j->Append(std::move(r)));
  }
  ASSERT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_NE(status.message().find("journal.sqlite"), std::string::npos) << status;
  EXPECT_EQ(j->Flush(), status);
  EXPECT_EQ(j->Wait(j->Erase(1)), status);
}

TEST_F(SqliteJournalTest, ReadOnlyOpenWithoutJournalIsNotFound) {
  absl::StatusOr<std::unique_ptr<Journal>> j =
      OpenSqliteJournal({.state_dir = dir_, .read_only = true});
  EXPECT_TRUE(absl::IsNotFound(j.status())) << j.status();
}

TEST_F(SqliteJournalTest, EngineRecoversFinishedJobsDescribedByteForByte) {
  auto loop = NewVirtualEventLoop();
  auto provider = sim::NewSimClusterProvider(*loop, {});
  std::map<std::string, std::string> before;
  {
    std::unique_ptr<Journal> journal = Open();
    EngineOptions options;
    options.loop = loop.get();
    options.cluster_provider = provider.get();
    options.journal = journal.get();
    std::unique_ptr<Engine> engine = NewEngine(options).value();
    for (const char* name : {"one", "two"}) {
      ASSERT_TRUE(engine->CreateTrainingJob(tests::MinimalRequest(name)).ok());
    }
    ASSERT_TRUE(engine->WaitForAllTrainingJobs().ok());
    for (const char* name : {"one", "two"}) {
      v1::DescribeTrainingJobRequest d;
      d.set_training_job_name(name);
      before[name] = ToJson(engine->DescribeTrainingJob(d).value());
    }
    ASSERT_TRUE(journal->Flush().ok());
  }
  std::unique_ptr<Journal> journal = Open();
  EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.journal = journal.get();
  std::unique_ptr<Engine> engine = NewEngine(options).value();
  for (const auto& [name, json] : before) {
    v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(name);
    EXPECT_EQ(ToJson(engine->DescribeTrainingJob(d).value()), json);
  }
  EXPECT_TRUE(
      absl::IsAlreadyExists(engine->CreateTrainingJob(tests::MinimalRequest("one")).status()));
}

}  // namespace
}  // namespace kiln::journal_sqlite
