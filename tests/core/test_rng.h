// A seeded generator with its own arithmetic (splitmix64), so that a seed
// gives the same subjects and messages on every platform and standard
// library. For tests that generate their inputs.
#ifndef KILN_TESTS_CORE_TEST_RNG_H_
#define KILN_TESTS_CORE_TEST_RNG_H_

#include <cstdint>
#include <vector>

namespace kiln::testing {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0.
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  bool Percent(int p) { return Below(100) < p; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) { return v[Below(static_cast<int>(v.size()))]; }

 private:
  uint64_t state_;
};

}  // namespace kiln::testing

#endif  // KILN_TESTS_CORE_TEST_RNG_H_
