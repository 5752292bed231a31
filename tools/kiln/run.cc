// `kiln run`: runs training jobs on this machine with the local backend.
//
//   kiln run [--state-dir DIR] [--runtime process|bwrap] [--grace SECONDS]
//            [--interrupt HOST@SECONDS]... [--file-root DIR]... [--user UID[:GID]]
//            [--reattach-lease SECONDS] [JOB.json...]
//
// The state directory's journal (kiln/journal_sqlite) records every job:
// a job name that the directory's journal holds is refused (ResourceInUse),
// and a `kiln run` that starts on it first carries on with the jobs an
// earlier one left unfinished and follows them to their end; with no job
// files, that is all it does. The containers of a `kiln run` that dies
// (a crash, kill -9) run on for --reattach-lease seconds (default 120;
// process runtime), for the next `kiln run` on the state directory to take
// them back; after that they are killed, and a job whose containers are gone
// is one whose instances were lost: its RetryStrategy decides whether it
// starts again or fails. With --reattach-lease 0 they end with `kiln run`. One `kiln run` at a
// time per state directory: a second is refused, naming the first's pid.
//
// The jobs run in order in one engine, so a job can reuse the warm pool of the
// one before it. Status changes (with the time since the job was submitted)
// and container log lines go to stderr as they happen. When every job has
// ended, each job's DescribeTrainingJob JSON goes to stdout, one line per job
// in submission order, as it stands then (so a pool Reused later shows).
// An error the engine returns is shown with the code the service would answer
// with (kiln/service_error.h): "[JOB] not accepted: ValidationException: ...".
// Exit status: 0 when every job Completed; 2 when the engine refused a job's
// CreateTrainingJob (the others still run); 1 otherwise (a job that did not
// complete, bad input, or stdout that cannot be written: a full disk, a
// closed pipe); 130 after Ctrl-C, which stops the running job cleanly
// (Stopped, artifacts uploaded).
//
// --interrupt algo-1@30 injects a spot interruption notice into instance
// algo-1 of every job, 30 s after the job starts Training.
//
// --file-root DIR (repeatable) confines file:// to those directories: every
// source, checkpoint and output URI must lie inside one of them, its links
// resolved (FileObjectStoreOptions). Without it file:// reaches whatever
// this user can read and write.
//
// --user UID[:GID] runs the containers as that user (LocalOptions::
// container_user); run as root, they run as nobody without it.
//
// Public headers only.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "cli.h"
#include "kiln/aws/s3.h"
#include "kiln/engine.h"
#include "kiln/journal_sqlite/sqlite_journal.h"
#include "kiln/json.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/service_error.h"

namespace kiln::cli {

namespace {

struct Interruption {
  std::string host;
  absl::Duration after_training_starts;
};

struct RunOptions {
  std::string state_dir;
  local::LocalRuntime runtime = local::LocalRuntime::kProcess;
  absl::Duration grace = absl::Seconds(120);
  std::vector<Interruption> interruptions;
  std::vector<std::string> file_roots;
  std::optional<local::ContainerUser> user;
  absl::Duration reattach_lease = absl::Minutes(2);
  std::vector<std::string> files;
};

bool ParseArgs(const std::vector<std::string>& args, RunOptions& o, std::string& error) {
  const std::vector<Option> options = {
      ValueOption("--state-dir", o.state_dir),
      RuntimeOption("--runtime", o.runtime),
      {"--user", true,
       [&o](const std::string& v, std::string& err) {
         const size_t colon = v.find(':');
         uint32_t uid = 0, gid = 0;
         if (!absl::SimpleAtoi(v.substr(0, colon), &uid) ||
             (colon != std::string::npos && !absl::SimpleAtoi(v.substr(colon + 1), &gid))) {
           err = "--user takes UID or UID:GID, numbers, not '" + InputForMessage(v) + "'";
           return false;
         }
         o.user = local::ContainerUser{uid, colon == std::string::npos ? uid : gid};
         return true;
       }},
      SecondsOption("--grace", o.grace),
      SecondsOption("--reattach-lease", o.reattach_lease),
      {"--interrupt", true,
       [&o](const std::string& v, std::string& err) {
         const size_t at = v.find('@');
         int64_t seconds = 0;
         if (at == std::string::npos || at == 0 ||
             !absl::SimpleAtoi(v.substr(at + 1, v.size() - at - 1 - (v.back() == 's' ? 1 : 0)),
                               &seconds) ||
             seconds < 0) {
           err = "--interrupt takes HOST@SECONDS, e.g. algo-1@30, not '" + InputForMessage(v) + "'";
           return false;
         }
         o.interruptions.push_back({v.substr(0, at), absl::Seconds(seconds)});
         return true;
       }},
      RepeatedOption("--file-root", o.file_roots),
  };
  if (!ParseOptions(args, options, o.files, error)) return false;
  if (o.state_dir.empty()) o.state_dir = DefaultStateDir();
  return true;
}

// Prints progress to stderr and injects the --interrupt notices. (The jobs
// are submitted and waited for by RunJobs.)
class Progress : public JobObserver {
 public:
  Progress(EventLoop& loop, Engine& engine, const RunOptions& options)
      : loop_(loop), engine_(engine), options_(options) {}

