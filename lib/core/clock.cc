// The real clock (kiln/clock.h, internal/real_clock.h).
#include "kiln/clock.h"

#include <chrono>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/internal/real_clock.h"

namespace kiln {
namespace internal {

// Both readings are taken back to back; the few nanoseconds between them are the anchor's
// only error.
RealClock::RealClock()
    : anchor_unix_ns_(absl::ToUnixNanos(absl::Now())),
      anchor_steady_(std::chrono::steady_clock::now()) {}

}  // namespace internal

std::unique_ptr<Clock> NewRealClock() { return std::make_unique<internal::RealClock>(); }

}  // namespace kiln
