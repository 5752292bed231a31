// absl::Time and absl::Duration arithmetic for hot paths.
//
// Debian's Abseil (20220623) defines Duration's +=, -=, *= and the conversions to and from
// nanoseconds out of line, and each call handles infinities and sub-nanosecond ticks (30-40
// instructions); a simulated job does a few dozen of them (its accounting, billing and
// timestamps). These functions do the usual case inline, on whole nanoseconds: finite values
// within about ±272 years of the Unix epoch (and durations of that size), with no fraction of a
// nanosecond. Anything else, or a result that would overflow, takes Abseil's own operator, so
// every result is exactly Abseil's.
#ifndef KILN_LIB_BASE_TIME_MATH_H_
#define KILN_LIB_BASE_TIME_MATH_H_

#include <cstdint>

#include "absl/time/time.h"

namespace kiln::internal {

// Sets *ns to `d` in whole nanoseconds and returns true when `d` is in the fast range.
inline bool FastNanos(absl::Duration d, int64_t* ns) {
  constexpr int64_t kMaxSeconds = int64_t{1} << 33;  // ~272 years
  const int64_t hi = absl::time_internal::GetRepHi(d);
  const uint32_t lo = absl::time_internal::GetRepLo(d);  // quarter nanoseconds; ~0u: infinite
  if (hi >= kMaxSeconds || hi < -kMaxSeconds || (lo & 3) != 0 || lo == ~uint32_t{0}) {
    return false;
  }
  *ns = hi * 1'000'000'000 + static_cast<int64_t>(lo / 4);
  return true;
}

// d in nanoseconds (absl::ToInt64Nanoseconds: truncated, saturated).
inline int64_t DurationNanos(absl::Duration d) {
  int64_t ns;
  return FastNanos(d, &ns) ? ns : absl::ToInt64Nanoseconds(d);
}

// t in nanoseconds since the Unix epoch (absl::ToUnixNanos).
inline int64_t UnixNanos(absl::Time t) {
  int64_t ns;
  return FastNanos(absl::time_internal::ToUnixDuration(t), &ns) ? ns : absl::ToUnixNanos(t);
}

// d / `unit` as a double (absl::FDivDuration), for finite `d`; the same formula (ticks over
// ticks), so the same double.
inline double DoubleIn(absl::Duration d, absl::Duration unit) {
  const uint32_t lo = absl::time_internal::GetRepLo(d);
  if (lo == ~uint32_t{0}) return absl::FDivDuration(d, unit);
  constexpr double kTicksPerSecond = 4e9;
  const double ticks = static_cast<double>(absl::time_internal::GetRepHi(d)) * kTicksPerSecond + lo;
  const double unit_ticks =
      static_cast<double>(absl::time_internal::GetRepHi(unit)) * kTicksPerSecond +
      absl::time_internal::GetRepLo(unit);
  return ticks / unit_ticks;
}
// absl::ToDoubleSeconds(d), absl::ToDoubleHours(d).
inline double SecondsDouble(absl::Duration d) { return DoubleIn(d, absl::Seconds(1)); }
inline double HoursDouble(absl::Duration d) { return DoubleIn(d, absl::Hours(1)); }

// a + b: on Abseil's representation (seconds, and quarter nanoseconds below a second), as its
// operator+= does it, for finite values whose sum does not overflow.
[[gnu::always_inline]] inline absl::Duration Plus(absl::Duration a, absl::Duration b) {
  constexpr uint32_t kTicksPerSecond = 4'000'000'000u;
  const uint32_t a_lo = absl::time_internal::GetRepLo(a);
  const uint32_t b_lo = absl::time_internal::GetRepLo(b);
  int64_t hi;
  if (a_lo != ~uint32_t{0} && b_lo != ~uint32_t{0} &&
      !__builtin_add_overflow(absl::time_internal::GetRepHi(a), absl::time_internal::GetRepHi(b),
                              &hi)) {
    if (a_lo < kTicksPerSecond - b_lo) return absl::time_internal::MakeDuration(hi, a_lo + b_lo);
    if (!__builtin_add_overflow(hi, 1, &hi)) {  // a carry into the seconds
      return absl::time_internal::MakeDuration(hi, a_lo - (kTicksPerSecond - b_lo));
    }
  }
  return a + b;
}

// a - b, the same way (Abseil's operator-=).
[[gnu::always_inline]] inline absl::Duration Minus(absl::Duration a, absl::Duration b) {
  constexpr uint32_t kTicksPerSecond = 4'000'000'000u;
  const uint32_t a_lo = absl::time_internal::GetRepLo(a);
  const uint32_t b_lo = absl::time_internal::GetRepLo(b);
  int64_t hi;
  if (a_lo != ~uint32_t{0} && b_lo != ~uint32_t{0} &&
      !__builtin_sub_overflow(absl::time_internal::GetRepHi(a), absl::time_internal::GetRepHi(b),
                              &hi)) {
    if (a_lo < b_lo) {
      if (!__builtin_sub_overflow(hi, 1, &hi)) {
        return absl::time_internal::MakeDuration(hi, a_lo + (kTicksPerSecond - b_lo));
      }
    } else {
      return absl::time_internal::MakeDuration(hi, a_lo - b_lo);
    }
  }
  return a - b;
}

// d * k.
inline absl::Duration Times(absl::Duration d, int64_t k) {
  int64_t x, product;
  if (FastNanos(d, &x) && !__builtin_mul_overflow(x, k, &product)) {
    return absl::Nanoseconds(product);
  }
  return d * k;
}

// absl::Floor(d, unit): the largest multiple of `unit` not above `d`.
inline absl::Duration FloorTo(absl::Duration d, absl::Duration unit) {
  int64_t x, u;
  if (FastNanos(d, &x) && FastNanos(unit, &u) && u > 0) {
    int64_t r = x % u;
    if (r < 0) r += u;
    return absl::Nanoseconds(x - r);
  }
  return absl::Floor(d, unit);
}

// t + d.
[[gnu::always_inline]] inline absl::Time Plus(absl::Time t, absl::Duration d) {
  return absl::time_internal::FromUnixDuration(Plus(absl::time_internal::ToUnixDuration(t), d));
}

// a - b.
[[gnu::always_inline]] inline absl::Duration Minus(absl::Time a, absl::Time b) {
  return Minus(absl::time_internal::ToUnixDuration(a), absl::time_internal::ToUnixDuration(b));
}

}  // namespace kiln::internal

#endif  // KILN_LIB_BASE_TIME_MATH_H_
