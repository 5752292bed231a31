// The agent's outbox (kiln/agent/outbox.h): events appended per second, and
// read back, against plain write() of the same bytes in the same run.
//
//   * BM_OutboxAppend/<payload bytes>: Outbox::Append of a payload of that
//     size (100: a batch of a log line or two), default options (8 MiB
//     segments, no fsync), acknowledging every 65,536 events so that
//     segments are reclaimed as the agent's session would.
//     BM_PlainWrite/<payload bytes> is its peer: write() of the same 16 + N
//     bytes a record takes to a file opened O_APPEND, a new file every
//     8 MiB (the old one deleted). Target: well over 100,000 Appends/s, and
//     the ratio to the peer (docs/performance.md).
//   * BM_OutboxAppendSync/<payload bytes>: the same with OutboxOptions::sync
//     (fdatasync after each Append); peer BM_PlainWriteSync, write() and
//     fdatasync. What the disk allows, for the record.
//   * BM_OutboxRead: reading 1,000,000 events of 100 bytes in order, 64 KiB
//     a Read, from an outbox left by the appends (in the page cache): events/s.
//
// Rates are counters ("events/s") per second of real time. Build with
// -DCMAKE_BUILD_TYPE=Release for figures:
//   build/bench/outbox_bench --benchmark_repetitions=5
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "kiln/agent/outbox.h"

namespace {

constexpr int64_t kSegmentBytes = 8 << 20;
constexpr uint64_t kAckEvery = 65536;

std::string TempDir() {
  char pattern[] = "/tmp/kiln-outbox-bench-XXXXXX";
  return mkdtemp(pattern);
}

void AppendEvents(benchmark::State& state, bool sync) {
  const std::string root = TempDir();
  const std::string payload(static_cast<size_t>(state.range(0)), 'x');
  kiln::agent::OutboxOptions options;
  options.sync = sync;
  {
    auto outbox = kiln::agent::Outbox::Open(root + "/outbox", options).value();
    for (auto _ : state) {
      absl::StatusOr<uint64_t> seq = outbox->Append(payload);
      if (!seq.ok()) {
        state.SkipWithError(std::string(seq.status().message()).c_str());
        break;
      }
      if (*seq % kAckEvery == 0 && !outbox->Acknowledge(*seq).ok()) {
        state.SkipWithError("Acknowledge failed");
        break;
      }
    }
  }
  std::filesystem::remove_all(root);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void WriteRecords(benchmark::State& state, bool sync) {
  const std::string root = TempDir();
  // The bytes of one record: a 16-byte header and the payload.
  const std::string record(16 + static_cast<size_t>(state.range(0)), 'x');
  int file = 0;
  int64_t written = 0;
  int fd = -1;
  std::string path;
  for (auto _ : state) {
    if (fd < 0 || written + static_cast<int64_t>(record.size()) > kSegmentBytes) {
      if (fd >= 0) {
        close(fd);
        unlink(path.c_str());
      }
      path = absl::StrCat(root, "/", file++);
      fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      written = 0;
    }
    if (write(fd, record.data(), record.size()) != static_cast<ssize_t>(record.size()) ||
        (sync && fdatasync(fd) != 0)) {
      state.SkipWithError("write failed");
      break;
    }
    written += static_cast<int64_t>(record.size());
  }
  if (fd >= 0) close(fd);
  std::filesystem::remove_all(root);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_OutboxRead(benchmark::State& state) {
  constexpr uint64_t kEvents = 1000000;
  const std::string root = TempDir();
  const std::string payload(100, 'x');
  uint64_t events = 0;
  {
    auto outbox = kiln::agent::Outbox::Open(root + "/outbox").value();
    for (uint64_t i = 0; i < kEvents; ++i) {
      if (!outbox->Append(payload).ok()) state.SkipWithError("Append failed");
    }
    for (auto _ : state) {
      uint64_t after = 0;
      while (after < kEvents) {
        absl::StatusOr<std::vector<kiln::agent::OutboxEvent>> some = outbox->Read(after, 64 << 10);
        if (!some.ok() || some->empty()) {
          state.SkipWithError("Read failed");
          break;
        }
        after = some->back().seq;
        events += some->size();
      }
    }
  }
  std::filesystem::remove_all(root);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}

void BM_OutboxAppend(benchmark::State& state) { AppendEvents(state, false); }
void BM_PlainWrite(benchmark::State& state) { WriteRecords(state, false); }
void BM_OutboxAppendSync(benchmark::State& state) { AppendEvents(state, true); }
void BM_PlainWriteSync(benchmark::State& state) { WriteRecords(state, true); }

}  // namespace

BENCHMARK(BM_OutboxAppend)->Arg(100)->Arg(1000)->UseRealTime();
BENCHMARK(BM_PlainWrite)->Arg(100)->Arg(1000)->UseRealTime();
BENCHMARK(BM_OutboxAppendSync)->Arg(100)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_PlainWriteSync)->Arg(100)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_OutboxRead)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
