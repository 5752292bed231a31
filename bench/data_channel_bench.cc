// Data channel throughput and start time, each against a baseline run in the
// same program on the same data, printed as ratios:
//
//   Pipe      Kiln's Pipe mode (LocalDataChannel, epoch 0 read to end of
//             file) against a plain C++ writer -> FIFO -> reader, 1 MiB pipe
//             (F_SETPIPE_SZ), 1 MiB read()/write() buffers, on the same file.
//             Targets: >= 2 GiB/s and >= 0.8x the baseline.
//   File      Kiln's File mode (every object copied into the channel
//             directory) against `cp -r` of the same tree.
//             Target: >= 0.8x cp -r (time ratio cp / Kiln).
//   FastFile  Deliver-to-ready time for a 1 MB and a 1 GiB source (sparse
//             file). Target: <= 10 ms whatever the size.
//
//   build/bench/data_channel_bench [--pipe-mib=1024] [--file-mib=512] [--runs=5]
//
// Every figure is the median of --runs runs after one warm-up (the source is
// in the page cache for both sides). Data goes to $TMPDIR (default /tmp) and
// is removed at the end.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr double kGiB = 1024.0 * 1024 * 1024;

void Die(const std::string& what) {
  std::fprintf(stderr, "data_channel_bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

void Run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "data_channel_bench: '%s' failed\n", cmd.c_str());
    std::exit(1);
  }
}

// Writes `bytes` of non-zero, non-repeating-looking data.
void WriteData(const std::string& path, size_t bytes, uint64_t seed) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("create " + path);
  std::vector<uint64_t> block(kMiB / 8);
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t done = 0; done < bytes;) {
    for (uint64_t& w : block) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      w = x;
    }
    size_t n = std::min(kMiB, bytes - done);
    if (write(fd, block.data(), n) != static_cast<ssize_t>(n)) Die("write " + path);
    done += n;
  }
  close(fd);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads `path` (a FIFO) to end of file with 1 MiB reads; returns the bytes.
int64_t Drain(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  std::unique_ptr<char[]> buf(new char[kMiB]);
  int64_t total = 0;
  for (ssize_t n; (n = read(fd, buf.get(), kMiB)) > 0;) total += n;
  close(fd);
  return total;
}

// The baseline: a writer thread copies the file into the FIFO through a
// 1 MiB buffer, the pipe grown to 1 MiB; this thread reads it.
double BaselinePipe(const std::string& file, const std::string& fifo) {
  unlink(fifo.c_str());
  if (mkfifo(fifo.c_str(), 0644) != 0) Die("mkfifo");
  const absl::Time start = absl::Now();
  std::thread writer([&] {
    int in = open(file.c_str(), O_RDONLY);
    int out = open(fifo.c_str(), O_WRONLY);
    fcntl(out, F_SETPIPE_SZ, static_cast<int>(kMiB));
    std::unique_ptr<char[]> buf(new char[kMiB]);
    for (ssize_t n; (n = read(in, buf.get(), kMiB)) > 0;) {
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(out, buf.get() + off, static_cast<size_t>(n - off));
        if (w <= 0) Die("baseline write");
        off += w;
      }
    }
    close(in);
    close(out);
  });
  const int64_t bytes = Drain(fifo);
  writer.join();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  unlink(fifo.c_str());
  return static_cast<double>(bytes) / kGiB / secs;
}

struct KilnSetup {
  std::string state_dir;
  std::unique_ptr<kiln::EventLoop> loop = kiln::NewRealTimeEventLoop();
  std::unique_ptr<kiln::ObjectStore> store = kiln::NewFileObjectStore();
  kiln::ObjectStores stores;
  std::unique_ptr<kiln::DataChannel> channel;
  kiln::Cluster cluster;
  kiln::v1::CreateTrainingJobRequest request;

  explicit KilnSetup(const std::string& root) : state_dir(root + "/state") {
    stores.Register("file", store.get());
    channel = kiln::local::NewLocalDataChannel(*loop, stores, {.state_dir = state_dir});
    kiln::Instance inst;
    inst.id = "c1/algo-1";
    inst.host_name = "algo-1";
    inst.group_name = kiln::kHomogeneousGroupName;
    cluster.id = "c1";
    cluster.instances.push_back(inst);
    request.set_training_job_name("bench");
  }
  std::string DataDir() const { return state_dir + "/instances/c1/algo-1/ml/input/data"; }

  // Delivers `uri` in `mode` and returns the time until the channel is ready.
  absl::Duration Deliver(const std::string& name, const std::string& uri, const std::string& mode) {
    Run("rm -rf '" + DataDir() + "' && mkdir -p '" + DataDir() + "'");
    kiln::v1::Channel c;
    c.set_channel_name(name);
    c.mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
    c.mutable_data_source()->mutable_s3_data_source()->set_s3_uri(uri);
    kiln::JobContext job{"bench", "arn:aws:sagemaker:us-east-1:0:training-job/bench", request, cluster, 1};
    std::optional<absl::Status> result;
    const absl::Time start = absl::Now();
    absl::Time ready;
    channel->Deliver(kiln::ChannelDelivery{job, c, mode, {&cluster.instances[0]}},
                     [&](absl::Status s) {
                       ready = absl::Now();
                       result = s;
                     });
    while (!result) loop->RunUntil(loop->Now() + absl::Microseconds(200));
    if (!result->ok()) {
      std::fprintf(stderr, "data_channel_bench: %s\n", result->ToString().c_str());
      std::exit(1);
    }
    return ready - start;
  }
};

