// RealClock: the implementation behind kiln::NewRealClock(), declared here so that the
// real-time event loop can read it in integer nanoseconds and turn due times into
// std::chrono::steady_clock deadlines for its condition variable. Internal: never installed.
//
// Threading: thread-safe (immutable after construction).
#ifndef KILN_LIB_CORE_INTERNAL_REAL_CLOCK_H_
#define KILN_LIB_CORE_INTERNAL_REAL_CLOCK_H_

#include <chrono>
#include <cstdint>

#include "absl/time/time.h"
#include "kiln/clock.h"

namespace kiln::internal {

class RealClock final : public Clock {
 public:
  // Anchors the steady clock to the system clock's reading now.
  RealClock();

  absl::Time Now() const override { return absl::FromUnixNanos(NowNs()); }

  // Returns Now() in nanoseconds since the Unix epoch.
  int64_t NowNs() const {
    return anchor_unix_ns_ + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - anchor_steady_)
                                 .count();
  }

  // Returns the steady-clock time point at which NowNs() will read `unix_ns`.
  // REQUIRES: unix_ns >= the anchor (the clock's creation time), as for any future deadline.
  std::chrono::steady_clock::time_point ToSteady(int64_t unix_ns) const {
    return anchor_steady_ + std::chrono::nanoseconds(unix_ns - anchor_unix_ns_);
  }

 private:
  const int64_t anchor_unix_ns_;
  const std::chrono::steady_clock::time_point anchor_steady_;
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_REAL_CLOCK_H_