  void OnStatusChange(const StatusEvent& e) override {
    // A job's first event comes from its CreateTrainingJob.
    auto [it, created] = submitted_at_.try_emplace(std::string(e.job_name), e.time);
    std::fprintf(stderr, "[%s +%6.1fs] %s/%s: %s\n", std::string(e.job_name).c_str(),
                 absl::ToDoubleSeconds(e.time - it->second), std::string(e.status).c_str(),
                 std::string(e.secondary_status).c_str(), std::string(e.message).c_str());
    if (e.secondary_status != "Training") return;
    for (const Interruption& i : options_.interruptions) {
      loop_.ScheduleAfter(
          i.after_training_starts, [this, job = std::string(e.job_name), host = i.host] {
            absl::Status s = engine_.InjectInterruption(job, host, InterruptionKind::kSpotNotice,
                                                        absl::Minutes(2));
            std::fprintf(stderr, "[%s] injected a spot interruption notice into %s: %s\n",
                         job.c_str(), InputForMessage(host).c_str(),
                         s.ok() ? "OK" : ServiceErrorText("", s).c_str());
          });
    }
  }

  void OnLogLine(std::string_view job, std::string_view host, std::string_view line,
                 absl::Time) override {
    std::fprintf(stderr, "[%s %s] %s\n", std::string(job).c_str(), std::string(host).c_str(),
                 std::string(line).c_str());
  }

 private:
  EventLoop& loop_;
  Engine& engine_;
  const RunOptions& options_;
  absl::flat_hash_map<std::string, absl::Time> submitted_at_;
};

// Submits the jobs one at a time, each once the one before has ended, while
// this thread runs the loop (Engine::WaitForTrainingJob). Interrupt() (Ctrl-C,
// from another thread) stops the running job and submits no more.
class Runner {
 public:
  // `resumed`: jobs an earlier run left unfinished, followed first.
  Runner(Engine& engine, std::vector<std::string> resumed,
         std::vector<v1::CreateTrainingJobRequest> jobs)
      : engine_(engine), resumed_(std::move(resumed)), jobs_(std::move(jobs)) {}

  void Run() {
    for (const std::string& name : resumed_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (interrupted_) return;
        current_ = name;
      }
      std::fprintf(stderr, "[%s] resumed from the state directory's journal\n", name.c_str());
      submitted_.push_back(name);
      Follow(name);
    }
    for (const v1::CreateTrainingJobRequest& r : jobs_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (interrupted_) return;
        current_ = r.training_job_name();
      }
      auto created = engine_.CreateTrainingJob(r);
      if (!created.ok()) {
        std::fprintf(stderr, "[%s] not accepted: %s\n", r.training_job_name().c_str(),
                     ServiceErrorText("CreateTrainingJob", created.status()).c_str());
        all_completed_ = false;
        refused_ = true;
        continue;
      }
      submitted_.push_back(r.training_job_name());
      // A Ctrl-C between naming the job and creating it found nothing to stop.
      if (interrupted()) Stop(r.training_job_name());
      Follow(r.training_job_name());
    }
  }

  // Any thread.
  void Interrupt() {
    std::string current;
    {
      std::lock_guard<std::mutex> lock(mu_);
      interrupted_ = true;
      current = current_;
    }
    if (!current.empty()) Stop(current);
  }

