// ObjectPool: storage for many objects of one type that live long and die one at a time (the
// engine's jobs, kept until deleted).
//
// Why not the heap: an engine that keeps its finished jobs grows by a job's record per job, and
// on a fresh process every 4 KiB page of that growth costs a page fault when first touched (a
// sixth of the time of 100,000 jobs through the engine, bench/engine_bench.cc). The pool hands out
// slots from blocks that start small (a few jobs' worth, for the many short-lived engines of
// tests and tools) and, past kSmallBlocks, are 2 MiB blocks of transparent huge pages
// (huge_pages.h): one fault per 2 MiB, and fewer TLB misses when running jobs are touched in a
// random order. A freed slot is reused first (last in, first out: the memory most likely still
// in cache). Memory goes back only with the pool. Under AddressSanitizer, storage not handed out
// is poisoned, so a use of a freed object is reported as it would be on the heap.
//
// Thread-compatible.
#ifndef KILN_LIB_CORE_INTERNAL_OBJECT_POOL_H_
#define KILN_LIB_CORE_INTERNAL_OBJECT_POOL_H_

#include <cstddef>
#include <new>
#include <vector>

#include "core/internal/huge_pages.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KILN_POOL_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KILN_POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KILN_POOL_POISON(p, n) ((void)(p), (void)(n))
#define KILN_POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kiln::internal {

template <class T>
class ObjectPool {
 public:
  // Blocks before the first huge one: kSmallBlockBytes each, doubling.
  static constexpr size_t kSmallBlocks = 6;
  static constexpr size_t kSmallBlockBytes = size_t{16} << 10;

  ObjectPool() = default;
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;
  // REQUIRES: every object made in the pool is destroyed and its slot freed.
  ~ObjectPool() {
    for (const Block& b : blocks_) {
      KILN_POOL_UNPOISON(b.memory, b.bytes);
      if (b.huge) {
        FreeHugePages(b.memory, kHugePageBytes);
      } else {
        ::operator delete(b.memory, std::align_val_t(kAlign));
      }
    }
  }

  // Returns uninitialized storage for one T, to construct in place. Throws std::bad_alloc.
  void* Allocate() {
    if (free_ != nullptr) {
      FreeSlot* s = free_;
      KILN_POOL_UNPOISON(s, kSlotBytes);
      free_ = s->next;
      return s;
    }
    if (next_ == end_) AddBlock();
    void* p = next_;
    next_ += kSlotBytes;
    KILN_POOL_UNPOISON(p, kSlotBytes);
    return p;
  }

  // Gives back the storage of an object that Allocate() returned, once the object is destroyed.
  void Free(void* p) {
    FreeSlot* s = ::new (p) FreeSlot;
    s->next = free_;
    free_ = s;
    KILN_POOL_POISON(p, kSlotBytes);
  }

  // Bytes held from the system (all blocks).
  size_t capacity_bytes() const { return capacity_; }

 private:
  struct FreeSlot {
    FreeSlot* next;
  };
  static constexpr size_t kAlign = alignof(T) > alignof(FreeSlot) ? alignof(T) : alignof(FreeSlot);
  static constexpr size_t kSlotBytes =
      ((sizeof(T) > sizeof(FreeSlot) ? sizeof(T) : sizeof(FreeSlot)) + kAlign - 1) & ~(kAlign - 1);
  static_assert(kSlotBytes <= kSmallBlockBytes);

  void AddBlock() {
    const bool huge = blocks_.size() >= kSmallBlocks;
    const size_t bytes = huge ? kHugePageBytes : kSmallBlockBytes << blocks_.size();
    blocks_.reserve(blocks_.size() + 1);  // nothing below throws once the memory is taken
    void* memory = huge ? AllocateHugePages(bytes) : ::operator new(bytes, std::align_val_t(kAlign));
    blocks_.push_back(Block{memory, bytes, huge});
    KILN_POOL_POISON(memory, bytes);
    capacity_ += bytes;
    next_ = static_cast<char*>(memory);
    end_ = next_ + bytes / kSlotBytes * kSlotBytes;
  }

  struct Block {
    void* memory;
    size_t bytes;
    bool huge;  // from AllocateHugePages
  };
  std::vector<Block> blocks_;
  FreeSlot* free_ = nullptr;  // freed slots, last freed first
  char* next_ = nullptr;      // the newest block's first slot never handed out
  char* end_ = nullptr;       // the end of the newest block's last whole slot
  size_t capacity_ = 0;
};

}  // namespace kiln::internal

#undef KILN_POOL_POISON
#undef KILN_POOL_UNPOISON

#endif  // KILN_LIB_CORE_INTERNAL_OBJECT_POOL_H_
