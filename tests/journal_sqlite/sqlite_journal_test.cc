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
  full.held_until = full.creation_time + absl::Seconds(60) + absl::Nanoseconds(7);
  full.warm_pool = true;
  full.pool.emplace();
  full.pool->status = "Terminated";
  full.pool->retained_seconds = 0;
  full.pool->not_kept_reason = "the warm-pool quota for ml.m5.xlarge (2 instances) is in use";
  full.pool->chain_start = full.creation_time + absl::Seconds(3);
  JobRecord pooled = Record(8, "pooled");
  pooled.status = "Completed";
  pooled.warm_pool = true;
  pooled.pool.emplace();
  pooled.pool->status = "Available";
  pooled.pool->chain_start = pooled.creation_time;
  pooled.pool->cluster =
      Cluster{"c-2", {Instance{"i-2", "algo-1", "homogeneousCluster", "ml.m5.xlarge"}}, false};
  pooled.pool->available_since = pooled.creation_time + absl::Seconds(100);
  pooled.pool->expires_at = pooled.creation_time + absl::Seconds(700);
  pooled.pool->keep_alive_updated = true;
  {
    std::unique_ptr<Journal> j = Open();
    j->Append(full);
    j->Append(pooled);
    ASSERT_TRUE(j->Flush().ok());
  }
  std::unique_ptr<Journal> j = Open();
  std::map<uint64_t, JobRecord> back = RecoverAll(*j);
  ASSERT_EQ(back.size(), 2u);
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
  EXPECT_EQ(r.held_until, full.held_until);
  EXPECT_TRUE(r.warm_pool);
  ASSERT_TRUE(r.pool.has_value());
  EXPECT_EQ(r.pool->status, "Terminated");
  EXPECT_EQ(r.pool->retained_seconds, std::optional<int32_t>(0));
  EXPECT_EQ(r.pool->reused_by, "");
  EXPECT_EQ(r.pool->not_kept_reason, full.pool->not_kept_reason);
  EXPECT_EQ(r.pool->chain_start, full.pool->chain_start);
  EXPECT_FALSE(r.pool->cluster.has_value());

  const JobRecord& p = back[8];
  EXPECT_EQ(p.held_until, absl::InfinitePast());
  ASSERT_TRUE(p.pool.has_value());
  EXPECT_EQ(p.pool->status, "Available");
  EXPECT_FALSE(p.pool->retained_seconds.has_value());
  ASSERT_TRUE(p.pool->cluster.has_value());
  EXPECT_EQ(p.pool->cluster->id, "c-2");
  EXPECT_EQ(p.pool->cluster->instances[0].id, "i-2");
  EXPECT_FALSE(p.pool->cluster->spot);
  EXPECT_EQ(p.pool->available_since, pooled.pool->available_since);
  EXPECT_EQ(p.pool->expires_at, pooled.pool->expires_at);
  EXPECT_TRUE(p.pool->keep_alive_updated);
}

TEST_F(SqliteJournalTest, LastBillingMarkComesBackOnTheRecordsThatHoldInstances) {
  JobRecord holding = Record(1, "holding");
  holding.held_since = holding.creation_time + absl::Seconds(2);
  holding.held_until = holding.creation_time + absl::Seconds(10);
  JobRecord later = Record(2, "later");  // recorded after the mark
  later.held_since = later.creation_time + absl::Seconds(200);
  later.held_until = later.creation_time + absl::Seconds(200);
  JobRecord idle = Record(3, "idle");
  {
    std::unique_ptr<Journal> j = Open();
    EXPECT_EQ(j->billing_mark_period(), absl::Seconds(10));
    j->Append(holding);
    j->Append(idle);
    j->Mark(holding.creation_time + absl::Seconds(50));
    j->Mark(holding.creation_time + absl::Seconds(100));  // only the latest counts
    j->Append(later);
    ASSERT_TRUE(j->Flush().ok());
  }
  std::unique_ptr<Journal> j = Open(/*read_only=*/true);
  std::map<uint64_t, JobRecord> back = RecoverAll(*j);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[1].held_until, holding.creation_time + absl::Seconds(100));
  EXPECT_EQ(back[2].held_until, later.held_until);
  EXPECT_EQ(back[3].held_until, absl::InfinitePast());
}

