// Prefetching an object that a step is about to read after a long while.
//
// A simulated job's state is touched at its start and then not for minutes of virtual time,
// while hundreds of other jobs run: when its container exits, the engine's job and the
// provider's cluster are out of the caches (bench/engine_bench.cc: megabytes of such state live
// at once). The step that ends the run reads them field by field along a long path, so each
// line it misses waits for the one before. Asking for all the lines first makes the misses
// overlap: one memory round trip for the object instead of one per line.
//
// Internal to Kiln. Thread-safe (a hint to the CPU; it reads nothing and never faults).
#ifndef KILN_LIB_BASE_PREFETCH_H_
#define KILN_LIB_BASE_PREFETCH_H_

#include <cstddef>
#include <cstdint>

namespace kiln::internal {

// Asks the CPU to start loading every cache line of [p, p + bytes) for reading. Has no effect on
// results; costs about an instruction per 64 bytes.
inline void PrefetchObject(const void* p, size_t bytes) {
  constexpr uintptr_t kLine = 64;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = begin & ~(kLine - 1); line < begin + bytes; line += kLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(line));
  }
}

}  // namespace kiln::internal

#endif  // KILN_LIB_BASE_PREFETCH_H_
