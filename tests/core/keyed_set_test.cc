#include "core/internal/keyed_set.h"

#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

struct Named {
  Named(std::string n, int v) : name(std::move(n)), value(v) {}
  const std::string name;
  int value;
};
struct NameOf {
  std::string_view operator()(const Named& n) const { return n.name; }
};

TEST(KeyedSetTest, FindsByTheKeyEachObjectHolds) {
  KeyedSet<Named, NameOf> set;
  EXPECT_EQ(set.Find("a"), nullptr);
  Named& a = set.Add("a", 1);
  // A name past std::string's inline room, so that keys live on the heap too.
  const std::string long_name(64, 'x');
  Named& b = set.Add(long_name, 2);
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.Find("a"), &a);
  EXPECT_EQ(set.Find(std::string_view(long_name)), &b);
  EXPECT_EQ(set.Find(std::string(64, 'x')), &b);
  EXPECT_EQ(set.Find("b"), nullptr);
  EXPECT_EQ(set.Find(""), nullptr);
  EXPECT_EQ(set.Find(std::string(63, 'x')), nullptr);
  a.value = 10;
  EXPECT_EQ(set.Find("a")->value, 10);
}

TEST(KeyedSetTest, EraseDestroysOneAndIterationSeesTheRest) {
  KeyedSet<Named, NameOf> set;
  for (int i = 0; i < 5000; ++i) set.Add("job-" + std::to_string(i), i);  // rehashes
  for (int i = 0; i < 5000; i += 2) set.Erase(*set.Find("job-" + std::to_string(i)));
  EXPECT_EQ(set.size(), 2500u);
  std::set<int> seen;
  for (const Named& n : set) {
    EXPECT_EQ(n.name, "job-" + std::to_string(n.value));
    EXPECT_TRUE(seen.insert(n.value).second);
  }
  EXPECT_EQ(seen.size(), 2500u);
  EXPECT_EQ(*seen.begin(), 1);
  EXPECT_EQ(*seen.rbegin(), 4999);
  EXPECT_EQ(set.Find("job-0"), nullptr);
  ASSERT_NE(set.Find("job-1"), nullptr);
  EXPECT_EQ(set.Find("job-1")->value, 1);
  // An erased name can be added again.
  Named& again = set.Add("job-4998", -1);
  EXPECT_EQ(set.Find("job-4998"), &again);
  EXPECT_EQ(again.value, -1);
  set.Clear();
  EXPECT_EQ(set.size(), 0u);
  EXPECT_EQ(set.Find("job-1"), nullptr);
  EXPECT_EQ(set.begin(), set.end());
}

// Counts the objects alive; refuses to be made with a negative value.
struct Counted {
  Counted(std::string n, int v) : name(std::move(n)) {
    if (v < 0) throw std::invalid_argument("negative");
    ++alive;
  }
  ~Counted() { --alive; }
  const std::string name;
  static int alive;
};
int Counted::alive = 0;
struct CountedName {
  std::string_view operator()(const Counted& c) const { return c.name; }
};

TEST(KeyedSetTest, EachObjectIsDestroyedOnceAndAFailedAddLeavesNothing) {
  {
    KeyedSet<Counted, CountedName> set;
    for (int i = 0; i < 3000; ++i) set.Add("job-" + std::to_string(i), i);
    EXPECT_EQ(Counted::alive, 3000);
    EXPECT_THROW(set.Add("bad", -1), std::invalid_argument);
    EXPECT_EQ(set.Find("bad"), nullptr);
    EXPECT_EQ(set.size(), 3000u);
    set.Erase(*set.Find("job-7"));
    EXPECT_EQ(Counted::alive, 2999);
    set.Clear();
    EXPECT_EQ(Counted::alive, 0);
    for (int i = 0; i < 100; ++i) set.Add("again-" + std::to_string(i), i);  // reuses the room
    EXPECT_EQ(Counted::alive, 100);
  }
  EXPECT_EQ(Counted::alive, 0);  // the set's destructor destroys what it holds
}

// Unlink takes an object out of reach but keeps it alive (its key free for
// another) until Destroy.
TEST(KeyedSetTest, AnUnlinkedObjectLivesUntilDestroyed) {
  {
    KeyedSet<Counted, CountedName> set;
    Counted& old = set.Add("job", 1);
    set.Add("other", 2);
    set.Unlink(old);
    EXPECT_EQ(set.Find("job"), nullptr);
    EXPECT_EQ(set.size(), 1u);
    EXPECT_EQ(Counted::alive, 2);
    EXPECT_EQ(old.name, "job");  // still there
    Counted& fresh = set.Add("job", 3);
    EXPECT_EQ(set.Find("job"), &fresh);
    EXPECT_NE(&fresh, &old);
    set.Destroy(&old);
    EXPECT_EQ(Counted::alive, 2);
    EXPECT_EQ(set.Find("job"), &fresh);
  }
  EXPECT_EQ(Counted::alive, 0);
}

}  // namespace
}  // namespace kiln::internal
