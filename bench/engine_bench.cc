// The engine in virtual time: jobs through the full lifecycle per second of
// host time, and resident bytes kept per finished job.
//
// Each iteration submits N jobs, one per virtual second (so ~700 run at once
// with the sim provider's default 60 s provisioning, 30 s image, 600 s run,
// 5 s upload), and runs the loop until all have Completed. Every job goes
// through validation, Starting, Downloading (one channel), Training,
// Uploading, Completed: 7 loop events (its submission, the grant, the image,
// the channel, the start, the exit, the upload). Targets: >= 200,000 jobs/s,
// <= 2 KiB per finished job.
//
// Three ways to submit the jobs:
//   whole:    CreateTrainingJob(request), the template renamed: each request
//             is validated whole and copied into its job;
//   distinct: the same, with a hyperparameter of its own in each request
//             (one more map entry to validate and copy);
//   prepared: CreateTrainingJob(prepared, name) from one PrepareTrainingJob
//             of the template: each job's name is validated and the jobs
//             share the request (what a sweep or a batch can do).
#include <malloc.h>
#include <unistd.h>

#include <cstdio>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "google/protobuf/text_format.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"

namespace {

kiln::v1::CreateTrainingJobRequest Template() {
  kiln::v1::CreateTrainingJobRequest r;
  google::protobuf::TextFormat::ParseFromString(R"pb(
    role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
    hyper_parameters { key: "lr" value: "0.1" }
    algorithm_specification { training_image: "train:latest" training_input_mode: "File" }
    input_data_config {
      channel_name: "train"
      data_source { s3_data_source { s3_data_type: "S3Prefix" s3_uri: "s3://bucket/train/" } }
    }
    output_data_config { s3_output_path: "s3://bucket/out" }
    resource_config { instance_type: "ml.m5.xlarge" instance_count: 1 volume_size_in_gb: 30 }
    stopping_condition { max_runtime_in_seconds: 3600 }
  )pb", &r);
  return r;
}

// Bytes of memory the process has resident (Linux: /proc/self/statm), after
// giving malloc's free memory back to the system: what a run keeps, whether in
// malloc's heap or mapped apart (a large event loop's slot table is,
// lib/core/internal/huge_pages.h; mallinfo() would not see it).
size_t ResidentBytes() {
  malloc_trim(0);
  long pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    long size = 0;
    if (std::fscanf(f, "%ld %ld", &size, &pages) != 2) pages = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(pages) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

enum class Submit { kWhole, kDistinct, kPrepared };

void BM_EngineLifecycle(benchmark::State& state, Submit how) {
  const bool prepare = how == Submit::kPrepared;
  const int jobs = static_cast<int>(state.range(0));
  kiln::v1::CreateTrainingJobRequest request = Template();
  std::string name;
  double bytes_per_job = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const size_t resident_before = ResidentBytes();
    state.ResumeTiming();
    auto loop = kiln::NewVirtualEventLoop();
    auto provider = kiln::sim::NewSimClusterProvider(*loop);
    auto channel = kiln::sim::NewSimDataChannel(*loop);
    kiln::EngineOptions options;
    options.loop = loop.get();
    options.cluster_provider = provider.get();
    options.data_channel = channel.get();
    auto engine = kiln::NewEngine(std::move(options)).value();
    kiln::PreparedTrainingJob prepared;
    if (prepare) prepared = engine->PrepareTrainingJob(request).value();
    int submitted = 0;
    // A self-rescheduling submitter: one job per virtual second, each the
    // template under a new name.
    std::function<void()> submit = [&] {
      name = absl::StrCat("job-", submitted);
      bool ok;
      if (prepare) {
        ok = engine->CreateTrainingJob(prepared, name).ok();
      } else {
        request.set_training_job_name(name);
        if (how == Submit::kDistinct) {
          (*request.mutable_hyper_parameters())["seed"] = absl::StrCat(submitted);
        }
        ok = engine->CreateTrainingJob(request).ok();  // the engine copies what it keeps
      }
      if (!ok) state.SkipWithError("CreateTrainingJob failed");
      // (By reference: a copy of `submit` would be a heap block per job, the
      // bench's own cost rather than the engine's.)
      if (++submitted < jobs) loop->ScheduleAfter(absl::Seconds(1), [&submit] { submit(); });
    };
    loop->ScheduleAfter(absl::ZeroDuration(), [&submit] { submit(); });
    loop->RunUntilIdle();
    if (engine->active_jobs() != 0) state.SkipWithError("jobs still active");
    state.PauseTiming();
    bytes_per_job = static_cast<double>(ResidentBytes() - resident_before) / jobs;
    // Tearing down is no job's lifecycle: the engine, then what it used.
    engine.reset();
    channel.reset();
    provider.reset();
    loop.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * jobs);
  state.counters["jobs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * jobs), benchmark::Counter::kIsRate);
  state.counters["bytes_per_finished_job"] = bytes_per_job;
}
BENCHMARK_CAPTURE(BM_EngineLifecycle, whole, Submit::kWhole)
    ->Arg(100000)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_EngineLifecycle, distinct, Submit::kDistinct)
    ->Arg(100000)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_EngineLifecycle, prepared, Submit::kPrepared)
    ->Arg(100000)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
