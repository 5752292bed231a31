// Benchmarks of Kiln's discrete-event core (kiln/event_loop.h, kiln/event_queue.h).
//
// Each figure comes with the one it is compared against:
//   * BM_Hold*: the classic hold model (a fixed population of pending events; each event, when
//     it runs, schedules one new event at now + Exp(mean 1 s)), at 10^3, 10^5 and 10^6 pending.
//     BM_HoldEventLoop/<queue> runs it through the whole virtual loop (callbacks in the slot
//     table, ScheduleAfter, dispatch) on the default queue, the heap and the ladder;
//     BM_HoldQueue/<queue> on a queue alone through the EventQueue interface (Top, then
//     ReplaceTop, as the loop does); BM_HoldStdPriorityQueue on std::priority_queue, the baseline
//     any queue must beat. The exponential sample is part of the model and of every figure,
//     drawn one of two exact ways (ZigguratExponentialNs below): by inversion, a log() per
//     sample (BM_HoldEventLoop, BM_HoldQueue, the reference figures), or by
//     the ziggurat, at half its cost (BM_HoldEventLoopZiggurat, BM_HoldQueueZiggurat).
//     BM_HoldSampler and BM_HoldSamplerZiggurat measure each alone (with the absl::Duration the
//     model makes of it), so that a figure can be told net of it.
//   * BM_Sleepers/N/K, BM_SleepersDistinctPeriods/N/K: N actors each sleeping K times (each
//     actor a callback that reschedules itself) on the default queue: the pattern of
//     bench/simgrid_sleepers.cc, the SimGrid 3.32 peer. bench/compare_simgrid.py runs both and
//     prints the ratio. BM_SleepersOn/<queue>/... and BM_SleepersDistinctPeriodsOn/<queue>/...
//     run the same on each queue.
//   * BM_RealTimeLateness: 1,000 timers armed over ~1 s on a real-time loop; reports how late
//     they run on the real clock (late_p50_us, late_p99_us, late_max_us), against the 1 ms
//     target; the same on a loop that busy-waits instead of sleeping (poll_late_*: the option
//     EventLoopOptions::spin_before_due = infinite); for a thread that only sleeps until each
//     due time (os_late_*): the floor the kernel and the host give any sleeping loop; and for a
//     thread that never sleeps but reads the clock until each due time (spin_late_*): what the
//     host alone adds, by not running this VM's CPU. All four alternate in each iteration.
//
// Rates are counters ("events/s") per second of CPU time. Build with
// -DCMAKE_BUILD_TYPE=Release for figures:
//   build/bench/event_loop_bench --benchmark_filter='Hold|Sleepers'
#include <errno.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "kiln/event_loop.h"
#include "kiln/event_queue.h"

namespace kiln {
namespace {

// SplitMix64 (Steele, Lea and Flood 2014): one add and a few multiply-xorshift steps, a
// quarter of std::mt19937_64's cost. The project writes its own generators and distributions,
// so that a seed gives the same numbers with any standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Two exact ways to draw exponentially distributed nanoseconds, both from SplitMix64:
//
// InversionExponentialNs: -log(u) for one uniform u, the textbook way. Its log() is ~50
//   instructions, and with the conversions around it the sample costs ~100, about a third of
//   an event through the whole loop.
class InversionExponentialNs {
 public:
  InversionExponentialNs(uint64_t seed, double mean_ns) : bits_(seed), mean_ns_(mean_ns) {}

  int64_t Next() {
    // u in (0, 1]: 53 random bits, never 0, so log(u) is finite.
    const double u = static_cast<double>((bits_.Next() >> 11) + 1) * 0x1.0p-53;
    return static_cast<int64_t>(-std::log(u) * mean_ns_);
  }

 private:
  SplitMix64 bits_;
  double mean_ns_;
};

// ZigguratExponentialNs: Marsaglia and Tsang's ziggurat (J. Stat. Software 5(8), 2000), the
// method numpy's Generator.standard_exponential uses. The density e^-x is covered by 256
// layers of equal area: layer 0 the base strip (a rectangle of height e^-r and the tail past
// r), layers 1..255 rectangles from x_i down to x_(i+1). One 64-bit draw picks a layer (its low
// 8 bits) and a point in it (its top 53 bits); ~98% of the points fall where the layer lies
// wholly under the curve and are returned at once, for a multiply and a compare. The others
// test against the curve (one exp) or, in the base strip, draw from the tail (r - log(u)), and
// otherwise draw again. Exact: the distribution is e^-x, not an approximation of it.
class ZigguratExponentialNs {
 public:
  ZigguratExponentialNs(uint64_t seed, double mean_ns)
      : tables_(TheTables()), bits_(seed), mean_ns_(mean_ns) {}

