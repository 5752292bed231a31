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

}  // namespace
}  // namespace kiln::internal
