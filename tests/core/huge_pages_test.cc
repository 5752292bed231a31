#include "core/internal/huge_pages.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

TEST(HugePagesTest, BlocksAreAlignedZeroedAndWhole) {
  for (int round = 0; round < 3; ++round) {  // mapped and unmapped again: nothing left over
    void* memory = AllocateHugePages(2 * kHugePageBytes);
    ASSERT_NE(memory, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(memory) % kHugePageBytes, 0u);
    const unsigned char* bytes = static_cast<const unsigned char*>(memory);
    EXPECT_EQ(bytes[0], 0);
    EXPECT_EQ(bytes[kHugePageBytes], 0);
    EXPECT_EQ(bytes[2 * kHugePageBytes - 1], 0);
    std::memset(memory, 0x5a, 2 * kHugePageBytes);  // all of it is writable
    FreeHugePages(memory, 2 * kHugePageBytes);
  }
}

}  // namespace
}  // namespace kiln::internal