  int64_t Next() { return static_cast<int64_t>(StandardExponential() * mean_ns_); }

 private:
  struct Tables {
    // x[0] = v / e^-r (the base strip's width as a rectangle), x[1] = r, x[256] = 0; the
    // layer i spans heights f[i] to f[i + 1], f = e^-x.
    double x[257];
    double f[257];
    Tables() {
      const double v = std::exp(-kR) * (kR + 1);  // each layer's area
      x[0] = v / std::exp(-kR);
      x[1] = kR;
      for (int i = 1; i < 256; ++i) x[i + 1] = -std::log(v / x[i] + std::exp(-x[i]));
      x[256] = 0;  // (computed: ~1e-14)
      for (int i = 0; i <= 256; ++i) f[i] = std::exp(-x[i]);
    }
  };
  // The base strip's edge for 256 layers (Marsaglia and Tsang).
  static constexpr double kR = 7.69711747013104972;

  static const Tables& TheTables() {
    static const Tables tables;
    return tables;
  }

  double StandardExponential() {
    const Tables& t = tables_;
    for (;;) {
      const uint64_t b = bits_.Next();
      const int i = static_cast<int>(b & 0xff);
      const double x = static_cast<double>(b >> 11) * 0x1.0p-53 * t.x[i];
      if (x < t.x[i + 1]) [[likely]] return x;
      if (i == 0) return kR - std::log(Uniform01Open());
      if (t.f[i + 1] + (t.f[i] - t.f[i + 1]) * Uniform01Open() < std::exp(-x)) return x;
    }
  }

  // Uniform in (0, 1].
  double Uniform01Open() { return static_cast<double>((bits_.Next() >> 11) + 1) * 0x1.0p-53; }

  const Tables& tables_;
  SplitMix64 bits_;
  double mean_ns_;
};

// The queues under test: "default" is what a loop uses when EventLoopOptions::queue is null.
using QueueFactory = std::unique_ptr<EventQueue> (*)();
std::unique_ptr<EventQueue> DefaultQueue() { return nullptr; }

std::unique_ptr<EventLoop> NewLoopOn(QueueFactory make_queue) {
  EventLoopOptions options;
  options.queue = make_queue();
  return NewVirtualEventLoop(std::move(options));
}

constexpr double kOneSecondNs = 1e9;
constexpr int64_t kHoldEventsPerIteration = 1'000'000;

void SetEventRate(benchmark::State& state, int64_t events) {
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(events);
}

// Whether `Sampler` draws Exp(1 s); if not, `state` reports an error, and the benchmark using
// it must return untimed. Its first 10^6 draws are checked once per process: their mean and
// variance within 0.5% and 1.5% of 1 (the standard errors are 0.1% and 0.3%), and the share
// below the median (ln 2 s) within 0.2% of one half.
template <class Sampler>
bool SamplerChecked(benchmark::State& state) {
  static const bool ok = [] {
    Sampler check(/*seed=*/42, kOneSecondNs);
    constexpr int kDraws = 1'000'000;
    double sum = 0, sum_sq = 0;
    int below_median = 0;
    for (int k = 0; k < kDraws; ++k) {
      const double x = static_cast<double>(check.Next()) / kOneSecondNs;
      sum += x;
      sum_sq += x * x;
      below_median += x < std::log(2.0);
    }
    const double mean = sum / kDraws;
    const double variance = sum_sq / kDraws - mean * mean;
    const double below = static_cast<double>(below_median) / kDraws;
    return std::abs(mean - 1) <= 0.005 && std::abs(variance - 1) <= 0.015 &&
           std::abs(below - 0.5) <= 0.002;
  }();
  if (!ok) state.SkipWithError("the sampler's draws are not Exp(1 s)");
  return ok;
}

// The hold model through the virtual event loop, with exponential samples from `Sampler`.
template <class Sampler>
class HoldModel {
 public:
  HoldModel(EventLoop& loop, uint64_t seed) : loop_(loop), exp_(seed, kOneSecondNs) {}

