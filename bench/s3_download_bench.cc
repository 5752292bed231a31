// Kiln's side of bench/s3_download_bench.py: downloads every object under an
// s3:// prefix the way a File-mode channel does (a few objects at once, each
// large object as parallel ranged GETs, ObjectStore::GetToFile), or streams
// them through a FIFO the way a Pipe-mode channel does (ObjectStore::Read into
// a FIFO that a reader drains). Configuration the AWS way (AWS_ENDPOINT_URL,
// AWS_ACCESS_KEY_ID, ...). Prints one line: "<mode> <bytes> <seconds>".
// fastfile: a FastFile channel of the prefix delivered by the local backend's
// data channel (a FUSE view: needs root and /dev/fuse) into an instance tree
// under STATE_DIR; prints "fastfile <bytes> <deliver seconds> <first read
// seconds>", the last being open + read of the first 4 KiB of the first
// object through the view.
//
//   s3_download_bench file s3://bucket/prefix DEST_DIR [OBJECTS_AT_ONCE [PART_MIB [CONCURRENCY]]]
//   s3_download_bench pipe s3://bucket/prefix FIFO_DIR
//   s3_download_bench fastfile s3://bucket/prefix STATE_DIR
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kiln/aws/s3.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "s3_download_bench: %s\n", what.c_str());
  return 1;
}

// FastFile: Deliver until ready, then the first 4 KiB of the first object.
int FastFile(kiln::ObjectStore& store, const std::string& prefix, const std::string& state_dir,
             int64_t bytes, const std::string& first_rel) {
  auto loop = kiln::NewRealTimeEventLoop();
  kiln::ObjectStores stores;
  stores.Register("s3", &store);
  auto channel = kiln::local::NewLocalDataChannel(*loop, stores, {.state_dir = state_dir});
  kiln::Cluster cluster;
  cluster.id = "c1";
  kiln::Instance inst;
  inst.id = "c1/algo-1";
  inst.host_name = "algo-1";
  inst.group_name = kiln::kHomogeneousGroupName;
  cluster.instances.push_back(inst);
  const std::string data_dir = state_dir + "/instances/c1/algo-1/ml/input/data";
  if (std::system(("mkdir -p '" + data_dir + "'").c_str()) != 0) return Fail("mkdir " + data_dir);
  kiln::v1::CreateTrainingJobRequest request;
  request.set_training_job_name("bench");
  kiln::v1::Channel c;
  c.set_channel_name("train");
  c.mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  c.mutable_data_source()->mutable_s3_data_source()->set_s3_uri(prefix);
  kiln::JobContext job{"bench", "arn:aws:sagemaker:us-east-1:0:training-job/bench", request,
                       cluster, 1};
  std::optional<absl::Status> result;
  const absl::Time start = absl::Now();
  absl::Time ready;
  channel->Deliver(kiln::ChannelDelivery{job, c, "FastFile", {&cluster.instances[0]}},
                   [&](absl::Status s) {
                     ready = absl::Now();
                     result = s;
                   });
  while (!result) loop->RunUntil(loop->Now() + absl::Microseconds(200));
  if (!result->ok()) return Fail(result->ToString());
  const absl::Time read_start = absl::Now();
  const std::string path = data_dir + "/train/" + first_rel;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Fail("open " + path);
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  if (n <= 0) return Fail("read " + path);
  const absl::Time read_end = absl::Now();
  channel->EndJob("bench");
  channel.reset();
  std::printf("fastfile %lld %.6f %.6f\n", static_cast<long long>(bytes),
              absl::ToDoubleSeconds(ready - start), absl::ToDoubleSeconds(read_end - read_start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    return Fail("usage: s3_download_bench file|pipe s3://bucket/prefix DIR [OBJECTS_AT_ONCE]");
  }
  const std::string mode = argv[1];
  const std::string prefix = argv[2];
  const std::string dir = argv[3];
  const int at_once = argc > 4 ? std::atoi(argv[4]) : 4;
  kiln::aws::S3Options wanted;
  if (argc > 5) wanted.part_size = int64_t{std::atoi(argv[5])} << 20;
  if (argc > 6) wanted.max_concurrency = std::atoi(argv[6]);
  auto options = kiln::aws::ResolveS3Options(wanted);
  if (!options.ok()) return Fail(options.status().ToString());
  auto store = kiln::aws::NewS3ObjectStore(*options);
  if (!store.ok()) return Fail(store.status().ToString());

  if (mode == "fastfile") {
    // The listing here only finds the size and a file to read; the channel
    // lists again itself, inside the time measured.
    auto objects = (*store)->List(prefix);
    if (!objects.ok()) return Fail(objects.status().ToString());
    if (objects->empty()) return Fail("no objects under " + prefix);
    int64_t total = 0;
    for (const auto& o : *objects) total += o.size;
    const size_t base = prefix.rfind('/') + 1;
    return FastFile(**store, prefix, dir, total, (*objects)[0].uri.substr(base));
  }
  const absl::Time start = absl::Now();
  auto objects = (*store)->List(prefix);
  if (!objects.ok()) return Fail(objects.status().ToString());
  int64_t bytes = 0;
  for (const auto& o : *objects) bytes += o.size;

  if (mode == "file") {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < at_once; ++t) {
      threads.emplace_back([&] {
        for (size_t i = next++; i < objects->size(); i = next++) {
          const std::string& uri = (*objects)[i].uri;
          absl::Status s = (*store)->GetToFile(uri, absl::StrCat(dir, "/", uri.substr(prefix.size())));
          if (!s.ok()) {
            std::fprintf(stderr, "%s\n", s.ToString().c_str());
            failed = true;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    if (failed) return 1;
  } else if (mode == "pipe") {
    // One FIFO per channel, objects streamed into it one after another (as
    // Pipe mode does), drained by a reader thread.
    const std::string fifo = dir + "/train_0";
    ::unlink(fifo.c_str());
    if (::mkfifo(fifo.c_str(), 0600) != 0) return Fail("mkfifo " + fifo);
    int64_t drained = 0;
    std::thread reader([&] {
      int fd = ::open(fifo.c_str(), O_RDONLY);
      std::vector<char> buf(1 << 20);
      ssize_t n;
      while ((n = ::read(fd, buf.data(), buf.size())) > 0) drained += n;
      ::close(fd);
    });
    int fd = ::open(fifo.c_str(), O_WRONLY);
    ::fcntl(fd, F_SETPIPE_SZ, 1 << 20);
    for (const auto& o : *objects) {
      absl::Status s = (*store)->Read(o.uri, [&](std::string_view chunk) {
        while (!chunk.empty()) {
          ssize_t n = ::write(fd, chunk.data(), chunk.size());
          if (n <= 0) return absl::UnavailableError("write to the FIFO failed");
          chunk.remove_prefix(static_cast<size_t>(n));
        }
        return absl::OkStatus();
      });
      if (!s.ok()) return Fail(s.ToString());
    }
    ::close(fd);
    reader.join();
    ::unlink(fifo.c_str());
    if (drained != bytes) return Fail(absl::StrCat("drained ", drained, " of ", bytes, " bytes"));
  } else {
    return Fail("mode must be file or pipe");
  }
  std::printf("%s %lld %.3f\n", mode.c_str(), static_cast<long long>(bytes),
              absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}