// The schema version of the journal in `dir`.
int64_t SchemaVersion(const std::string& dir) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open((dir + "/journal.sqlite").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT max(version) FROM kiln_schema", -1, &s, nullptr),
            SQLITE_OK);
  EXPECT_EQ(sqlite3_step(s), SQLITE_ROW);
  const int64_t version = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return version;
}

TEST_F(SqliteJournalTest, JournalOfTheFirstVersionIsReadAndMigratedWhenWritten) {
  JobRecord old = Record(3, "old");
  old.status = "Completed";
  old.training_start_time = old.creation_time + absl::Seconds(1);
  old.training_end_time = old.creation_time + absl::Seconds(2);
  old.held = absl::Seconds(1);
  {
    std::unique_ptr<Journal> j = Open();
    j->Append(old);
    ASSERT_TRUE(j->Flush().ok());
  }
  // Rewritten as the first version wrote it: state version 1, without the
  // billing mark (the second of two InfinitePast times: held_since,
  // held_until), and schema version 1.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/journal.sqlite").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* select = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT state FROM jobs WHERE id = 3", -1, &select, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(select), SQLITE_ROW);
  std::string state(static_cast<const char*>(sqlite3_column_blob(select, 0)),
                    sqlite3_column_bytes(select, 0));
  sqlite3_finalize(select);
  ASSERT_EQ(state[0], 2);
  const std::string past("\0\0\0\0\0\0\0\x80", 8);
  const size_t at = state.find(past + past);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(state.find(past + past, at + 1), std::string::npos);
  state.erase(at + 8, 8);
  state[0] = 1;
  sqlite3_stmt* update = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE jobs SET state = ?1 WHERE id = 3", -1, &update, nullptr),
            SQLITE_OK);
  sqlite3_bind_blob(update, 1, state.data(), static_cast<int>(state.size()), SQLITE_STATIC);
  ASSERT_EQ(sqlite3_step(update), SQLITE_DONE);
  sqlite3_finalize(update);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE kiln_schema SET version = 1", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  // Read as it is, read-only, leaving it at version 1.
  {
    std::unique_ptr<Journal> reader = Open(/*read_only=*/true);
    std::map<uint64_t, JobRecord> back = RecoverAll(*reader);
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[3].status, "Completed");
    EXPECT_EQ(back[3].held, absl::Seconds(1));
    EXPECT_EQ(back[3].held_until, absl::InfinitePast());
    EXPECT_FALSE(back[3].pool.has_value());
  }
  EXPECT_EQ(SchemaVersion(dir_), 1);
  // Opened for writing, it becomes version 2, and still reads.
  std::unique_ptr<Journal> j = Open();
  EXPECT_EQ(SchemaVersion(dir_), 2);
  std::map<uint64_t, JobRecord> back = RecoverAll(*j);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[3].training_end_time, old.training_end_time);
  // And takes billing marks.
  j->Mark(old.creation_time + absl::Seconds(9));
  j->Append(Record(4, "new"));
  EXPECT_TRUE(j->Flush().ok());
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
  ASSERT_EQ(sqlite3_exec(db, "UPDATE kiln_schema SET version = 3", nullptr, nullptr, nullptr),
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
    // With warm pools: "one" keeps its cluster, "two" reuses it and keeps it
    // until its keep-alive ends.
    for (const char* name : {"one", "two"}) {
      v1::CreateTrainingJobRequest request = tests::MinimalRequest(name);
      request.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
      ASSERT_TRUE(engine->CreateTrainingJob(request).ok());
      ASSERT_TRUE(engine->WaitForAllTrainingJobs().ok());
    }
    loop->RunUntil(loop->Now() + absl::Minutes(2));
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
  EXPECT_NE(before["one"].find("\"ReusedByJob\":\"two\""), std::string::npos) << before["one"];
  EXPECT_NE(before["two"].find("\"ResourceRetainedBillableTimeInSeconds\":60"), std::string::npos)
      << before["two"];
  EXPECT_TRUE(
      absl::IsAlreadyExists(engine->CreateTrainingJob(tests::MinimalRequest("one")).status()));
}

}  // namespace
}  // namespace kiln::journal_sqlite
