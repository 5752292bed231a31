// The controller of the crash drill (bench/crash_drill.py): an engine on a
// real-time loop with the SQLite journal of a state directory and the local
// backend (process runtime, containers that outlive a crash for a lease),
// running a fixed set of jobs at once. The drill kills it with SIGKILL at
// random moments and starts it again on the same state directory, until one
// run lasts until every job has ended.
//
//   crash_drill --state-dir DIR --work-dir DIR [--jobs N] [--steps-factor F]
//               [--lease SECONDS]
//
// Each run: writes the jobs' images and data into the work directory (once;
// a file is written whole or not at all), recovers the journal's jobs
// (NewEngine), creates each job of the plan the journal does not hold
// (ResourceInUse: it is there), a warm pool's follow-up once the job whose
// pool it reuses has ended, and waits until every job has ended. It exits 0
// once all have ended, whatever their status.
//
// The plan (the same in every run), by the job's index i modulo 6:
//   0: keeps a warm pool (KeepAlivePeriodInSeconds) for job i+1;
//   1: the follow-up, created once job i-1 has ended (its pool reused when
//      that pool is still Available);
//   2, 4: managed spot (MaxWaitTimeInSeconds), with a CheckpointConfig: the
//      script saves its step after each line and resumes from it;
//   3: plain; 5: plain, except job 5, whose script fails after its lines
//      (it ends Failed: AlgorithmError).
// Every job has a RetryStrategy of 30 attempts: a run lost where it cannot be
// taken back (e.g. a controller killed while provisioning) is retried. The
// script of job i prints "<job> step k" for k = 1..K_i (4 lines a second,
// K_i = (20 + 7i mod 25) times --steps-factor), then "<job> done".
//
// Output (stdout, one line per event, each written whole):
//   start <unix ns>                      the process's start, first of all
//   plan <job> <kind> <steps>            the plan, job by job
//   recovered <job> <status>             a job the journal held unfinished
//   accepted <job> / exists <job>        CreateTrainingJob OK / ResourceInUse
//   event <unix ns> <job> <status>|<secondary>|<message>   a status event
//   pool <holder> <follow-up> <status> <reused by> <message>   when a follow-up
//       starts training: the WarmPoolStatus of the job whose pool it could
//       reuse, and the last status message of that job
//   first-line <unix ns> <job> resumed|new   the first log line this process
//       got for the job: "resumed" for a job that was unfinished at recovery
//       and had no status event in this process before the line (its run was
//       taken back), "new" otherwise
//   job <name> <status> <billable s> <attempts> <start ns> <end ns> <pool>  at
//       the end; <pool>: WarmPoolStatus.Status as this engine describes it, or -
// Exit status: 0 when every job ended, 1 on an error (named on stderr).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "kiln/engine.h"
#include "kiln/event_loop.h"
#include "kiln/journal_sqlite/sqlite_journal.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/spot.h"

