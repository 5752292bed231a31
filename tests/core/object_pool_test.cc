#include "core/internal/object_pool.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/internal/huge_pages.h"
#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

// About an engine job's size, with a member that owns heap memory (ASan reports it if a
// destructor is skipped) and one that needs 16-byte alignment.
struct Record {
  explicit Record(int v) : value(v), text(std::string(40, static_cast<char>('a' + v % 26))) {}
  int value;
  std::string text;
  alignas(16) unsigned char payload[700] = {};
};

TEST(ObjectPoolTest, SlotsAreDistinctAlignedAndKeepTheirObjects) {
  ObjectPool<Record> pool;
  std::vector<Record*> records;
  // Enough to fill every small block and spill into two huge ones.
  const int n = static_cast<int>(3 * kHugePageBytes / sizeof(Record));
  for (int i = 0; i < n; ++i) records.push_back(::new (pool.Allocate()) Record(i));
  std::set<uintptr_t> seen;
  for (int i = 0; i < n; ++i) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(records[i]);
    EXPECT_EQ(p % alignof(Record), 0u) << i;
    EXPECT_TRUE(seen.insert(p).second) << "slot handed out twice: " << i;
    std::memset(records[i]->payload, i & 0xff, sizeof records[i]->payload);
  }
  // No object overlaps another: each still holds what it was given.
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(records[i]->value, i);
    ASSERT_EQ(records[i]->text, std::string(40, static_cast<char>('a' + i % 26)));
    ASSERT_EQ(records[i]->payload[0], i & 0xff);
    ASSERT_EQ(records[i]->payload[sizeof records[i]->payload - 1], i & 0xff);
  }
  EXPECT_GT(pool.capacity_bytes(), static_cast<size_t>(n) * sizeof(Record));
  EXPECT_LT(pool.capacity_bytes(), static_cast<size_t>(n) * sizeof(Record) + 2 * kHugePageBytes);
  for (Record* r : records) {
    r->~Record();
    pool.Free(r);
  }
}

TEST(ObjectPoolTest, FreedSlotsAreReusedLastFreedFirstBeforeNewMemory) {
  ObjectPool<Record> pool;
  Record* a = ::new (pool.Allocate()) Record(1);
  Record* b = ::new (pool.Allocate()) Record(2);
  Record* c = ::new (pool.Allocate()) Record(3);
  const size_t capacity = pool.capacity_bytes();
  b->~Record();
  pool.Free(b);
  a->~Record();
  pool.Free(a);
  void* first = pool.Allocate();
  void* second = pool.Allocate();
  EXPECT_EQ(first, a);
  EXPECT_EQ(second, b);
  void* fresh = pool.Allocate();
  EXPECT_NE(fresh, a);
  EXPECT_NE(fresh, b);
  EXPECT_NE(fresh, c);
  EXPECT_EQ(pool.capacity_bytes(), capacity);  // no block added for reused slots
  for (void* p : {first, second, fresh}) pool.Free(p);
  c->~Record();
  pool.Free(c);
}

TEST(ObjectPoolTest, HugePagesAreAlignedZeroedAndWholeBlocks) {
  void* memory = AllocateHugePages(2 * kHugePageBytes);
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory) % kHugePageBytes, 0u);
  const unsigned char* bytes = static_cast<const unsigned char*>(memory);
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[2 * kHugePageBytes - 1], 0);
  std::memset(memory, 0x5a, 2 * kHugePageBytes);  // all of it is writable
  FreeHugePages(memory, 2 * kHugePageBytes);
}

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer a freed slot is poisoned: a use of a freed object is caught as on the
// heap.
TEST(ObjectPoolDeathTest, AddressSanitizerCatchesAUseOfAFreedObject) {
  EXPECT_DEATH(
      {
        ObjectPool<Record> pool;
        Record* r = ::new (pool.Allocate()) Record(7);
        r->~Record();
        pool.Free(r);
        volatile int v = r->value;
        (void)v;
      },
      "use-after-poison");
}
#endif

}  // namespace
}  // namespace kiln::internal