int64_t Flag(int argc, char** argv, const std::string& name, int64_t def) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    int64_t v;
    if (absl::StartsWith(a, "--" + name + "=") &&
        absl::SimpleAtoi(a.substr(name.size() + 3), &v)) {
      return v;
    }
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t pipe_mib = Flag(argc, argv, "pipe-mib", 1024);
  const int64_t file_mib = Flag(argc, argv, "file-mib", 512);
  const int runs = static_cast<int>(Flag(argc, argv, "runs", 5));
  const char* tmp = std::getenv("TMPDIR");
  std::string root = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/kiln-data-bench-XXXXXX");
  if (mkdtemp(root.data()) == nullptr) Die("mkdtemp");
  KilnSetup kiln_setup(root);

  // --- Pipe ---------------------------------------------------------------
  Run("mkdir -p " + root + "/pipe");
  const std::string pipe_file = root + "/pipe/data.bin";
  WriteData(pipe_file, static_cast<size_t>(pipe_mib) * kMiB, 1);
  std::vector<double> base, kiln;
  for (int r = 0; r <= runs; ++r) {
    const double b = BaselinePipe(pipe_file, root + "/baseline.fifo");
    kiln_setup.Deliver("p", "file://" + root + "/pipe/", "Pipe");
    const absl::Time start = absl::Now();
    const int64_t bytes = Drain(kiln_setup.DataDir() + "/p_0");
    const double k = static_cast<double>(bytes) / kGiB / absl::ToDoubleSeconds(absl::Now() - start);
    kiln_setup.channel->EndJob("bench");
    if (bytes != pipe_mib * static_cast<int64_t>(kMiB)) {
      std::fprintf(stderr, "data_channel_bench: Pipe delivered %lld bytes\n", static_cast<long long>(bytes));
      return 1;
    }
    if (r == 0) continue;  // warm-up
    base.push_back(b);
    kiln.push_back(k);
  }
  const double pipe_base = Median(base), pipe_kiln = Median(kiln);
  std::printf("Pipe      %lld MiB: Kiln %.2f GiB/s, baseline writer->FIFO->reader %.2f GiB/s, "
              "ratio %.2fx  (targets: >= 2 GiB/s, >= 0.8x)\n",
              static_cast<long long>(pipe_mib), pipe_kiln, pipe_base, pipe_kiln / pipe_base);
  Run("rm -rf " + root + "/pipe");

  // --- File ---------------------------------------------------------------
  // 64 objects in nested folders, file_mib in all.
  const std::string tree = root + "/tree";
  const size_t per_file = static_cast<size_t>(file_mib) * kMiB / 64;
  for (int i = 0; i < 64; ++i) {
    const std::string dir = absl::StrCat(tree, "/part-", i % 4, "/sub-", i % 3);
    Run("mkdir -p " + dir);
    WriteData(absl::StrCat(dir, "/obj-", i, ".bin"), per_file, static_cast<uint64_t>(i) + 2);
  }
  std::vector<double> cp_t, file_t;
  for (int r = 0; r <= runs; ++r) {
    Run("rm -rf " + root + "/cp-copy");
    const absl::Time start = absl::Now();
    Run("cp -r " + tree + " " + root + "/cp-copy");
    const double c = absl::ToDoubleSeconds(absl::Now() - start);
    Run("rm -rf " + root + "/cp-copy");
    const double k = absl::ToDoubleSeconds(kiln_setup.Deliver("f", "file://" + tree + "/", "File"));
    if (r == 0) continue;
    cp_t.push_back(c);
    file_t.push_back(k);
  }
  const double cp_s = Median(cp_t), file_s = Median(file_t);
  const double gib = static_cast<double>(per_file * 64) / kGiB;
  std::printf("File      %lld MiB in 64 objects: Kiln %.3f s (%.2f GiB/s), cp -r %.3f s (%.2f GiB/s), "
              "ratio %.2fx  (target: >= 0.8x)\n",
              static_cast<long long>(file_mib), file_s, gib / file_s, cp_s, gib / cp_s, cp_s / file_s);
  Run("rm -rf " + tree + " " + kiln_setup.DataDir());

  // --- FastFile -----------------------------------------------------------
  Run("mkdir -p " + root + "/ff-small " + root + "/ff-large");
  WriteData(root + "/ff-small/data.bin", kMiB, 3);
  Run("truncate -s 1G " + root + "/ff-large/data.bin");  // sparse
  std::vector<double> small_t, large_t;
  for (int r = 0; r <= runs * 4; ++r) {
    const double s = absl::ToDoubleMilliseconds(kiln_setup.Deliver("s", "file://" + root + "/ff-small/", "FastFile"));
    const double l = absl::ToDoubleMilliseconds(kiln_setup.Deliver("l", "file://" + root + "/ff-large/", "FastFile"));
    if (r == 0) continue;
    small_t.push_back(s);
    large_t.push_back(l);
  }
  std::printf("FastFile  start: 1 MB source %.2f ms, 1 GiB source %.2f ms, ratio %.2fx  "
              "(target: <= 10 ms whatever the size)\n",
              Median(small_t), Median(large_t), Median(large_t) / Median(small_t));
  kiln_setup.channel.reset();
  Run("rm -rf " + root);
  return 0;
}
