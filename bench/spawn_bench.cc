// The cost of starting a container's process with read-only FastFile views
// (the process runtime: a mount namespace of its own, one read-only bind per
// channel) against a plain start of the same program, in one run: the ratio
// is what a job with FastFile channels pays at spawn for its read-only
// views. Timed: Spawn, which returns once the program executes; the child's
// exit and reaping are outside the timed part.
//
//   build/bench/spawn_bench
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

#include "benchmark/benchmark.h"
#include "local/internal/spawn.h"

namespace {

using kiln::local::internal::GetMountNamespaceSupport;
using kiln::local::internal::MountNamespaceSupport;
using kiln::local::internal::Spawn;
using kiln::local::internal::SpawnSpec;

void RunSpawns(benchmark::State& state, int views, bool keeper = false) {
  if (views > 0 && GetMountNamespaceSupport() == MountNamespaceSupport::kNone) {
    state.SkipWithError("this process may create neither mount nor user namespaces");
    return;
  }
  char dir_template[] = "/tmp/kiln-spawn-bench-XXXXXX";
  const char* made = mkdtemp(dir_template);
  if (made == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  SpawnSpec spec;
  spec.argv = {"/bin/true"};
  spec.output_fd = 2;
  spec.keeper = keeper;
  for (int i = 0; i < views; ++i) spec.readonly_paths.push_back(made);
  for (auto _ : state) {
    // Timed: from the call to the program executing (what a job's start
    // waits for); the child's exit and reaping are not.
    const auto start = std::chrono::steady_clock::now();
    auto pid = Spawn(spec);
    const auto end = std::chrono::steady_clock::now();
    if (!pid.ok()) {
      state.SkipWithError(pid.status().ToString().c_str());
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
    int status;
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  rmdir(made);
}

// The peer: a plain spawn, as every job without FastFile channels does.
void BM_SpawnPlain(benchmark::State& state) { RunSpawns(state, 0); }
// With 1 and 4 read-only views (one per FastFile channel).
void BM_SpawnReadOnlyViews(benchmark::State& state) {
  RunSpawns(state, static_cast<int>(state.range(0)));
}

// Under the process keeper (local/internal/process_keeper.h), as the process
// runtime starts every container: the keeper's execution from its memory
// file and its fork of the program are what it adds to a start.
void BM_SpawnKept(benchmark::State& state) { RunSpawns(state, 0, /*keeper=*/true); }

BENCHMARK(BM_SpawnPlain)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SpawnKept)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SpawnReadOnlyViews)->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
