#include "base/seq_window.h"

#include <map>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

std::vector<int> Held(const SeqWindow<std::unique_ptr<int>>& w) {
  std::vector<int> out;
  w.ForEach([&](int& v) { out.push_back(v); });
  return out;
}

TEST(SeqWindowTest, FindsWhatIsHeldAndNothingElse) {
  SeqWindow<std::unique_ptr<int>> w;
  EXPECT_EQ(w.Find(0), nullptr);
  EXPECT_EQ(w.Find(1), nullptr);
  w.Add(3, std::make_unique<int>(30));
  w.Add(7, std::make_unique<int>(70));  // seqs 4-6 never added
  ASSERT_NE(w.Find(3), nullptr);
  EXPECT_EQ(*w.Find(3), 30);
  EXPECT_EQ(*w.Find(7), 70);
  for (uint64_t seq : {0, 1, 2, 4, 5, 6, 8, 1000}) EXPECT_EQ(w.Find(seq), nullptr) << seq;
  EXPECT_EQ(Held(w), (std::vector<int>{30, 70}));
}

TEST(SeqWindowTest, TakeHandsOverAndTheWindowMovesPastTheOldest) {
  SeqWindow<std::unique_ptr<int>> w;
  for (int seq = 1; seq <= 5; ++seq) w.Add(seq, std::make_unique<int>(seq * 10));
  std::unique_ptr<int> middle = w.Take(3);  // a hole
  ASSERT_NE(middle, nullptr);
  EXPECT_EQ(*middle, 30);
  EXPECT_EQ(w.Find(3), nullptr);
  EXPECT_EQ(w.Take(3), nullptr);  // taken already
  EXPECT_EQ(*w.Take(1), 10);
  EXPECT_EQ(*w.Take(2), 20);  // the window now starts at 4
  EXPECT_EQ(Held(w), (std::vector<int>{40, 50}));
  EXPECT_EQ(*w.Find(4), 40);
  EXPECT_EQ(w.Take(99), nullptr);
  EXPECT_NE(w.Take(4), nullptr);
  EXPECT_NE(w.Take(5), nullptr);
  EXPECT_EQ(Held(w), std::vector<int>{});
  // Empty again: the next seq starts a new window anywhere above.
  w.Add(100, std::make_unique<int>(1000));
  EXPECT_EQ(*w.Find(100), 1000);
  EXPECT_EQ(w.Find(5), nullptr);
}

TEST(SeqWindowTest, FindFirstGoesInSeqOrder) {
  SeqWindow<int*> w;  // raw pointers: the window owns nothing
  int a = 1, b = 2, c = 2;
  w.Add(10, &a);
  w.Add(11, &b);
  w.Add(12, &c);
  EXPECT_EQ(w.FindFirst([](const int& v) { return v == 2; }), &b);
  EXPECT_EQ(w.FindFirst([](const int& v) { return v == 3; }), nullptr);
  EXPECT_EQ(w.Take(11), &b);
  EXPECT_EQ(w.FindFirst([](const int& v) { return v == 2; }), &c);
}

// The slots are a ring: a window that slides far (each thing taken soon after
// it came) wraps around it many times, and one that grows while wrapped keeps
// its order. Checked against the plain answer at every step.
TEST(SeqWindowTest, ASlidingWindowWrapsAndGrowsInOrder) {
  SeqWindow<std::unique_ptr<int>> w;
  uint64_t oldest = 1;  // every seq from `oldest` to `next - 1` is held, but those in `gone`
  uint64_t next = 1;
  std::vector<bool> gone(7000, false);  // next stays below 6,002
  for (int step = 0; step < 3000; ++step) {
    // Add 1-3, then take the oldest or (every 7th step) one in the middle.
    for (int k = 0; k < 1 + step % 3; ++k, ++next) {
      w.Add(next, std::make_unique<int>(static_cast<int>(next)));
    }
    uint64_t victim = oldest;
    if (step % 7 == 0 && next - oldest > 4) victim = oldest + 2;
    if (!gone[victim]) {
      std::unique_ptr<int> taken = w.Take(victim);
      ASSERT_NE(taken, nullptr) << victim;
      EXPECT_EQ(*taken, static_cast<int>(victim));
      gone[victim] = true;
    }
    while (oldest < next && gone[oldest]) ++oldest;
    std::vector<int> want;
    for (uint64_t seq = oldest; seq < next; ++seq) {
      if (!gone[seq]) want.push_back(static_cast<int>(seq));
      int* found = w.Find(seq);
      ASSERT_EQ(found == nullptr, gone[seq]) << "seq " << seq << " at step " << step;
      if (found != nullptr) {
        EXPECT_EQ(*found, static_cast<int>(seq));
      }
    }
    ASSERT_EQ(Held(w), want) << "step " << step;
    EXPECT_EQ(w.Find(next), nullptr);
  }
}

// Put takes seqs in any order: into holes, and before the window (which then
// opens backwards, growing and wrapping the ring as it must). Checked against
// a map at every step, seqs drawn from a fixed pseudo-random sequence.
TEST(SeqWindowTest, PutTakesSeqsInAnyOrder) {
  SeqWindow<std::unique_ptr<int>> w;
  std::map<uint64_t, int> want;
  uint64_t x = 12345;
  for (int step = 0; step < 4000; ++step) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    // Seqs from 1000 to 1199 (around wherever the window stands), taken once
    // in a while too (the oldest or any).
    const uint64_t seq = 1000 + (x >> 33) % 200;
    if ((x >> 20) % 4 == 0 && !want.empty()) {
      const uint64_t victim = (x >> 40) % 2 == 0 ? want.begin()->first : seq;
      std::unique_ptr<int> taken = w.Take(victim);
      ASSERT_EQ(taken != nullptr, want.count(victim) == 1) << victim << " at step " << step;
      if (taken != nullptr) {
        EXPECT_EQ(*taken, want[victim]);
      }
      want.erase(victim);
    } else if (want.count(seq) == 0) {
      w.Put(seq, std::make_unique<int>(step));
      want[seq] = step;
    }
    std::vector<int> held;
    for (const auto& [s, v] : want) held.push_back(v);
    ASSERT_EQ(Held(w), held) << "step " << step;
    for (uint64_t s = 995; s < 1205; ++s) {
      const int* found = w.Find(s);
      ASSERT_EQ(found != nullptr, want.count(s) == 1) << "seq " << s << " at step " << step;
      if (found != nullptr) {
        EXPECT_EQ(*found, want[s]);
      }
    }
  }
}

TEST(SeqWindowTest, PutBeforeTheWindowOpensItBackwards) {
  SeqWindow<std::unique_ptr<int>> w;
  w.Add(50, std::make_unique<int>(50));
  w.Put(10, std::make_unique<int>(10));  // 40 slots in front: the ring grows
  w.Put(30, std::make_unique<int>(30));  // a hole
  w.Put(60, std::make_unique<int>(60));  // after: as Add
  EXPECT_EQ(Held(w), (std::vector<int>{10, 30, 50, 60}));
  EXPECT_EQ(*w.Take(10), 10);  // the window now starts at 30
  w.Put(29, std::make_unique<int>(29));
  EXPECT_EQ(Held(w), (std::vector<int>{29, 30, 50, 60}));
  EXPECT_EQ(w.Find(10), nullptr);
  EXPECT_EQ(*w.Find(29), 29);
}

}  // namespace
}  // namespace kiln::internal
