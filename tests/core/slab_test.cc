#include "base/slab.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

constexpr size_t kBlock = slab_internal::kLargeBlockBytes;

struct alignas(64) Record {
  unsigned char bytes[640];
};

TEST(SlabTest, SlotsAreDistinctAlignedAndWritableAcrossBlocks) {
  Slab<Record> slab;
  // 10,000 records of 640 bytes: small blocks first, then several whole 2 MiB ones.
  std::vector<void*> slots;
  for (int i = 0; i < 10000; ++i) {
    void* p = slab.Allocate();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(Record), 0u);
    std::memset(p, i & 0xff, sizeof(Record));
    slots.push_back(p);
  }
  EXPECT_EQ(std::set<void*>(slots.begin(), slots.end()).size(), slots.size());
  for (int i = 0; i < 10000; ++i) {
    const unsigned char* bytes = static_cast<const unsigned char*>(slots[i]);
    ASSERT_EQ(bytes[0], i & 0xff);
    ASSERT_EQ(bytes[sizeof(Record) - 1], i & 0xff);
  }
  // Geometric growth: what it reserved is within a block of what it holds.
  EXPECT_GE(slab.reserved_bytes(), 10000 * sizeof(Record));
  EXPECT_LE(slab.reserved_bytes(), 10000 * sizeof(Record) + kBlock);
}

TEST(SlabTest, AFreedSlotIsTheNextTakenAndNothingMoreIsReserved) {
  Slab<Record> slab;
  std::vector<void*> slots;
  for (int i = 0; i < 5000; ++i) slots.push_back(slab.Allocate());
  const size_t reserved = slab.reserved_bytes();
  for (int i = 0; i < 5000; i += 2) slab.Free(slots[i]);
  EXPECT_EQ(slab.Allocate(), slots[4998]);  // the most recently freed first
  EXPECT_EQ(slab.Allocate(), slots[4996]);
  for (int i = 0; i < 2498; ++i) slab.Allocate();  // the rest of the freed slots
  EXPECT_EQ(slab.reserved_bytes(), reserved);
  void* fresh = slab.Allocate();  // and then new room, none of the slots in use
  EXPECT_GE(slab.reserved_bytes(), reserved);
  EXPECT_EQ(std::count(slots.begin(), slots.end(), fresh), 0);
}

TEST(SlabTest, ObjectsLargerThanABlockGetABlockEach) {
  struct Big {
    unsigned char bytes[3 << 20];
  };
  Slab<Big> slab;
  void* a = slab.Allocate();
  void* b = slab.Allocate();
  EXPECT_NE(a, b);
  std::memset(a, 1, sizeof(Big));
  std::memset(b, 2, sizeof(Big));
  EXPECT_EQ(static_cast<unsigned char*>(a)[sizeof(Big) - 1], 1);
  EXPECT_EQ(slab.reserved_bytes() % kBlock, 0u);
  EXPECT_GE(slab.reserved_bytes(), 2 * sizeof(Big));
}

#if defined(__SANITIZE_ADDRESS__)
TEST(SlabDeathTest, AddressSanitizerReportsAUseOfAFreedSlot) {
  Slab<Record> slab;
  auto* record = static_cast<Record*>(slab.Allocate());
  record->bytes[0] = 1;
  slab.Free(record);
  volatile unsigned char* bytes = record->bytes;
  EXPECT_DEATH(bytes[100] = 2, "use-after-poison");
}
#endif

}  // namespace
}  // namespace kiln::internal
