// The simulation's models: generators and distributions, spot traces and
// hazards, the failure process, and the reproductions of the published
// tables from the calibrated defaults, through the real engine.
#include "kiln/sim/models.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"
#include "kiln/sim/workload.h"

namespace kiln::sim {
namespace {

// --- Generators

TEST(RngTest, SequentialStreamIsTheStandardMt19937_64) {
  // The C++ standard fixes this value ([rand.predef]): the stream does not
  // depend on the library.
  Rng rng(5489);
  uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rng.Next();
  EXPECT_EQ(v, 9981545732273789042ull);
}

TEST(KeyedRngTest, SameKeyGivesSameDrawsAndOtherKeysDiffer) {
  KeyedRng a(MixKey(1, HashName("job-1"), 3)), b(MixKey(1, HashName("job-1"), 3)), c(MixKey(1, HashName("job-2"), 3));
  std::vector<uint64_t> va, vb, vc;
  for (int i = 0; i < 8; ++i) {
    va.push_back(a.Next());
    vb.push_back(b.Next());
    vc.push_back(c.Next());
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  // Pinned, so that a change to the mixing (which would change every
  // simulation's numbers) cannot go unnoticed.
  EXPECT_EQ(HashName(""), 0xcbf29ce484222325ull);  // FNV-1a test vectors
  EXPECT_EQ(HashName("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(KeyedRng(0).Next(), 0xe220a8397b1dcdafull);  // SplitMix64 from 0
}

TEST(DistributionsTest, SampleMomentsMatchTheDistributions) {
  Rng rng(42);
  constexpr int kN = 200000;
  double exp_sum = 0, weibull_sum = 0, uniform_sum = 0;
  std::vector<double> lognormal;
  for (int i = 0; i < kN; ++i) {
    exp_sum += rng.Exponential(3.0);
    weibull_sum += rng.Weibull(2.0, 0.5);  // mean = 2 * Gamma(3) = 4
    uniform_sum += rng.Uniform();
    lognormal.push_back(rng.LogNormal(10.0, 0.5));
  }
  EXPECT_NEAR(exp_sum / kN, 3.0, 0.03);
  EXPECT_NEAR(weibull_sum / kN, 4.0, 0.1);
  EXPECT_NEAR(uniform_sum / kN, 0.5, 0.005);
  std::nth_element(lognormal.begin(), lognormal.begin() + kN / 2, lognormal.end());
  EXPECT_NEAR(lognormal[kN / 2], 10.0, 0.1);
}

TEST(DurationDistTest, DrawsStayWithinTheClamp) {
  const DurationDist d{absl::Seconds(60), 2.0, 3};
  Rng rng(1);
  for (int i = 0; i < 10000; ++i) {
    const absl::Duration x = d.Sample(rng);
    ASSERT_GE(x, absl::Seconds(20));
    ASSERT_LE(x, absl::Seconds(180));
  }
  EXPECT_EQ(d.Max(), absl::Seconds(180));
  EXPECT_EQ((DurationDist{absl::Seconds(60), 0, 3}).Max(), absl::Seconds(60));
}

// --- Spot

TEST(SpotTraceTest, ParsesTheSkyPilotFormat) {
  auto t = ParseSpotTrace(R"({"metadata": {"gap_seconds": 300}, "data": [3, 2, 0, 1]})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->gap, absl::Seconds(300));
  EXPECT_EQ(t->available, (std::vector<int32_t>{3, 2, 0, 1}));
  EXPECT_EQ(t->AvailableAt(absl::ZeroDuration()), 3);
  EXPECT_EQ(t->AvailableAt(absl::Seconds(299)), 3);
  EXPECT_EQ(t->AvailableAt(absl::Seconds(300)), 2);
  EXPECT_EQ(t->AvailableAt(absl::Seconds(1200)), 3);  // repeats
  EXPECT_DOUBLE_EQ(t->FractionAtLeast(1), 0.75);
}

TEST(SpotTraceTest, InvertReadsPreemptionFlags) {
  auto t = ParseSpotTrace(R"({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1, 0]})", /*invert=*/true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->available, (std::vector<int32_t>{1, 0, 0, 1}));
}

TEST(SpotTraceTest, MalformedTracesAreRefusedWithTheReason) {
  EXPECT_NE(ParseSpotTrace("[1,2]").status().message().find("object"), std::string_view::npos);
  EXPECT_NE(ParseSpotTrace(R"({"data": [1]})").status().message().find("gap_seconds"), std::string_view::npos);
  EXPECT_NE(ParseSpotTrace(R"({"metadata": {"gap_seconds": 60}, "data": []})").status().message().find("non-empty"),
            std::string_view::npos);
  EXPECT_NE(ParseSpotTrace(R"({"metadata": {"gap_seconds": 60}, "data": [1, -2]})").status().message().find("data[1]"),
            std::string_view::npos);
}

TEST(BathtubTest, SamplesFollowTheCdfAndNoneOutliveTheCap) {
  const BathtubModel b;
  EXPECT_LT(b.Cdf(absl::ZeroDuration()), 0.01);
  EXPECT_LT(b.Cdf(absl::Hours(6)), b.Cdf(absl::Hours(20)));
  EXPECT_EQ(b.Cdf(absl::Hours(24)), 1.0);
  Rng rng(3);
  constexpr int kN = 50000;
  int early = 0, at_cap = 0;
  for (int i = 0; i < kN; ++i) {
    const absl::Duration life = b.Sample(rng);
    ASSERT_LE(life, b.cap);
    if (life <= absl::Hours(2)) ++early;
    if (life == b.cap) ++at_cap;
  }
  EXPECT_NEAR(static_cast<double>(early) / kN, b.Cdf(absl::Hours(2)), 0.01);
  EXPECT_NEAR(static_cast<double>(at_cap) / kN, 1.0 - b.Cdf(b.cap - absl::Nanoseconds(1)), 0.01);
}

// --- Failures

TEST(FailureModelTest, DefaultFitIsWithinOnePointOfTheTable) {
  const FailureModel f;
  EXPECT_NEAR(f.FailureProbability(100), 0.078, 0.01);
  EXPECT_NEAR(f.FailureProbability(1000), 0.137, 0.01);
  EXPECT_NEAR(f.FailureProbability(10000), 0.247, 0.01);
  // A constant hazard fitted to the first point cannot do it.
  const double rate = -std::log(1 - 0.078) / 100;
  EXPECT_GT(1 - std::exp(-rate * 1000), 0.5);
  EXPECT_NEAR(f.MachineHoursAt(std::pow(1000 / f.scale_machine_hours, f.shape)), 1000, 1e-6);
}

// --- Reproductions through the engine

// Records when each job first began training and how jobs ended.
class Recorder : public JobObserver {
 public:
  void OnStatusChange(const StatusEvent& e) override {
    const std::string name(e.job_name);
    if (e.secondary_status == "Training" && !training.contains(name)) training[name] = e.time;
    phases[name].emplace(std::string(e.secondary_status), e.time);  // the first of each
    if (e.status == "Failed") ++failed;
    if (e.status == "Completed") ++completed;
  }
  std::map<std::string, absl::Time> training;
  std::map<std::string, std::map<std::string, absl::Time>> phases;
  int failed = 0;
  int completed = 0;
};

double P90(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::ceil(0.9 * v.size())) - 1];
}

class ReproductionTest : public testing::Test {
 protected:
  void Build(SimModels models) {
    engine_.reset();
    channel_.reset();
    provider_.reset();
    loop_ = NewVirtualEventLoop();
    auto shared = std::make_shared<const SimModels>(std::move(models));
    SimClusterOptions options;
    options.models = shared;
    options.defaults.run_duration = run_;
    options.defaults.image_bytes = 1340000000;
    options.behavior = [this](std::string_view job) {
      SimJobBehavior b;
      b.run_duration = run_;
      b.image_bytes = 1340000000;
      if (auto it = epochs_.find(std::string(job)); it != epochs_.end()) b.epochs = it->second;
      return b;
    };
    auto bytes = [](std::string_view, std::string_view) -> int64_t { return 2000000000; };
    options.channel_bytes = bytes;
    provider_ = NewSimClusterProvider(*loop_, options);
    SimDataChannelOptions channel;
    channel.models = shared;
    channel.channel_bytes = bytes;
    channel_ = NewSimDataChannel(*loop_, channel);
    EngineOptions engine_options;
    engine_options.loop = loop_.get();
    engine_options.cluster_provider = provider_.get();
    engine_options.data_channel = channel_.get();
    engine_options.warm_pools.policy = NewFixedKeepAlive(absl::Hours(1));
    engine_ = NewEngine(std::move(engine_options)).value();
    engine_->AddObserver(&recorder_);
  }

  void Create(v1::CreateTrainingJobRequest r, const std::string& name) {
    r.set_training_job_name(name);
    auto created = engine_->CreateTrainingJob(r);
    ASSERT_TRUE(created.ok()) << created.status();
    created_[name] = loop_->Now();
  }

  std::vector<double> Startups(const std::string& prefix) {
    std::vector<double> out;
    for (const auto& [name, at] : created_) {
      if (name.rfind(prefix, 0) != 0) continue;
      out.push_back(absl::ToDoubleSeconds(recorder_.training.at(name) - at));
    }
    return out;
  }

  absl::Duration run_ = absl::Minutes(10);
  std::map<std::string, int32_t> epochs_;  // per job; 1 when not listed
  Recorder recorder_;
  std::map<std::string, absl::Time> created_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<SimClusterProvider> provider_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<Engine> engine_;
};

// The service's warm-pool table: startup P90s for a 1.34 GB image and 2 GB
// of data, cold and warm, per data source; within 10% from the defaults.
TEST_F(ReproductionTest, WarmPoolStartupTableWithinTenPercent) {
  SimModels models = DefaultModels();
  models.failures.enabled = false;
  Build(models);
  constexpr int kJobs = 1000;
  const std::vector<std::pair<std::string, std::pair<double, double>>> table = {
      {"FSx", {136, 19}}, {"FastFile", {143, 21}}, {"File", {176, 70}}};
  // Cold: every job provisions; then, once they have ended and left their
  // clusters Available, as many again reuse them (warm).
  for (const auto& [mode, p90] : table) {
    const v1::CreateTrainingJobRequest r = DefaultRequest("ml.m5.xlarge", 1, mode, 0);
    for (int i = 0; i < kJobs; ++i) Create(r, absl::StrCat("cold-", mode, "-", i));
  }
  loop_->RunUntil(loop_->Now() + absl::Minutes(30));
  for (const auto& [mode, p90] : table) {
    const v1::CreateTrainingJobRequest r = DefaultRequest("ml.m5.xlarge", 1, mode, 0);
    for (int i = 0; i < kJobs; ++i) Create(r, absl::StrCat("warm-", mode, "-", i));
  }
  loop_->RunUntilIdle();
  int warm_starts = 0;
  for (const auto& [mode, p90] : table) {
    for (int i = 0; i < kJobs; ++i) warm_starts += provider_->JobStats(absl::StrCat("warm-", mode, "-", i)).warm_start;
  }
  EXPECT_EQ(warm_starts, 3 * kJobs);
  for (const auto& [mode, p90] : table) {
    const double cold = P90(Startups(absl::StrCat("cold-", mode, "-")));
    const double warm = P90(Startups(absl::StrCat("warm-", mode, "-")));
    EXPECT_NEAR(cold, p90.first, 0.10 * p90.first) << mode << " cold";
    EXPECT_NEAR(warm, p90.second, 0.10 * p90.second) << mode << " warm";
    std::printf("%-8s cold P90 %6.1f s (table %3.0f s)   warm P90 %5.1f s (table %2.0f s)\n", mode.c_str(), cold,
                p90.first, warm, p90.second);
  }
}

// Per input mode, on the virtual clock: File downloads before Training
// (set-up + size / rate), FastFile pays its metadata time, Pipe its FIFO
// set-up; a Pipe job then trains for max(work, bytes * epochs / pipe rate).
TEST_F(ReproductionTest, DataTimePerInputModeAndPipeStreamPacesTraining) {
  SimModels models = DefaultModels();
  models.failures.enabled = false;
  models.data.file_setup = {absl::Seconds(2), 0};
  models.data.file_rate = {100, 0};  // 2 GB: 20 s
  models.data.fast_file = {absl::Seconds(4.5), 0};
  models.data.pipe = {absl::Seconds(1), 0};
  models.data.pipe_rate = {20, 0};  // slow: 2 GB per epoch takes 100 s
  run_ = absl::Minutes(10);
  epochs_["pipe-9-epochs"] = 9;    // 900 s of stream for 600 s of work: stream-bound
  epochs_["pipe-1-epoch"] = 1;     // 100 s of stream: compute-bound
  epochs_["file-9-epochs"] = 9;    // File reads from disk: the epochs cost nothing more
  Build(models);
  Create(DefaultRequest("ml.m5.xlarge", 1, "File", 0), "file-9-epochs");
  Create(DefaultRequest("ml.m5.xlarge", 1, "FastFile", 0), "fastfile");
  Create(DefaultRequest("ml.m5.xlarge", 1, "Pipe", 0), "pipe-9-epochs");
  Create(DefaultRequest("ml.m5.xlarge", 1, "Pipe", 0), "pipe-1-epoch");
  loop_->RunUntilIdle();
  ASSERT_EQ(recorder_.completed, 4);
  auto phase = [&](const std::string& job, const std::string& from, const std::string& to) {
    const auto& p = recorder_.phases.at(job);
    return p.at(to) - p.at(from);
  };
  EXPECT_EQ(phase("file-9-epochs", "Downloading", "Training"), absl::Seconds(22));
  EXPECT_EQ(phase("fastfile", "Downloading", "Training"), absl::Seconds(4.5));
  EXPECT_EQ(phase("pipe-9-epochs", "Downloading", "Training"), absl::Seconds(1));
  EXPECT_EQ(phase("file-9-epochs", "Training", "Uploading"), absl::Minutes(10));
  EXPECT_EQ(phase("fastfile", "Training", "Uploading"), absl::Minutes(10));
  // 2 GB x 9 epochs at 20 MB/s: 900 s, 300 s longer than the File job's training.
  EXPECT_EQ(phase("pipe-9-epochs", "Training", "Uploading"), absl::Seconds(900));
  EXPECT_EQ(phase("pipe-1-epoch", "Training", "Uploading"), absl::Minutes(10));
  // The work is done, all of it, once.
  const SimJobStats st = provider_->JobStats("pipe-9-epochs");
  EXPECT_TRUE(st.completed);
  EXPECT_EQ(st.work_executed, absl::Minutes(10));
  EXPECT_EQ(st.progress, absl::Minutes(10));
}

// Jobs of ~100 / 1,000 / 10,000 machine-hours fail 7.8% / 13.7% / 24.7% of
// the time; within one point from the default failure process. 20,000 jobs
// per size: the binomial standard error is at most 0.31 points.
TEST_F(ReproductionTest, FailureTableWithinOnePoint) {
  struct Size {
    int32_t instances;
    absl::Duration work;
    double table;
  };
  const std::vector<Size> sizes = {
      {1, absl::Hours(100), 0.078}, {2, absl::Hours(500), 0.137}, {16, absl::Hours(625), 0.247}};
  constexpr int kJobs = 20000;
  for (size_t s = 0; s < sizes.size(); ++s) {
    run_ = sizes[s].work;
    Build(DefaultModels());
    v1::CreateTrainingJobRequest r = DefaultRequest("ml.m5.xlarge", sizes[s].instances, "File", 0);
    r.clear_input_data_config();
    for (int i = 0; i < kJobs; ++i) Create(r, absl::StrCat("size", s, "-", i));
    loop_->RunUntilIdle();
    const double rate = static_cast<double>(recorder_.failed) / kJobs;
    EXPECT_EQ(recorder_.failed + recorder_.completed, kJobs);
    EXPECT_NEAR(rate, sizes[s].table, 0.01) << sizes[s].instances << " x " << sizes[s].work;
    std::printf("%5.0f machine-hours: %.2f%% failed (table %.1f%%)\n",
                sizes[s].instances * absl::ToDoubleHours(sizes[s].work), rate * 100, sizes[s].table * 100);
    recorder_ = Recorder();
    created_.clear();
  }
}

}  // namespace
}  // namespace kiln::sim