  void ScheduleOne() {
    loop_.ScheduleAfter(absl::Nanoseconds(exp_.Next()), [this] { Fire(); });
  }

  void RunEvents(int64_t n) {
    remaining_ = n;
    loop_.Run();  // until Fire() calls Stop()
  }

 private:
  void Fire() {
    ScheduleOne();
    if (--remaining_ == 0) loop_.Stop();
  }

  EventLoop& loop_;
  Sampler exp_;
  int64_t remaining_ = 0;
};

template <class Sampler>
void HoldEventLoop(benchmark::State& state, QueueFactory make_queue) {
  if (!SamplerChecked<Sampler>(state)) return;
  const int64_t pending = state.range(0);
  std::unique_ptr<EventLoop> loop = NewLoopOn(make_queue);
  HoldModel<Sampler> model(*loop, /*seed=*/42);
  for (int64_t i = 0; i < pending; ++i) model.ScheduleOne();
  model.RunEvents(pending);  // warm up: every slot and queue entry touched once
  int64_t events = 0;
  for (auto _ : state) {
    model.RunEvents(kHoldEventsPerIteration);
    events += kHoldEventsPerIteration;
  }
  if (loop->pending_events() != static_cast<size_t>(pending)) state.SkipWithError("lost events");
  SetEventRate(state, events);
}
// The reference figures draw by inversion (BM_HoldEventLoop,
// BM_HoldQueue); the *Ziggurat variants run the same model with the ziggurat's samples.
void BM_HoldEventLoop(benchmark::State& state, QueueFactory make_queue) {
  HoldEventLoop<InversionExponentialNs>(state, make_queue);
}
void BM_HoldEventLoopZiggurat(benchmark::State& state, QueueFactory make_queue) {
  HoldEventLoop<ZigguratExponentialNs>(state, make_queue);
}
#define KILN_HOLD_SIZES ->Arg(1'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond)
BENCHMARK_CAPTURE(BM_HoldEventLoop, default, &DefaultQueue) KILN_HOLD_SIZES;
BENCHMARK_CAPTURE(BM_HoldEventLoop, heap, &NewHeapEventQueue) KILN_HOLD_SIZES;
BENCHMARK_CAPTURE(BM_HoldEventLoop, ladder, &NewLadderEventQueue) KILN_HOLD_SIZES;
BENCHMARK_CAPTURE(BM_HoldEventLoopZiggurat, default, &DefaultQueue) KILN_HOLD_SIZES;
BENCHMARK_CAPTURE(BM_HoldEventLoopZiggurat, heap, &NewHeapEventQueue) KILN_HOLD_SIZES;

// The hold model on a queue alone: pop the top, push one entry at its time + Exp(1 s).
template <class Sampler, class PopPush>
void HoldOnQueue(benchmark::State& state, PopPush pop_push) {
  Sampler exp(/*seed=*/42, kOneSecondNs);
  int64_t events = 0;
  for (auto _ : state) {
    for (int64_t k = 0; k < kHoldEventsPerIteration; ++k) pop_push(exp);
    events += kHoldEventsPerIteration;
  }
  SetEventRate(state, events);
}

// Through the EventQueue interface (virtual calls), with ReplaceTop as an event loop uses it.
template <class Sampler>
void HoldQueue(benchmark::State& state, QueueFactory make_queue) {
  if (!SamplerChecked<Sampler>(state)) return;
  const int64_t pending = state.range(0);
  std::unique_ptr<EventQueue> q = make_queue();
  Sampler init(/*seed=*/7, kOneSecondNs);
  uint64_t seq = 0;
  for (int64_t i = 0; i < pending; ++i) {
    q->Push({init.Next(), seq++, static_cast<uint32_t>(i), 1});
  }
  HoldOnQueue<Sampler>(state, [&](Sampler& exp) {
    const QueuedEvent& top = q->Top();
    q->ReplaceTop({top.time_ns + exp.Next(), seq++, top.slot, top.generation});
  });
}
void BM_HoldQueue(benchmark::State& state, QueueFactory make_queue) {
  HoldQueue<InversionExponentialNs>(state, make_queue);
}
void BM_HoldQueueZiggurat(benchmark::State& state, QueueFactory make_queue) {
  HoldQueue<ZigguratExponentialNs>(state, make_queue);
}
BENCHMARK_CAPTURE(BM_HoldQueue, heap, &NewHeapEventQueue) KILN_HOLD_SIZES;
BENCHMARK_CAPTURE(BM_HoldQueue, ladder, &NewLadderEventQueue) KILN_HOLD_SIZES;
BENCHMARK_CAPTURE(BM_HoldQueueZiggurat, heap, &NewHeapEventQueue) KILN_HOLD_SIZES;
BENCHMARK_CAPTURE(BM_HoldQueueZiggurat, ladder, &NewLadderEventQueue) KILN_HOLD_SIZES;

// The hold model's own work without any queue: the exponential sample and the absl::Duration
// made of it, as HoldModel::ScheduleOne does per event.
template <class Sampler>
void HoldSampler(benchmark::State& state) {
  if (!SamplerChecked<Sampler>(state)) return;
  Sampler exp(/*seed=*/42, kOneSecondNs);
  int64_t events = 0;
  for (auto _ : state) {
    for (int64_t k = 0; k < kHoldEventsPerIteration; ++k) {
      benchmark::DoNotOptimize(absl::Nanoseconds(exp.Next()));
    }
    events += kHoldEventsPerIteration;
  }
  SetEventRate(state, events);
}
void BM_HoldSampler(benchmark::State& state) { HoldSampler<InversionExponentialNs>(state); }
void BM_HoldSamplerZiggurat(benchmark::State& state) { HoldSampler<ZigguratExponentialNs>(state); }
BENCHMARK(BM_HoldSampler)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_HoldSamplerZiggurat)->Unit(benchmark::kMillisecond);

// The baseline: std::priority_queue of the same entries, ordered the same way.
void BM_HoldStdPriorityQueue(benchmark::State& state) {
  if (!SamplerChecked<InversionExponentialNs>(state)) return;
  const int64_t pending = state.range(0);
  auto after = [](const QueuedEvent& a, const QueuedEvent& b) { return EventBefore(b, a); };
  std::priority_queue<QueuedEvent, std::vector<QueuedEvent>, decltype(after)> q(after);
  InversionExponentialNs init(/*seed=*/7, kOneSecondNs);
  uint64_t seq = 0;
  for (int64_t i = 0; i < pending; ++i) {
    q.push({init.Next(), seq++, static_cast<uint32_t>(i), 1});
  }
  HoldOnQueue<InversionExponentialNs>(state, [&](InversionExponentialNs& exp) {
    const QueuedEvent top = q.top();
    q.pop();
    q.push({top.time_ns + exp.Next(), seq++, top.slot, top.generation});
  });
}
BENCHMARK(BM_HoldStdPriorityQueue) KILN_HOLD_SIZES;

// N actors x K sleeps, all starting at the loop's start: the SimGrid peer's pattern
// (bench/simgrid_sleepers.cc). One iteration is a whole run on a fresh loop, as in the peer,
// whose figure includes creating its actors.
//   BM_Sleepers: every actor sleeps dt = 1 s, so wake-ups are scheduled in time order and take
//     either queue's first-in first-out lane;
//   BM_SleepersDistinctPeriods: actor a sleeps dt_a = (1 + a/N) s, so wake-ups arrive out of
//     order: the heap sifts them, the ladder buckets them (simgrid_sleepers N K distinct).
// Rates are per second of CPU time, as simgrid_sleepers reports them: on a shared machine CPU
// time is the stabler figure for single-threaded work (wall time is reported too).
class Sleeper {
 public:
  Sleeper(EventLoop& loop, int64_t sleeps, absl::Duration period)
      : loop_(loop), left_(sleeps), period_(period) {}
  void Sleep() {
    loop_.ScheduleAfter(period_, [this] { Wake(); });
  }

