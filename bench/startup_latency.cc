// Start-up latency on the local backend: submission to the entrypoint running,
// cold (a new instance unpacks a 100 MB image tarball) against warm (a job on
// the previous job's warm pool), for both runtimes.
//
// The image is a plain .tar of `--image-mb` MB of incompressible data plus a
// `train` program that prints one line and exits. A job's start-up is the time
// from CreateTrainingJob to the engine seeing that first line (what a user of
// the engine can observe; it includes the shell's own start, ~1 ms). Jobs run
// one at a time in one engine and real time:
//   cold: `--jobs` jobs without KeepAlivePeriodInSeconds: each provisions a new
//         instance, whose image cache is empty;
//   warm: one job with KeepAlivePeriodInSeconds (not counted), then `--jobs`
//         jobs that each take over the previous one's warm pool.
// Prints P50/P90 per runtime and the cold/warm ratio of the medians.
// Targets: warm P90 <= 20 ms (process), <= 40 ms (bwrap); cold/warm >= 8x.
// Public headers only.
//
//   startup_latency [--jobs N] [--image-mb M] [--runtime process|bwrap|both] [--work DIR]
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "kiln/engine.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  int jobs = 30;
  int image_mb = 100;
  std::vector<kiln::local::LocalRuntime> runtimes = {kiln::local::LocalRuntime::kProcess,
                                                     kiln::local::LocalRuntime::kBwrap};
  fs::path work;
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "startup_latency: %s\n", message.c_str());
  std::exit(1);
}

// Writes the image: image/opt/program/train and image/opt/weights.bin
// (`mb` MB of random bytes), packed into image.tar by tar(1).
fs::path MakeImage(const fs::path& work, int mb) {
  const fs::path dir = work / "image";
  fs::create_directories(dir / "opt" / "program");
  {
    std::ofstream train(dir / "opt" / "program" / "train");
    train << "#!/bin/sh\necho entrypoint running on \"$SM_CURRENT_HOST\"\n";
  }
  chmod((dir / "opt" / "program" / "train").c_str(), 0755);
  {
    std::ofstream weights(dir / "opt" / "weights.bin", std::ios::binary);
    std::mt19937_64 rng(42);
    std::vector<uint64_t> block(1 << 17);  // 1 MiB
    for (int i = 0; i < mb; ++i) {
      for (uint64_t& w : block) w = rng();
      weights.write(reinterpret_cast<const char*>(block.data()),
                    static_cast<std::streamsize>(block.size() * sizeof(uint64_t)));
    }
    if (!weights) Die("cannot write the image's weights (disk full?)");
  }
  const fs::path tar = work / "image.tar";
  const std::string command =
      absl::StrCat("tar -cf '", tar.string(), "' -C '", dir.string(), "' .");
  if (std::system(command.c_str()) != 0) Die("tar failed: " + command);
  fs::remove_all(dir);
  return tar;
}

kiln::v1::CreateTrainingJobRequest Request(const std::string& name, const fs::path& image,
                                           const fs::path& output, bool keep_alive) {
  kiln::v1::CreateTrainingJobRequest r;
  r.set_training_job_name(name);
  r.set_role_arn("arn:aws:iam::000000000000:role/bench");
  r.mutable_algorithm_specification()->set_training_image(image.string());
  r.mutable_algorithm_specification()->set_training_input_mode("File");
  r.mutable_output_data_config()->set_s3_output_path("file://" + output.string());
  auto* rc = r.mutable_resource_config();
  rc->set_instance_type("ml.m5.large");
  rc->set_instance_count(1);
  rc->set_volume_size_in_gb(1);
  if (keep_alive) rc->set_keep_alive_period_in_seconds(600);
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(300);
  return r;
}

// Runs jobs one at a time and records each one's start-up.
class Runner : public kiln::JobObserver {
 public:
  Runner(kiln::EventLoop& loop, kiln::Engine& engine) : loop_(loop), engine_(engine) {}

  // Runs `requests` in order; returns the start-up of each.
  std::vector<absl::Duration> Run(std::vector<kiln::v1::CreateTrainingJobRequest> requests) {
    requests_ = std::move(requests);
    next_ = 0;
    startups_.clear();
    to_training_.clear();
    loop_.Post([this] { SubmitNext(); });
    loop_.Run();
    return startups_;
  }

  // Submission to SecondaryStatus Training (the image and the instance's tree
  // are ready; the containers are being started), per job of the last Run.
  const std::vector<absl::Duration>& to_training() const { return to_training_; }

  void OnStatusChange(const kiln::StatusEvent& e) override {
    if (e.job_name != current_) return;
    if (e.status == "Failed" || e.status == "Stopped") {
      Die(absl::StrCat("job ", current_, " ended ", std::string(e.status), ": ",
                       std::string(e.message)));
    }
    if (e.secondary_status == "Training" && !saw_training_) {
      saw_training_ = true;
      to_training_.push_back(e.time - submitted_);
    }
    if (e.status == "Completed") {
      if (!saw_line_) Die(absl::StrCat("job ", current_, " completed without a log line"));
      loop_.Post([this] { SubmitNext(); });
    }
  }

  void OnLogLine(std::string_view job, std::string_view, std::string_view,
                 absl::Time time) override {
    if (job != current_ || saw_line_) return;
    saw_line_ = true;
    startups_.push_back(time - submitted_);
  }

 private:
  void SubmitNext() {
    if (next_ == requests_.size()) {
      loop_.Stop();
      return;
    }
    kiln::v1::CreateTrainingJobRequest& r = requests_[next_++];
    current_ = r.training_job_name();
    saw_line_ = false;
    saw_training_ = false;
    submitted_ = loop_.Now();
    auto created = engine_.CreateTrainingJob(std::move(r));
    if (!created.ok()) Die(std::string(created.status().message()));
  }

