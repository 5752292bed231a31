// Slab<T>: memory for many objects of one type that live long and die in any order: an
// engine's jobs, which it keeps until they are deleted (a finished one too).
//
// Slots come from blocks that double in size up to 2 MiB, then stay at that size, each mapped
// from the OS with its pages populated at once: one system call per 2 MiB instead of one page
// fault per 4 KiB touched (a table that grows by a job per job, as an engine's does, would take a
// fault every few jobs, a few microseconds each in a virtual machine). Not on transparent huge
// pages: on this project's VM a huge page's fault sometimes waits for the kernel to compact
// memory, and a run then took longer than with ordinary pages (README, Performance). A freed slot
// is the next one taken (the most recently used memory).
//
// The memory goes back to the OS only when the slab is destroyed: a slab holds what its most
// objects at once needed. Under AddressSanitizer free slots are poisoned, so that a use after
// free is reported until the slot is taken again.
//
// Thread-compatible.
#ifndef KILN_LIB_BASE_SLAB_H_
#define KILN_LIB_BASE_SLAB_H_

#include <algorithm>
#include <cstddef>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KILN_SLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define KILN_SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KILN_SLAB_POISON(p, n) ((void)(p), (void)(n))
#define KILN_SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kiln::internal {

namespace slab_internal {

inline constexpr size_t kLargeBlockBytes = size_t{2} << 20;
inline constexpr size_t kPageAlignment = 4096;  // what a mapping is aligned to, at least

// `bytes` (a multiple of the page size) of memory, page-aligned: on Linux a mapping, its pages
// populated now. Throws std::bad_alloc. Free with Unmap(memory, bytes).
inline void* MapPopulated(size_t bytes) {
#if defined(__linux__)
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::bad_alloc();
#if defined(MADV_POPULATE_WRITE)
  constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
  constexpr int kPopulateWrite = 23;  // Linux 5.14's value; older C libraries lack the name
#endif
  // An error (a kernel before 5.14) leaves the pages to be faulted in as they are written.
  madvise(memory, bytes, kPopulateWrite);
  return memory;
#else
  return ::operator new(bytes, std::align_val_t(kPageAlignment));
#endif
}

inline void Unmap(void* memory, size_t bytes) {
#if defined(__linux__)
  munmap(memory, bytes);
#else
  (void)bytes;
  ::operator delete(memory, std::align_val_t(kPageAlignment));
#endif
}

}  // namespace slab_internal

template <class T>
class Slab {
 public:
  Slab() = default;
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;

  // Frees every block. REQUIRES: each object constructed in a slot has been destroyed (the
  // slab runs no destructor).
  ~Slab() {
    for (const Block& b : blocks_) {
      KILN_SLAB_UNPOISON(b.memory, b.bytes);
      if (b.mapped) {
        slab_internal::Unmap(b.memory, b.bytes);
      } else {
        ::operator delete(b.memory, std::align_val_t(alignof(Slot)));
      }
    }
  }

  // Returns uninitialized room for one T: construct it with placement new. Throws
  // std::bad_alloc.
  void* Allocate() {
    Slot* slot = free_;
    if (slot != nullptr) {
      KILN_SLAB_UNPOISON(slot, sizeof(Slot));
      free_ = slot->next;
    } else {
      if (unused_ == end_) AddBlock();
      slot = unused_++;
      KILN_SLAB_UNPOISON(slot, sizeof(Slot));
    }
    return slot;
  }

  // Takes back what Allocate returned, its object destroyed already.
  void Free(void* memory) {
    Slot* slot = static_cast<Slot*>(memory);
    slot->next = free_;
    free_ = slot;
    KILN_SLAB_POISON(slot, sizeof(Slot));
  }

  // A T constructed from `args` in a slot. Throws what Allocate or the construction throws,
  // and then keeps no slot.
  template <class... Args>
  T* New(Args&&... args) {
    void* memory = Allocate();
    try {
      return new (memory) T(std::forward<Args>(args)...);
    } catch (...) {
      Free(memory);
      throw;
    }
  }

  // Destroys `object`, made by New, and takes its slot back.
  void Delete(T* object) {
    object->~T();
    Free(object);
  }

  // Bytes taken from the system so far.
  size_t reserved_bytes() const {
    size_t total = 0;
    for (const Block& b : blocks_) total += b.bytes;
    return total;
  }

 private:
  union Slot {
    Slot* next;  // while free
    alignas(T) unsigned char object[sizeof(T)];
  };
  static_assert(alignof(Slot) <= slab_internal::kPageAlignment);
  struct Block {
    void* memory;
    size_t bytes;
    bool mapped;  // from MapPopulated
  };

  void AddBlock() {
    // The first block holds a few objects (an engine that runs a handful of jobs keeps a few
    // KiB); each next one twice as many, up to 2 MiB mapped.
    using slab_internal::kLargeBlockBytes;
    const size_t wanted = std::max<size_t>(sizeof(Slot) * 8, 2 * last_bytes_);
    Block block{nullptr, wanted, wanted >= kLargeBlockBytes};
    // Room for the block's entry first, so that push_back cannot throw below (doubling: an
    // exact reserve would reallocate the list at every block).
    if (blocks_.size() == blocks_.capacity()) blocks_.reserve(2 * blocks_.size() + 4);
    if (block.mapped) {
      // (A slot larger than that gets 2 MiB multiples enough for one.)
      block.bytes = (std::max(kLargeBlockBytes, sizeof(Slot)) + kLargeBlockBytes - 1) /
                    kLargeBlockBytes * kLargeBlockBytes;
      block.memory = slab_internal::MapPopulated(block.bytes);
    } else {
      block.memory = ::operator new(block.bytes, std::align_val_t(alignof(Slot)));
    }
    blocks_.push_back(block);
    last_bytes_ = block.bytes;
    unused_ = static_cast<Slot*>(block.memory);
    end_ = unused_ + block.bytes / sizeof(Slot);
    KILN_SLAB_POISON(block.memory, block.bytes);
  }

  std::vector<Block> blocks_;
  Slot* free_ = nullptr;    // freed slots, most recent first
  Slot* unused_ = nullptr;  // the last block's slots never taken: [unused_, end_)
  Slot* end_ = nullptr;
  size_t last_bytes_ = 0;
};

}  // namespace kiln::internal

#undef KILN_SLAB_POISON
#undef KILN_SLAB_UNPOISON

#endif  // KILN_LIB_BASE_SLAB_H_
