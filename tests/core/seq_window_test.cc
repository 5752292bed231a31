#include "core/internal/seq_window.h"

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

}  // namespace
}  // namespace kiln::internal
