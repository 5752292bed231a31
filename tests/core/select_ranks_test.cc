#include "base/select_ranks.h"

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

// Each rank gets the sorted vector's value, whatever the data and the ranks.
TEST(SelectRanksTest, GivesWhatASortGivesAtEachRank) {
  std::mt19937_64 rng(7);
  for (size_t n : {1u, 2u, 3u, 10u, 101u, 1000u, 50000u}) {
    for (int round = 0; round < 5; ++round) {
      std::vector<float> v(n);
      // Few distinct values in some rounds (ties), many in others.
      std::uniform_int_distribution<int> value(0, round % 2 == 0 ? 5 : 1000000);
      for (float& x : v) x = static_cast<float>(value(rng));
      std::vector<size_t> ranks;
      std::uniform_int_distribution<size_t> rank(0, n - 1);
      for (int k = 0; k < 40; ++k) ranks.push_back(rank(rng));
      ranks.push_back(0);
      ranks.push_back(n - 1);
      ranks.push_back(n - 1);  // repeated
      std::sort(ranks.begin(), ranks.end());
      std::vector<float> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      std::vector<float> selected = v;
      SelectRanks(selected, ranks);
      for (size_t r : ranks) ASSERT_EQ(selected[r], sorted[r]) << "n=" << n << " rank=" << r;
      std::sort(selected.begin(), selected.end());
      EXPECT_EQ(selected, sorted);  // a permutation of the input
    }
  }
}

TEST(SelectRanksTest, NoRanksAndEmptyVectorsAreFine) {
  std::vector<float> empty;
  SelectRanks(empty, {});
  std::vector<float> v = {3, 1, 2};
  SelectRanks(v, {});
  EXPECT_EQ(v.size(), 3u);
}

}  // namespace
}  // namespace kiln::internal