namespace {

// One line to stdout, written whole with one write(2) (the process may be
// killed at any moment; what it printed stays in the file).
void Out(const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string text = line + "\n";
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = write(STDOUT_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

int64_t UnixNanos(absl::Time t) { return absl::ToUnixNanos(t); }

enum class Kind { kPoolHolder, kFollowUp, kSpot, kPlain, kFailing };

struct PlannedJob {
  std::string name;
  Kind kind;
  int steps;
  std::string after;  // a follow-up: the job whose pool it reuses
};

std::string JobName(int i) { return absl::StrFormat("drill-%02d", i); }

std::vector<PlannedJob> Plan(int n, int steps_factor) {
  std::vector<PlannedJob> jobs;
  for (int i = 0; i < n; ++i) {
    PlannedJob j{JobName(i), Kind::kPlain, (20 + (7 * i) % 25) * steps_factor, ""};
    switch (i % 6) {
      case 0:
        j.kind = i + 1 < n ? Kind::kPoolHolder : Kind::kPlain;
        break;
      case 1:
        j.kind = Kind::kFollowUp;
        j.after = JobName(i - 1);
        break;
      case 2:
      case 4:
        j.kind = Kind::kSpot;
        break;
      case 5:
        j.kind = i == 5 ? Kind::kFailing : Kind::kPlain;
        break;
      default:
        break;
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// Writes `text` to `path` whole: through a temporary file and a rename.
bool WriteWhole(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.close();
    if (!f) return false;
  }
  return chmod(tmp.c_str(), mode) == 0 && rename(tmp.c_str(), path.c_str()) == 0;
}

bool MakeDir(const std::string& path) { return mkdir(path.c_str(), 0755) == 0 || errno == EEXIST; }

std::string Script(const PlannedJob& j) {
  std::string s = absl::StrCat("#!/bin/sh\njob=", j.name, "\nsteps=", j.steps, "\nk=1\n");
  if (j.kind == Kind::kSpot) {
    absl::StrAppend(&s,
                    "ckpt=\"$SAGEMAKER_BASE_DIR/checkpoints\"\n"
                    "if [ -f \"$ckpt/step\" ]; then\n"
                    "  k=$(( $(cat \"$ckpt/step\") + 1 ))\n"
                    "  echo \"$job resumed at step $k\"\n"
                    "fi\n");
  }
  absl::StrAppend(&s, "while [ $k -le $steps ]; do\n  echo \"$job step $k\"\n");
  if (j.kind == Kind::kSpot) {
    absl::StrAppend(&s, "  echo $k >\"$ckpt/step.tmp\" && mv \"$ckpt/step.tmp\" \"$ckpt/step\"\n");
  }
  absl::StrAppend(&s,
                  "  sleep 0.25\n  k=$((k + 1))\ndone\n"
                  "echo \"$job done\"\n"
                  "echo done >\"$SM_MODEL_DIR/model.txt\"\n");
  if (j.kind == Kind::kFailing) {
    absl::StrAppend(&s, "echo \"drill failure\" >\"$SAGEMAKER_BASE_DIR/output/failure\"\nexit 3\n");
  }
  return s;
}

bool WriteImages(const std::string& work, const std::vector<PlannedJob>& plan) {
  if (!MakeDir(work) || chmod(work.c_str(), 0755) != 0) return false;
  if (!MakeDir(work + "/images") || !MakeDir(work + "/data")) return false;
  if (!WriteWhole(work + "/data/part-0.csv", "1,2\n3,4\n", 0644)) return false;
  for (const PlannedJob& j : plan) {
    const std::string dir = absl::StrCat(work, "/images/", j.name);
    if (!MakeDir(dir) || !WriteWhole(dir + "/train", Script(j), 0755)) return false;
  }
  return true;
}

kiln::v1::CreateTrainingJobRequest Request(const std::string& work, const PlannedJob& j) {
  kiln::v1::CreateTrainingJobRequest r;
  r.set_training_job_name(j.name);
  r.set_role_arn("arn:aws:iam::000000000000:role/drill");
  r.mutable_algorithm_specification()->set_training_image(absl::StrCat(work, "/images/", j.name));
  r.mutable_algorithm_specification()->set_training_input_mode("File");
  auto* channel = r.add_input_data_config();
  channel->set_channel_name("train");
  channel->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  channel->mutable_data_source()->mutable_s3_data_source()->set_s3_uri(
      absl::StrCat("file://", work, "/data/"));
  r.mutable_output_data_config()->set_s3_output_path(absl::StrCat("file://", work, "/out"));
  r.mutable_resource_config()->set_instance_type("ml.m5.large");
  r.mutable_resource_config()->set_instance_count(1);
  r.mutable_resource_config()->set_volume_size_in_gb(1);
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(600);
  r.mutable_retry_strategy()->set_maximum_retry_attempts(30);
  // A follow-up asks for a pool too: only a job that takes part in warm pools
  // reuses one.
  if (j.kind == Kind::kPoolHolder)
    r.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
  if (j.kind == Kind::kFollowUp) r.mutable_resource_config()->set_keep_alive_period_in_seconds(1);
  if (j.kind == Kind::kSpot) {
    r.set_enable_managed_spot_training(true);
    r.mutable_stopping_condition()->set_max_wait_time_in_seconds(1200);
    r.mutable_checkpoint_config()->set_s3_uri(absl::StrCat("file://", work, "/ckpt/", j.name, "/"));
  }
  return r;
}

std::string LastMessage(const kiln::v1::DescribeTrainingJobResponse& d) {
  const int n = d.secondary_status_transitions_size();
  return n == 0 ? std::string() : d.secondary_status_transitions(n - 1).status_message();
}

// Prints status events and each job's first log line in this process.
class DrillObserver : public kiln::JobObserver {
 public:
  DrillObserver(kiln::Engine& engine, absl::flat_hash_set<std::string> recovered,
                absl::flat_hash_map<std::string, std::string> pool_of)
      : engine_(engine), recovered_(std::move(recovered)), pool_of_(std::move(pool_of)) {}

  void OnStatusChange(const kiln::StatusEvent& e) override {
    const std::string job(e.job_name);
    had_event_.insert(job);
    Out(absl::StrCat("event ", UnixNanos(e.time), " ", job, " ", std::string(e.status), "|",
                     std::string(e.secondary_status), "|", std::string(e.message)));
    // A follow-up that trains: what became of the pool it could reuse.
    auto holder = pool_of_.find(job);
    if (holder == pool_of_.end() || e.secondary_status != "Training") return;
    kiln::v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(holder->second);
    auto described = engine_.DescribeTrainingJob(d);
    if (!described.ok()) return;
    const auto& pool = described->warm_pool_status();
    Out(absl::StrCat("pool ", holder->second, " ", job, " ",
                     described->has_warm_pool_status() ? pool.status() : std::string("-"), " ",
                     pool.reused_by_job().empty() ? std::string("-") : pool.reused_by_job(), " ",
                     LastMessage(*described)));
  }

  void OnLogLine(std::string_view job_name, std::string_view, std::string_view,
                 absl::Time time) override {
    const std::string job(job_name);
    if (!seen_line_.insert(job).second) return;
    const bool resumed = recovered_.contains(job) && !had_event_.contains(job);
    Out(absl::StrCat("first-line ", UnixNanos(time), " ", job, resumed ? " resumed" : " new"));
  }

 private:
  kiln::Engine& engine_;
  // Loop thread only.
  const absl::flat_hash_set<std::string> recovered_;
  const absl::flat_hash_map<std::string, std::string> pool_of_;  // follow-up -> pool holder
  absl::flat_hash_set<std::string> had_event_;
  absl::flat_hash_set<std::string> seen_line_;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "crash_drill: %s\n", what.c_str());
  return 1;
}

// "N lost instance(s) over M attempt(s)" in the last transition's message:
// M; 1 without it.
int Attempts(const kiln::v1::DescribeTrainingJobResponse& d) {
  if (d.secondary_status_transitions_size() == 0) return 0;
  const std::string& m =
      d.secondary_status_transitions(d.secondary_status_transitions_size() - 1).status_message();
  const size_t over = m.rfind(" over ");
  if (over == std::string::npos) return 1;
  int attempts = 1;
  const size_t end = m.find(' ', over + 6);
  if (!absl::SimpleAtoi(m.substr(over + 6, end - over - 6), &attempts)) return 1;
  return attempts;
}

}  // namespace

int main(int argc, char** argv) {
  const absl::Time started = absl::Now();
  Out(absl::StrCat("start ", UnixNanos(started)));
  std::string state_dir, work_dir;
  int n = 20;
  int lease = 30;
  int steps_factor = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--state-dir" && has_value) {
      state_dir = argv[++i];
    } else if (a == "--work-dir" && has_value) {
      work_dir = argv[++i];
    } else if (a == "--jobs" && has_value && absl::SimpleAtoi(argv[i + 1], &n) && n > 0) {
      ++i;
    } else if (a == "--steps-factor" && has_value && absl::SimpleAtoi(argv[i + 1], &steps_factor) &&
               steps_factor > 0) {
      ++i;
    } else if (a == "--lease" && has_value && absl::SimpleAtoi(argv[i + 1], &lease) && lease > 0) {
      ++i;
    } else {
      return Fail(absl::StrCat("bad argument '", a,
                               "'; usage: crash_drill --state-dir DIR --work-dir DIR "
                               "[--jobs N] [--steps-factor F] [--lease SECONDS]"));
    }
  }
  if (state_dir.empty() || work_dir.empty()) return Fail("--state-dir and --work-dir are required");
  signal(SIGPIPE, SIG_IGN);
  const std::vector<PlannedJob> plan = Plan(n, steps_factor);
  static constexpr const char* kKindNames[] = {"pool", "follow-up", "spot", "plain", "failing"};
  for (const PlannedJob& j : plan) {
    Out(absl::StrCat("plan ", j.name, " ", kKindNames[static_cast<int>(j.kind)], " ", j.steps));
  }
  if (!WriteImages(work_dir, plan)) {
    return Fail(absl::StrCat("cannot write the jobs' images in ", work_dir));
  }

  auto journal = kiln::journal_sqlite::OpenSqliteJournal({.state_dir = state_dir});
  if (!journal.ok()) return Fail(std::string(journal.status().message()));
  auto loop = kiln::NewRealTimeEventLoop();
  std::unique_ptr<kiln::ObjectStore> files = kiln::NewFileObjectStore();
  kiln::ObjectStores stores;
  stores.Register("file", files.get());
  kiln::local::LocalOptions local;
  local.state_dir = state_dir;
  local.object_stores = &stores;
  local.max_instances = 2 * n + 4;
  local.reattach_lease = absl::Seconds(lease);
  auto provider = kiln::local::NewLocalClusterProvider(*loop, local);
  if (!provider.ok()) return Fail(std::string(provider.status().message()));
  auto channel = kiln::local::NewLocalDataChannel(*loop, stores, {.state_dir = state_dir});
  // A lost run is retried after a second, not the service's 30.
  auto spot = kiln::NewDefaultSpotInterruptionHandler({.retry_delay = absl::Seconds(1)});
  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider->get();
  options.data_channel = channel.get();
  options.journal = journal->get();
  options.spot_handler = spot.get();
  options.stop_grace_period = absl::Seconds(5);
  options.capacity_retry_initial = absl::Seconds(1);
  auto made = kiln::NewEngine(std::move(options));
  if (!made.ok()) return Fail(std::string(made.status().message()));
  kiln::Engine& engine = **made;

  // The jobs the journal holds unfinished: they go on once the loop runs.
  absl::flat_hash_set<std::string> recovered;
  absl::flat_hash_map<std::string, std::string> held;  // every job the journal holds
  for (const PlannedJob& j : plan) {
    kiln::v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(j.name);
    auto described = engine.DescribeTrainingJob(d);
    if (!described.ok()) continue;
    held[j.name] = described->training_job_status();
    const std::string& status = described->training_job_status();
    if (status == "InProgress" || status == "Stopping") {
      recovered.insert(j.name);
      Out(absl::StrCat("recovered ", j.name, " ", status));
    }
  }
  absl::flat_hash_map<std::string, std::string> pool_of;
  for (const PlannedJob& j : plan) {
    if (j.kind == Kind::kFollowUp) pool_of[j.name] = j.after;
  }
  DrillObserver observer(engine, recovered, std::move(pool_of));
  engine.AddObserver(&observer);
  std::thread loop_thread([&] { loop->Run(); });

  auto create = [&](const PlannedJob& j) -> bool {
    if (held.contains(j.name)) return true;
    auto created = engine.CreateTrainingJob(Request(work_dir, j));
    if (created.ok()) {
      Out("accepted " + j.name);
    } else if (created.status().code() == absl::StatusCode::kAlreadyExists) {
      Out("exists " + j.name);
    } else {
      std::fprintf(stderr, "crash_drill: %s not accepted: %s\n", j.name.c_str(),
                   created.status().ToString().c_str());
      return false;
    }
    return true;
  };
  int rc = 0;
  for (const PlannedJob& j : plan) {
    if (j.kind != Kind::kFollowUp && !create(j)) rc = 1;
  }
  // Each follow-up once its pool's holder has ended (looked at ten times a
  // second, whatever order the holders end in).
  std::vector<const PlannedJob*> follow_ups;
  for (const PlannedJob& j : plan) {
    if (j.kind == Kind::kFollowUp && !held.contains(j.name)) follow_ups.push_back(&j);
  }
  while (!follow_ups.empty()) {
    std::vector<const PlannedJob*> waiting;
    for (const PlannedJob* j : follow_ups) {
      kiln::v1::DescribeTrainingJobRequest d;
      d.set_training_job_name(j->after);
      auto described = engine.DescribeTrainingJob(d);
      const std::string status = described.ok() ? described->training_job_status() : "";
      if (status == "InProgress" || status == "Stopping") {
        waiting.push_back(j);
      } else if (!create(*j)) {
        rc = 1;
      }
    }
    follow_ups.swap(waiting);
    if (!follow_ups.empty()) absl::SleepFor(absl::Milliseconds(100));
  }
  if (absl::Status s = engine.WaitForAllTrainingJobs(); !s.ok()) {
    std::fprintf(stderr, "crash_drill: waiting for the jobs: %s\n", s.ToString().c_str());
    rc = 1;
  }
  for (const PlannedJob& j : plan) {
    kiln::v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(j.name);
    auto described = engine.DescribeTrainingJob(d);
    if (!described.ok()) {
      Out(absl::StrCat("job ", j.name, " Missing 0 0 0 0"));
      rc = 1;
      continue;
    }
    auto nanos = [](const google::protobuf::Timestamp& t) {
      return t.seconds() * 1000000000 + t.nanos();
    };
    Out(absl::StrCat("job ", j.name, " ", described->training_job_status(), " ",
                     described->billable_time_in_seconds(), " ", Attempts(*described), " ",
                     nanos(described->training_start_time()), " ",
                     nanos(described->training_end_time()), " ",
                     described->has_warm_pool_status() ? described->warm_pool_status().status()
                                                       : std::string("-")));
  }
  loop->Stop();
  loop_thread.join();
  return rc;
}