  bool interrupted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return interrupted_;
  }
  bool all_completed() const { return all_completed_ && !interrupted(); }
  bool refused() const { return refused_; }
  const std::vector<std::string>& submitted() const { return submitted_; }

 private:
  // Waits for the job `name` to end.
  void Follow(const std::string& name) {
    auto ended = engine_.WaitForTrainingJob(name);
    if (!ended.ok()) {
      std::fprintf(stderr, "[%s] not waited for: %s\n", name.c_str(),
                   ServiceErrorText("DescribeTrainingJob", ended.status()).c_str());
      all_completed_ = false;
    } else if (ended->training_job_status() != "Completed") {
      all_completed_ = false;
    }
  }

  void Stop(const std::string& job) {
    v1::StopTrainingJobRequest stop;
    stop.set_training_job_name(job);
    absl::Status s = engine_.StopTrainingJob(stop);
    std::fprintf(stderr, "[%s] stopping (Ctrl-C): %s\n", job.c_str(),
                 s.ok() ? "OK" : ServiceErrorText("StopTrainingJob", s).c_str());
  }

  Engine& engine_;
  const std::vector<std::string> resumed_;
  const std::vector<v1::CreateTrainingJobRequest> jobs_;
  // Run()'s thread only.
  std::vector<std::string> submitted_;
  bool all_completed_ = true;
  bool refused_ = false;  // the engine refused a CreateTrainingJob
  mutable std::mutex mu_;
  std::string current_;       // guarded by mu_: the job being created or run
  bool interrupted_ = false;  // guarded by mu_
};

// True if the job reads or writes s3:// objects (channels, checkpoints,
// output).
bool UsesS3(const v1::CreateTrainingJobRequest& r) {
  auto s3 = [](const std::string& uri) { return absl::StartsWith(uri, "s3://"); };
  for (const v1::Channel& c : r.input_data_config()) {
    if (s3(c.data_source().s3_data_source().s3_uri())) return true;
  }
  return s3(r.checkpoint_config().s3_uri()) || s3(r.output_data_config().s3_output_path());
}

