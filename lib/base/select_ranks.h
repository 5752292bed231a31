// SelectRanks: order statistics of a vector without sorting it, for the percentiles of a
// simulation's startups (a million of them at the 1M bench, where a sort cost ~1% of the run).
#ifndef KILN_LIB_BASE_SELECT_RANKS_H_
#define KILN_LIB_BASE_SELECT_RANKS_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kiln::internal {

// Puts at each of the positions `ranks` (ascending, repeats allowed, each below v.size()) the
// value a sort of `v` would put there; the rest of `v` is permuted. The middle rank is selected
// over the whole range, then the ranks below it within the part before it, and those above
// within the part after: O(n log k) for k ranks.
template <class T>
void SelectRanks(std::vector<T>& v, const std::vector<size_t>& ranks);

namespace select_ranks_internal {
template <class T>
void Select(std::vector<T>& v, size_t begin, size_t end, const size_t* lo, const size_t* hi) {
  if (lo == hi || begin >= end) return;
  const size_t* mid = lo + (hi - lo) / 2;
  std::nth_element(v.begin() + static_cast<std::ptrdiff_t>(begin),
                   v.begin() + static_cast<std::ptrdiff_t>(*mid),
                   v.begin() + static_cast<std::ptrdiff_t>(end));
  const size_t* below = mid;
  while (below != lo && *(below - 1) == *mid) --below;
  const size_t* above = mid + 1;
  while (above != hi && *above == *mid) ++above;
  Select(v, begin, *mid, lo, below);
  Select(v, *mid + 1, end, above, hi);
}
}  // namespace select_ranks_internal

template <class T>
void SelectRanks(std::vector<T>& v, const std::vector<size_t>& ranks) {
  select_ranks_internal::Select(v, 0, v.size(), ranks.data(), ranks.data() + ranks.size());
}

}  // namespace kiln::internal

#endif  // KILN_LIB_BASE_SELECT_RANKS_H_