  kiln::EventLoop& loop_;
  kiln::Engine& engine_;
  std::vector<kiln::v1::CreateTrainingJobRequest> requests_;
  size_t next_ = 0;
  std::string current_;
  bool saw_line_ = false;
  bool saw_training_ = false;
  absl::Time submitted_;
  std::vector<absl::Duration> startups_;
  std::vector<absl::Duration> to_training_;
};

double Percentile(std::vector<absl::Duration> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return absl::ToDoubleMilliseconds(v[i]);
}

struct Figures {
  double cold_p50, cold_p90, warm_p50, warm_p90;
  double cold_prepare_p50, warm_prepare_p50;  // of which before SecondaryStatus Training
};

Figures Measure(const Options& o, kiln::local::LocalRuntime runtime, const fs::path& image) {
  const char* name = runtime == kiln::local::LocalRuntime::kBwrap ? "bwrap" : "process";
  const fs::path dir = o.work / name;
  fs::create_directories(dir / "output");
  auto loop = kiln::NewRealTimeEventLoop();
  auto files = kiln::NewFileObjectStore();
  kiln::ObjectStores stores;
  stores.Register("file", files.get());
  kiln::local::LocalOptions local;
  local.state_dir = (dir / "state").string();
  local.runtime = runtime;
  local.object_stores = &stores;
  auto provider = kiln::local::NewLocalClusterProvider(*loop, local);
  if (!provider.ok()) Die(std::string(provider.status().message()));
  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider->get();
  auto engine = kiln::NewEngine(std::move(options));
  if (!engine.ok()) Die(std::string(engine.status().message()));
  Runner runner(*loop, **engine);
  (*engine)->AddObserver(&runner);

  std::vector<kiln::v1::CreateTrainingJobRequest> cold, warm;
  for (int i = 0; i < o.jobs; ++i) {
    cold.push_back(Request(absl::StrCat("cold-", i), image, dir / "output", false));
  }
  for (int i = 0; i <= o.jobs; ++i) {
    warm.push_back(Request(absl::StrCat("warm-", i), image, dir / "output", true));
  }
  std::fprintf(stderr, "%s: %d cold jobs...\n", name, o.jobs);
  const std::vector<absl::Duration> cold_times = runner.Run(std::move(cold));
  const std::vector<absl::Duration> cold_prepare = runner.to_training();
  std::fprintf(stderr, "%s: 1 + %d warm jobs...\n", name, o.jobs);
  std::vector<absl::Duration> warm_times = runner.Run(std::move(warm));
  warm_times.erase(warm_times.begin());  // the job that made the pool started cold
  std::vector<absl::Duration> warm_prepare = runner.to_training();
  warm_prepare.erase(warm_prepare.begin());
  (*engine)->RemoveObserver(&runner);
  return {Percentile(cold_times, 0.5), Percentile(cold_times, 0.9), Percentile(warm_times, 0.5),
          Percentile(warm_times, 0.9),        Percentile(cold_prepare, 0.5),
          Percentile(warm_prepare, 0.5)};
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value == nullptr) Die("missing value after " + arg);
    ++i;
    if (arg == "--jobs") {
      if (!absl::SimpleAtoi(value, &o.jobs) || o.jobs < 1) Die("--jobs: a positive integer");
    } else if (arg == "--image-mb") {
      if (!absl::SimpleAtoi(value, &o.image_mb) || o.image_mb < 0) Die("--image-mb: >= 0");
    } else if (arg == "--runtime") {
      const std::string v = value;
      if (v == "process") {
        o.runtimes = {kiln::local::LocalRuntime::kProcess};
      } else if (v == "bwrap") {
        o.runtimes = {kiln::local::LocalRuntime::kBwrap};
      } else if (v != "both") {
        Die("--runtime: process, bwrap or both");
      }
    } else if (arg == "--work") {
      o.work = value;
    } else {
      Die("unknown option " + arg +
          " (usage: startup_latency [--jobs N] [--image-mb M] [--runtime process|bwrap|both] "
          "[--work DIR])");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  bool own_work = false;
  if (o.work.empty()) {
    char pattern[] = "/tmp/kiln-startup-XXXXXX";
    if (mkdtemp(pattern) == nullptr) Die("mkdtemp failed");
    // (Searchable: run as root, the containers run as nobody.)
    chmod(pattern, 0755);
    o.work = pattern;
    own_work = true;
  }
  o.work = fs::absolute(o.work);
  const fs::path image = MakeImage(o.work, o.image_mb);
  std::printf("Start-up latency, submission to the entrypoint's first line; %d jobs each, "
              "%d MB image tarball\n",
              o.jobs, o.image_mb);
  std::printf("%-8s %12s %12s %12s %12s %10s   targets\n", "runtime", "cold P50 ms", "cold P90 ms",
              "warm P50 ms", "warm P90 ms", "cold/warm");
  for (kiln::local::LocalRuntime runtime : o.runtimes) {
    const bool bwrap = runtime == kiln::local::LocalRuntime::kBwrap;
    const Figures f = Measure(o, runtime, image);
    std::printf("%-8s %12.1f %12.1f %12.1f %12.1f %9.1fx   warm P90 <= %d ms, cold/warm >= 8x\n",
                bwrap ? "bwrap" : "process", f.cold_p50, f.cold_p90, f.warm_p50, f.warm_p90,
                f.cold_p50 / f.warm_p50, bwrap ? 40 : 20);
    std::printf("%-8s %12.1f %12s %12.1f   (of which submission to SecondaryStatus Training)\n",
                "", f.cold_prepare_p50, "", f.warm_prepare_p50);
    std::fflush(stdout);
  }
  if (own_work) fs::remove_all(o.work);
  return 0;
}
