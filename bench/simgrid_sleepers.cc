// The SimGrid 3.32 peer of BM_Sleepers and BM_SleepersDistinctPeriods
// (bench/event_loop_bench.cc): N actors each call sg4::this_actor::sleep_for(dt) K times on one
// host, with dt = 1 s for every actor ("same", the default) or dt = (1 + a/N) s for actor a
// ("distinct"). Prints the timed wake-ups per second of CPU time and of wall-clock time, engine
// setup and actor creation included (as in Kiln's figures).
//
//   simgrid_sleepers N K [same|distinct] [SimGrid flags: --cfg=... --log=...]
//   simgrid_sleepers 1000 1000 --cfg=contexts/factory:raw --cfg=contexts/stack-size:64
//       --log=root.thresh:critical   (one command line)
//
// Output (one line):
//   simgrid N=1000 K=1000 periods=same events=1000000 cpu_seconds=0.52 wall_seconds=0.55
//   cpu_events_per_s=1.9e+06 wall_events_per_s=1.8e+06
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include <simgrid/s4u.hpp>

namespace sg4 = simgrid::s4u;

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = CpuSeconds();
  sg4::Engine engine(&argc, argv);  // consumes the --cfg/--log flags
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N K [same|distinct] [SimGrid flags]\n", argv[0]);
    return 2;
  }
  const long actors = std::atol(argv[1]);
  const long sleeps = std::atol(argv[2]);
  const std::string periods = argc > 3 ? argv[3] : "same";
  if (actors <= 0 || sleeps <= 0 || (periods != "same" && periods != "distinct")) {
    std::fprintf(stderr, "N and K must be positive; periods 'same' or 'distinct'\n");
    return 2;
  }

  sg4::NetZone* zone = sg4::create_full_zone("zone");
  sg4::Host* host = zone->create_host("host", 1e9);
  zone->seal();

  long wakeups = 0;
  for (long a = 0; a < actors; ++a) {
    const double dt = periods == "same" ? 1.0 : 1.0 + static_cast<double>(a) / actors;
    sg4::Actor::create("sleeper-" + std::to_string(a), host, [sleeps, dt, &wakeups] {
      for (long k = 0; k < sleeps; ++k) {
        sg4::this_actor::sleep_for(dt);
        ++wakeups;
      }
    });
  }
  engine.run();
  const double cpu_seconds = CpuSeconds() - cpu_start;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (wakeups != actors * sleeps) {
    std::fprintf(stderr, "expected %ld wake-ups, got %ld\n", actors * sleeps, wakeups);
    return 1;
  }
  std::printf(
      "simgrid N=%ld K=%ld periods=%s events=%ld cpu_seconds=%.4f wall_seconds=%.4f "
      "cpu_events_per_s=%.4g wall_events_per_s=%.4g\n",
      actors, sleeps, periods.c_str(), wakeups, cpu_seconds, seconds,
      static_cast<double>(wakeups) / cpu_seconds, static_cast<double>(wakeups) / seconds);
  return 0;
}
