// Memory for large tables that are read in a random order (an event loop's slots): on 4 KiB
// pages most such reads also miss the TLB once the table outgrows what the TLB maps (a few
// MiB).
// Blocks of whole 2 MiB pages, 2 MiB aligned, on which Linux is asked for transparent huge pages
// (Debian gives them only on request); elsewhere, or if the OS declines, they are ordinary
// memory.
//
// On Linux the blocks are mapped directly, exactly the size asked for (an aligned operator new
// of 2 MiB would keep up to another 2 MiB of address space mapped for its alignment): they are
// not part of malloc's heap, so mallinfo() does not count them; the process's resident set does.
#ifndef KILN_LIB_CORE_INTERNAL_HUGE_PAGES_H_
#define KILN_LIB_CORE_INTERNAL_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kiln::internal {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Returns `bytes` of zero-filled memory, kHugePageBytes aligned. REQUIRES: bytes is a
// multiple of kHugePageBytes. Throws std::bad_alloc. Free with FreeHugePages(memory, bytes).
inline void* AllocateHugePages(size_t bytes) {
#if defined(__linux__)
  // Map one huge page more than asked, then unmap what lies outside the aligned range.
  const size_t span = bytes + kHugePageBytes;
  void* mapped = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) munmap(mapped, aligned - start);
  const uintptr_t end = start + span;
  if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  void* memory = reinterpret_cast<void*>(aligned);
  madvise(memory, bytes, MADV_HUGEPAGE);  // an error leaves ordinary pages
  return memory;
#else
  void* memory = ::operator new(bytes, std::align_val_t(kHugePageBytes));
  std::memset(memory, 0, bytes);
  return memory;
#endif
}

// Frees what AllocateHugePages(bytes) returned.
inline void FreeHugePages(void* memory, size_t bytes) {
#if defined(__linux__)
  munmap(memory, bytes);
#else
  ::operator delete(memory, std::align_val_t(kHugePageBytes));
#endif
}

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_HUGE_PAGES_H_
