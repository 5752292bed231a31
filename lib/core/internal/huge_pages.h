// Memory for large tables that are read in a random order (an event loop's slots): on 4 KiB
// pages most such reads also miss the TLB once the table outgrows what the TLB maps (a few
// MiB). Blocks of whole 2 MiB pages, 2 MiB aligned, on which Linux is asked for transparent
// huge pages (Debian gives them only on request); elsewhere, or if the OS declines, they are
// ordinary memory.
#ifndef KILN_LIB_CORE_INTERNAL_HUGE_PAGES_H_
#define KILN_LIB_CORE_INTERNAL_HUGE_PAGES_H_

#include <cstddef>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kiln::internal {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Returns `bytes` of uninitialized memory. REQUIRES: bytes is a multiple of kHugePageBytes.
// Throws std::bad_alloc. Free with FreeHugePages.
inline void* AllocateHugePages(size_t bytes) {
  void* memory = ::operator new(bytes, std::align_val_t(kHugePageBytes));
#if defined(__linux__)
  madvise(memory, bytes, MADV_HUGEPAGE);  // an error leaves ordinary pages
#endif
  return memory;
}

inline void FreeHugePages(void* memory) {
  ::operator delete(memory, std::align_val_t(kHugePageBytes));
}

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_HUGE_PAGES_H_