 private:
  void Wake() {
    if (--left_ > 0) Sleep();
  }

  EventLoop& loop_;
  int64_t left_;
  absl::Duration period_;
};

void RunSleepers(benchmark::State& state, bool distinct_periods, QueueFactory make_queue) {
  const int64_t actors = state.range(0);
  const int64_t sleeps = state.range(1);
  int64_t events = 0;
  for (auto _ : state) {
    std::unique_ptr<EventLoop> loop = NewLoopOn(make_queue);
    std::vector<Sleeper> sleepers;
    sleepers.reserve(actors);
    for (int64_t a = 0; a < actors; ++a) {
      const absl::Duration period =
          distinct_periods ? absl::Nanoseconds(1'000'000'000 + 1'000'000'000 * a / actors)
                           : absl::Seconds(1);
      sleepers.emplace_back(*loop, sleeps, period).Sleep();
    }
    loop->RunUntilIdle();
    const int64_t ran = static_cast<int64_t>(loop->executed_events());
    if (ran != actors * sleeps) state.SkipWithError("wrong number of wake-ups");
    events += ran;
  }
  SetEventRate(state, events);
}

#define KILN_SLEEPER_CASES ->Args({1000, 1000})->Args({10000, 100})->Unit(benchmark::kMillisecond)

// On the default queue: the names compare_simgrid.py looks for.
void BM_Sleepers(benchmark::State& state) {
  RunSleepers(state, /*distinct_periods=*/false, &DefaultQueue);
}
BENCHMARK(BM_Sleepers) KILN_SLEEPER_CASES;

void BM_SleepersDistinctPeriods(benchmark::State& state) {
  RunSleepers(state, /*distinct_periods=*/true, &DefaultQueue);
}
BENCHMARK(BM_SleepersDistinctPeriods) KILN_SLEEPER_CASES;

// On each queue.
void BM_SleepersOn(benchmark::State& state, QueueFactory make_queue) {
  RunSleepers(state, /*distinct_periods=*/false, make_queue);
}
BENCHMARK_CAPTURE(BM_SleepersOn, heap, &NewHeapEventQueue) KILN_SLEEPER_CASES;
BENCHMARK_CAPTURE(BM_SleepersOn, ladder, &NewLadderEventQueue) KILN_SLEEPER_CASES;

void BM_SleepersDistinctPeriodsOn(benchmark::State& state, QueueFactory make_queue) {
  RunSleepers(state, /*distinct_periods=*/true, make_queue);
}
BENCHMARK_CAPTURE(BM_SleepersDistinctPeriodsOn, heap, &NewHeapEventQueue) KILN_SLEEPER_CASES;
BENCHMARK_CAPTURE(BM_SleepersDistinctPeriodsOn, ladder, &NewLadderEventQueue)
    KILN_SLEEPER_CASES;

// 1,000 timers armed at once on a real-time loop, due over ~1 s; lateness = the real clock's
// reading when the callback starts minus the due time.
//
// The peer is the operating system itself: each iteration also takes the same 1,000 due times,
// in order, on a thread that does nothing but clock_nanosleep(TIMER_ABSTIME) until each one and
// read the clock (Linux only, as is this bench). No event loop can wake earlier than the kernel
// wakes a sleeping thread, so the os_* figures are the floor on this machine at this moment,
// measured alternately with the loop's so that both see the same host. A third run, spin_*,
// never sleeps (SpinLateness): what is left there is the host's doing.
std::vector<int64_t> DueTimesNs(std::mt19937_64& rng, int64_t start_ns, int timers) {
  std::vector<int64_t> due(timers);
  // Spread uniformly over [start, start + 1 s).
  for (int64_t& d : due) d = start_ns + static_cast<int64_t>(rng() % 1'000'000'000);
  return due;
}

// Lateness of each due time (Unix nanoseconds) on a real-time loop with the given
// EventLoopOptions::spin_before_due.
void LoopLateness(const std::vector<int64_t>& due_ns, absl::Duration spin,
                  std::vector<int64_t>& lateness_ns) {
  EventLoopOptions options;
  options.spin_before_due = spin;
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop(std::move(options));
  for (const int64_t d : due_ns) {
    const absl::Time due = absl::FromUnixNanos(d);
    loop->ScheduleAt(due, [&loop, &lateness_ns, due] {
      lateness_ns.push_back(absl::ToInt64Nanoseconds(loop->Now() - due));
    });
  }
  loop->RunUntilIdle();
}

// Lateness of each due time (Unix nanoseconds) for a thread that sleeps until each in turn,
// with the 1 ns timer slack a real-time loop also sets while it runs (Linux's default, 50 us,
// lets the kernel fire a wake-up that much late).
void SleepLateness(std::vector<int64_t> due_ns, std::vector<int64_t>& lateness_ns) {
  std::sort(due_ns.begin(), due_ns.end());
  const int previous_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  // CLOCK_MONOTONIC deadlines: the same offsets from now as on the system clock.
  const int64_t unix_now = absl::ToUnixNanos(absl::Now());
  timespec mono{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  const int64_t mono_now = int64_t{mono.tv_sec} * 1'000'000'000 + mono.tv_nsec;
  for (const int64_t d : due_ns) {
    const int64_t target = mono_now + (d - unix_now);
    const timespec ts{static_cast<time_t>(target / 1'000'000'000),
                      static_cast<long>(target % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    clock_gettime(CLOCK_MONOTONIC, &mono);
    lateness_ns.push_back(int64_t{mono.tv_sec} * 1'000'000'000 + mono.tv_nsec - target);
  }
  if (previous_slack > 0) {
    prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(previous_slack), 0, 0, 0);
  }
}

// Lateness of each due time (Unix nanoseconds) for a thread that never sleeps: it reads the
// clock in a loop until each due time in turn. Only the host can make it late (by running
// something else on its CPU, or not running the VM's CPU), so spin_* shows what a loop that
// burned a core to avoid wake-ups could reach at best.
void SpinLateness(std::vector<int64_t> due_ns, std::vector<int64_t>& lateness_ns) {
  std::sort(due_ns.begin(), due_ns.end());
  for (const int64_t d : due_ns) {
    int64_t now = absl::GetCurrentTimeNanos();
    while (now < d) now = absl::GetCurrentTimeNanos();
    lateness_ns.push_back(now - d);
  }
}

void SetLatenessCounters(benchmark::State& state, const char* prefix,
                         std::vector<int64_t>& lateness_ns) {
  if (lateness_ns.empty()) return;
  std::sort(lateness_ns.begin(), lateness_ns.end());
  auto percentile_us = [&](double p) {
    const size_t i = std::min(lateness_ns.size() - 1,
                              static_cast<size_t>(p * static_cast<double>(lateness_ns.size())));
    return static_cast<double>(lateness_ns[i]) / 1e3;
  };
  const std::string name(prefix);
  state.counters[name + "p50_us"] = percentile_us(0.50);
  state.counters[name + "p99_us"] = percentile_us(0.99);
  state.counters[name + "max_us"] = static_cast<double>(lateness_ns.back()) / 1e3;
  state.counters[name + "early"] = static_cast<double>(
      std::count_if(lateness_ns.begin(), lateness_ns.end(), [](int64_t l) { return l < 0; }));
}

void BM_RealTimeLateness(benchmark::State& state) {
  constexpr int kTimers = 1000;
  std::vector<int64_t> loop_ns;
  std::vector<int64_t> os_ns;
  std::vector<int64_t> spin_ns;
  std::vector<int64_t> poll_ns;
  std::mt19937_64 rng(/*seed=*/3);
  for (auto _ : state) {
    const int64_t start = absl::ToUnixNanos(absl::Now() + absl::Milliseconds(5));
    const std::vector<int64_t> due = DueTimesNs(rng, start, kTimers);
    // The same due times, moved to start 5 ms from now: for each run after the first.
    auto due_again = [&] {
      const int64_t shift = absl::ToUnixNanos(absl::Now() + absl::Milliseconds(5)) - start;
      std::vector<int64_t> moved = due;
      for (int64_t& d : moved) d += shift;
      return moved;
    };
    LoopLateness(due, absl::ZeroDuration(), loop_ns);
    state.PauseTiming();
    // The same loop, never sleeping while a timer is pending (the option's extreme).
    LoopLateness(due_again(), absl::InfiniteDuration(), poll_ns);
    SleepLateness(due_again(), os_ns);
    SpinLateness(due_again(), spin_ns);
    state.ResumeTiming();
  }
  SetLatenessCounters(state, "late_", loop_ns);
  SetLatenessCounters(state, "poll_late_", poll_ns);
  SetLatenessCounters(state, "os_late_", os_ns);
  SetLatenessCounters(state, "spin_late_", spin_ns);
}
BENCHMARK(BM_RealTimeLateness)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
