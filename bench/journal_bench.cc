// The cost of the journal: jobs through the full lifecycle per second of
// host time, in virtual time, with the SQLite journal (kiln::journal_sqlite,
// WAL, synced at every commit) and without a journal, in the same process.
//
// Each iteration submits N jobs from one PrepareTrainingJob, one per virtual
// second, from a callback of the loop (as a simulated workload or a server
// thread's marshalled call does: such a call queues its record and does not
// wait), runs the loop until every job has ended, then waits until the
// journal has everything on disk (Journal::Flush): that wait is timed too.
// Every job records Starting (launching, then preparing), Downloading,
// Training, Uploading and Completed; the journal's thread writes whatever has
// queued in one transaction. Target: >= 20,000 jobs/s journaled at 100,000
// jobs (docs/performance.md).
//
// BM_JournalDescribe: DescribeTrainingJob of a finished job without a
// journal, with one, and after recovery. Target: as fast with the journal.
//
// BM_JournalRecover: the time NewEngine takes to rebuild N finished jobs from
// the journal (opening it included), after a run like the one above (not
// timed). Target: under 10 s for 1,000,000 jobs.
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "google/protobuf/text_format.h"
#include "kiln/engine.h"
#include "kiln/journal_sqlite/sqlite_journal.h"
#include "kiln/sim/sim.h"

namespace {

kiln::v1::CreateTrainingJobRequest Template() {
  kiln::v1::CreateTrainingJobRequest r;
  google::protobuf::TextFormat::ParseFromString(
      R"pb(
        role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
        hyper_parameters { key: "lr" value: "0.1" }
        algorithm_specification { training_image: "train:latest" training_input_mode: "File" }
        output_data_config { s3_output_path: "s3://bucket/out" }
        resource_config { instance_type: "ml.m5.xlarge" instance_count: 1 volume_size_in_gb: 30 }
        stopping_condition { max_runtime_in_seconds: 3600 }
      )pb",
      &r);
  return r;
}

// Runs `jobs` jobs to their end on an engine over `journal` (if any), and
// the journal's Flush; `timed`: pauses the timing before tearing down.
void RunJobs(benchmark::State& state, kiln::Journal* journal, int jobs, bool timed) {
  const kiln::v1::CreateTrainingJobRequest request = Template();
  auto loop = kiln::NewVirtualEventLoop();
  auto provider = kiln::sim::NewSimClusterProvider(*loop);
  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.journal = journal;
  auto engine = kiln::NewEngine(std::move(options)).value();
  const kiln::PreparedTrainingJob prepared = engine->PrepareTrainingJob(request).value();
  int submitted = 0;
  std::string name;
  std::function<void()> submit = [&] {
    name = absl::StrCat("job-", submitted);
    if (!engine->CreateTrainingJob(prepared, name).ok()) {
      state.SkipWithError("CreateTrainingJob failed");
    }
    if (++submitted < jobs) loop->ScheduleAfter(absl::Seconds(1), [&submit] { submit(); });
  };
  loop->ScheduleAfter(absl::ZeroDuration(), [&submit] { submit(); });
  loop->RunUntilIdle();
  if (engine->active_jobs() != 0) state.SkipWithError("jobs still active");
  if (journal != nullptr && !journal->Flush().ok()) state.SkipWithError("journal failed");
  if (timed) state.PauseTiming();  // (tearing down is no job's lifecycle)
}

void BM_JournalLifecycle(benchmark::State& state, bool journaled) {
  const int jobs = static_cast<int>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    char pattern[] = "/tmp/kiln-journal-bench-XXXXXX";
    const std::string dir = mkdtemp(pattern);
    state.ResumeTiming();
    {
      std::unique_ptr<kiln::Journal> journal;
      if (journaled) journal = kiln::journal_sqlite::OpenSqliteJournal({.state_dir = dir}).value();
      RunJobs(state, journal.get(), jobs, /*timed=*/true);
    }
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * jobs);
  state.counters["jobs_per_s"] = benchmark::Counter(static_cast<double>(state.iterations() * jobs),
                                                    benchmark::Counter::kIsRate);
}

