// Clock: where Kiln reads the time of day.
//
// A Clock answers one question, "what time is it?", as an absl::Time. Kiln has two kinds:
//
//   * the real clock (NewRealClock() below), used by the real-time event loop that drives the
//     local and AWS backends: monotonic, yet its readings are wall-clock timestamps;
//   * the virtual clock inside a virtual event loop (see event_loop.h), which stands still while
//     a callback runs and jumps to the time of the next event; EventLoop::clock() exposes it.
//
// Code that only needs to read the time (status timestamps, billing, journals) takes a
// `const Clock&` so that it runs unchanged under both.
//
//   std::unique_ptr<kiln::Clock> clock = kiln::NewRealClock();
//   absl::Time started = clock->Now();
//   ...
//   absl::Duration took = clock->Now() - started;  // never negative
//
// Threading: every Clock is thread-safe.

#ifndef KILN_CLOCK_H_
#define KILN_CLOCK_H_

#include <memory>

#include "absl/time/time.h"

namespace kiln {

// The source of "now" for timestamps and timers. Implemented by the real clock below and by
// each event loop (EventLoop::clock()); users may implement it for their own tests.
// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  // Returns the current time. Successive calls on one clock never go backwards.
  // Thread-safe.
  virtual absl::Time Now() const = 0;
};

// Returns a real clock: monotonic (std::chrono::steady_clock) but anchored to the system clock
// (absl::Now()) once, at creation, so that its readings are wall-clock timestamps that never
// go backwards, even when the system clock is stepped (NTP, an operator). Timers and
// timestamps share it, so a timer due at a timestamp read from it fires at that reading.
// Two real clocks created at different times may disagree by the system clock's steps since.
// The caller owns the result; it has no lifetime constraints.
// Thread-safe.
std::unique_ptr<Clock> NewRealClock();

}  // namespace kiln

#endif  // KILN_CLOCK_H_