// The jobs of the engine that are InProgress or Stopping (recovered from the
// journal), oldest first.
absl::StatusOr<std::vector<std::string>> Unfinished(Engine& engine) {
  std::vector<std::string> names;
  for (const char* status : {"InProgress", "Stopping"}) {
    v1::ListTrainingJobsRequest request;
    request.set_status_equals(status);
    request.set_max_results(100);
    for (;;) {
      absl::StatusOr<v1::ListTrainingJobsResponse> page = engine.ListTrainingJobs(request);
      if (!page.ok()) return page.status();
      for (const auto& s : page->training_job_summaries()) names.push_back(s.training_job_name());
      if (page->next_token().empty()) break;
      request.set_next_token(page->next_token());
    }
  }
  return names;
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  RunOptions options;
  std::string error;
  if (!ParseArgs(args, options, error)) {
    std::cerr << "kiln run: " << error << "\n"
              << "usage: kiln run [--state-dir DIR] [--runtime process|bwrap] [--grace SECONDS]\n"
                 "                [--interrupt HOST@SECONDS]... [--file-root DIR]... "
                 "[--user UID[:GID]]\n"
                 "                [--reattach-lease SECONDS] [JOB.json...]\n";
    return 1;
  }
  std::vector<v1::CreateTrainingJobRequest> jobs;
  for (const std::string& file : options.files) {
    absl::StatusOr<std::string> text = ReadRequestFile(file);
    if (!text.ok()) {
      std::cerr << "kiln run: " << ShownPath(file)
                << ": cannot read the file: " << text.status().message() << "\n";
      return 1;
    }
    v1::CreateTrainingJobRequest r;
    absl::Status s = ParseJson(*text, r);
    if (!s.ok()) {
      std::cerr << "kiln run: " << ShownPath(file) << ": " << s.message() << "\n";
      return 1;
    }
    jobs.push_back(std::move(r));
  }

  // Ctrl-C and SIGTERM are taken by a thread of ours (blocked everywhere
  // else, before any other thread starts) and turned into a stop on the loop.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // The journal first: it is the lock that keeps a second `kiln run` off the
  // directory before anything in it is touched.
  absl::StatusOr<std::unique_ptr<Journal>> journal =
      journal_sqlite::OpenSqliteJournal({.state_dir = options.state_dir});
  if (!journal.ok()) {
    std::cerr << "kiln run: " << journal.status().message() << "\n";
    return 1;
  }
  auto loop = NewRealTimeEventLoop();
  absl::StatusOr<std::unique_ptr<ObjectStore>> files =
      options.file_roots.empty()
          ? absl::StatusOr<std::unique_ptr<ObjectStore>>(NewFileObjectStore())
          : NewFileObjectStore(FileObjectStoreOptions{options.file_roots});
  if (!files.ok()) {
    std::cerr << "kiln run: --file-root: " << files.status().message() << "\n";
    return 1;
  }
  ObjectStores stores;
  stores.Register("file", files->get());
  // s3:// through kiln::aws, configured the AWS way (AWS_* variables, the
  // shared files, AWS_ENDPOINT_URL), set up before any job starts. Each job's
  // S3 inputs are checked when it is submitted (an empty prefix is refused
  // by CreateTrainingJob, through the data channel).
  std::unique_ptr<ObjectStore> s3;
  bool any_s3 = false;
  for (const v1::CreateTrainingJobRequest& r : jobs) any_s3 = any_s3 || UsesS3(r);
  if (any_s3) {
    auto s3_options = aws::ResolveS3Options({});
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        s3_options.ok() ? aws::NewS3ObjectStore(*s3_options)
                        : absl::StatusOr<std::unique_ptr<ObjectStore>>(s3_options.status());
    if (!store.ok()) {
      std::cerr << "kiln run: s3:// needs AWS configuration: " << store.status().message() << "\n";
      return 1;
    }
    s3 = *std::move(store);
    stores.Register("s3", s3.get());
  }
  local::LocalOptions local_options;
  local_options.state_dir = options.state_dir;
  local_options.runtime = options.runtime;
  local_options.container_user = options.user;
  local_options.object_stores = &stores;
  // The journal keeps the jobs; the containers outlive a crash for a while,
  // for the next `kiln run` on the state directory to take them back.
  local_options.reattach_lease = options.reattach_lease;
  auto provider = local::NewLocalClusterProvider(*loop, local_options);
  if (!provider.ok()) {
    std::cerr << "kiln run: " << provider.status().message() << "\n";
    return 1;
  }
  auto channel = local::NewLocalDataChannel(*loop, stores, {.state_dir = options.state_dir});
  EngineOptions engine_options;
  engine_options.loop = loop.get();
  engine_options.cluster_provider = provider->get();
  engine_options.data_channel = channel.get();
  engine_options.stop_grace_period = options.grace;
  engine_options.journal = journal->get();
  auto engine = NewEngine(std::move(engine_options));
  if (!engine.ok()) {
    std::cerr << "kiln run: " << engine.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<std::string>> resumed = Unfinished(**engine);
  if (!resumed.ok()) {
    std::cerr << "kiln run: " << resumed.status().message() << "\n";
    return 1;
  }
  if (resumed->empty() && jobs.empty()) {
    std::cerr << "kiln run: no job files given, and no unfinished jobs in "
              << ShownPath(options.state_dir) << "\n";
    return 0;
  }
  Progress progress(*loop, **engine, options);
  (*engine)->AddObserver(&progress);
  Runner runner(**engine, *std::move(resumed), std::move(jobs));

  std::atomic<bool> done{false};
  std::thread signal_thread([&] {
    while (!done.load()) {
      int sig = 0;
      timespec timeout{0, 200 * 1000 * 1000};
      siginfo_t info;
      sig = sigtimedwait(&signals, &info, &timeout);
      if (sig == SIGINT || sig == SIGTERM) runner.Interrupt();
    }
  });
  runner.Run();
  done.store(true);
  signal_thread.join();

  for (const std::string& name : runner.submitted()) {
    v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(name);
    auto described = (*engine)->DescribeTrainingJob(d);
    if (described.ok()) {
      std::cout << ToJson(*described) << "\n";
    } else {
      std::cerr << "[" << name << "] not described: "
                << ServiceErrorText("DescribeTrainingJob", described.status()) << "\n";
    }
  }
  std::cout.flush();
  if (runner.interrupted()) return 130;
  if (!std::cout) {
    std::cerr << "kiln run: cannot write the output\n";
    return 1;
  }
  if (runner.refused()) return 2;
  return runner.all_completed() ? 0 : 1;
}

}  // namespace kiln::cli