void BM_JournalRecover(benchmark::State& state) {
  const int jobs = static_cast<int>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    char pattern[] = "/tmp/kiln-journal-bench-XXXXXX";
    const std::string dir = mkdtemp(pattern);
    {
      auto journal = kiln::journal_sqlite::OpenSqliteJournal({.state_dir = dir}).value();
      RunJobs(state, journal.get(), jobs, /*timed=*/false);
    }
    state.ResumeTiming();
    auto journal = kiln::journal_sqlite::OpenSqliteJournal({.state_dir = dir}).value();
    auto loop = kiln::NewVirtualEventLoop();
    auto provider = kiln::sim::NewSimClusterProvider(*loop);
    kiln::EngineOptions options;
    options.loop = loop.get();
    options.cluster_provider = provider.get();
    options.journal = journal.get();
    auto engine = kiln::NewEngine(std::move(options));
    state.PauseTiming();
    if (!engine.ok()) state.SkipWithError("recovery failed");
    engine->reset();
    provider.reset();
    loop.reset();
    journal.reset();
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
  }
  state.counters["jobs_per_s"] = benchmark::Counter(static_cast<double>(state.iterations() * jobs),
                                                    benchmark::Counter::kIsRate);
}
// DescribeTrainingJob of finished jobs (10,000 of them, each described in
// turn), on an engine without a journal, on one with the SQLite journal that
// ran the jobs, and on one that recovered them from that journal.
enum class DescribeOn { kNoJournal, kJournal, kRecovered };

void BM_JournalDescribe(benchmark::State& state, DescribeOn on) {
  constexpr int kJobs = 10000;
  char pattern[] = "/tmp/kiln-journal-bench-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  const kiln::v1::CreateTrainingJobRequest request = Template();
  std::unique_ptr<kiln::Journal> journal;
  if (on != DescribeOn::kNoJournal) {
    journal = kiln::journal_sqlite::OpenSqliteJournal({.state_dir = dir}).value();
  }
  auto loop = kiln::NewVirtualEventLoop();
  auto provider = kiln::sim::NewSimClusterProvider(*loop);
  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.journal = journal.get();
  auto engine = kiln::NewEngine(options).value();
  const kiln::PreparedTrainingJob prepared = engine->PrepareTrainingJob(request).value();
  for (int i = 0; i < kJobs; ++i) {
    loop->ScheduleAfter(absl::Seconds(i), [&engine, &prepared, &state, i] {
      if (!engine->CreateTrainingJob(prepared, absl::StrCat("job-", i)).ok()) {
        state.SkipWithError("CreateTrainingJob failed");
      }
    });
  }
  loop->RunUntilIdle();
  if (on == DescribeOn::kRecovered) {
    engine.reset();
    if (!journal->Flush().ok()) state.SkipWithError("journal failed");
    journal.reset();
    journal = kiln::journal_sqlite::OpenSqliteJournal({.state_dir = dir}).value();
    options.journal = journal.get();
    engine = kiln::NewEngine(options).value();
  }
  std::vector<kiln::v1::DescribeTrainingJobRequest> names(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    names[i].set_training_job_name(absl::StrCat("job-", (i * 7919) % kJobs));
  }
  size_t next = 0;
  for (auto _ : state) {
    absl::StatusOr<kiln::v1::DescribeTrainingJobResponse> d =
        engine->DescribeTrainingJob(names[next]);
    if (!d.ok() || d->training_job_status() != "Completed") state.SkipWithError("not Completed");
    benchmark::DoNotOptimize(d);
    next = next + 1 == names.size() ? 0 : next + 1;
  }
  state.counters["describes_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  engine.reset();
  journal.reset();
  std::filesystem::remove_all(dir);
}

BENCHMARK_CAPTURE(BM_JournalDescribe, no_journal, DescribeOn::kNoJournal)->UseRealTime();
BENCHMARK_CAPTURE(BM_JournalDescribe, sqlite, DescribeOn::kJournal)->UseRealTime();
BENCHMARK_CAPTURE(BM_JournalDescribe, recovered, DescribeOn::kRecovered)->UseRealTime();

BENCHMARK_CAPTURE(BM_JournalLifecycle, off, false)
    ->Arg(100000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_JournalLifecycle, sqlite, true)
    ->Arg(100000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK(BM_JournalRecover)
    ->Arg(1000000)
    ->Arg(100000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
