// Slab<T>: memory for many objects of one type that live long and die in any order: an
// engine's jobs, which it keeps until they are deleted (a finished one too).
//
// Slots come from blocks that double in size up to kHugePageBytes, then stay at that size, each
// taken whole from the OS (huge_pages.h) with its pages populated at once: one system call per
// 2 MiB instead of one page fault per 4 KiB touched. A table that grows by a job per job, as an
// engine's does, otherwise takes a fault every few jobs, a few microseconds each in a virtual
// machine. A freed slot is the next one taken (the most recently used memory).
//
// The memory goes back to the OS only when the slab is destroyed: a slab holds what its most
// objects at once needed. Under AddressSanitizer free slots are poisoned, so that a use after
// free is reported until the slot is taken again.
//
// Thread-compatible.
#ifndef KILN_LIB_CORE_INTERNAL_SLAB_H_
#define KILN_LIB_CORE_INTERNAL_SLAB_H_

#include <algorithm>
#include <cstddef>
#include <new>
#include <vector>

#include "core/internal/huge_pages.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KILN_SLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define KILN_SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KILN_SLAB_POISON(p, n) ((void)(p), (void)(n))
#define KILN_SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kiln::internal {

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
      if (b.whole_pages) {
        FreeHugePages(b.memory, b.bytes);
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
  static_assert(alignof(Slot) <= kHugePageBytes);
  struct Block {
    void* memory;
    size_t bytes;
    bool whole_pages;  // from AllocateHugePages
  };

  void AddBlock() {
    // The first block holds a few objects (an engine that runs a handful of jobs keeps a few
    // KiB); each next one twice as many, up to whole huge pages.
    const size_t wanted = std::max<size_t>(sizeof(Slot) * 8, 2 * last_bytes_);
    Block block{nullptr, wanted, wanted >= kHugePageBytes};
    blocks_.reserve(blocks_.size() + 1);  // (so that push_back cannot throw below)
    if (block.whole_pages) {
      // (A slot larger than a huge page gets whole pages enough for one.)
      block.bytes = (std::max(kHugePageBytes, sizeof(Slot)) + kHugePageBytes - 1) /
                    kHugePageBytes * kHugePageBytes;
      block.memory = AllocateHugePages(block.bytes, /*populate=*/true);
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

#endif  // KILN_LIB_CORE_INTERNAL_SLAB_H_
