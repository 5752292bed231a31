// SerializedRequest (a request's content, its name aside) and RecentRequests
// (the contents an engine accepted lately).
#include "core/internal/recent_requests.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/requests.h"
#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

v1::CreateTrainingJobRequest Request(const std::string& name) {
  return tests::MinimalRequest(name);
}

std::string ContentOf(const v1::CreateTrainingJobRequest& r) {
  SerializedRequest s(r);
  s.Serialize();
  return std::string(s.content());
}

TEST(SerializedRequestTest, TheContentIsAllButTheName) {
  const v1::CreateTrainingJobRequest a = Request("a");
  const v1::CreateTrainingJobRequest b = Request(std::string(300, 'b'));  // a 2-byte length
  v1::CreateTrainingJobRequest unnamed = Request("");
  unnamed.clear_training_job_name();
  EXPECT_EQ(ContentOf(a), ContentOf(b));
  EXPECT_EQ(ContentOf(a), ContentOf(unnamed));
  EXPECT_EQ(ContentOf(a), unnamed.SerializeAsString());

  SerializedRequest s(b);
  EXPECT_EQ(s.content_size(), ContentOf(a).size());
  s.Serialize();
  s.Serialize();  // once only
  v1::CreateTrainingJobRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(s.bytes()));
  EXPECT_EQ(parsed.training_job_name(), b.training_job_name());
  EXPECT_EQ(parsed.SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ(SerializedRequest(b).content_size(), s.content().size());

  // An empty name is a name (the field is set), and not content.
  v1::CreateTrainingJobRequest empty_name = unnamed;
  empty_name.set_training_job_name("");
  EXPECT_EQ(ContentOf(empty_name), ContentOf(unnamed));
}

TEST(SerializedRequestTest, OnlyRequestsUpTo32KiBAreLookedUp) {
  v1::CreateTrainingJobRequest r = Request("a");
  EXPECT_TRUE(SerializedRequest(r).cacheable());
  for (int i = 0; SerializedRequest(r).cacheable(); ++i) {
    (*r.mutable_hyper_parameters())[absl::StrCat("k", i)] = std::string(1000, 'v');
  }
  EXPECT_GT(r.ByteSizeLong(), SerializedRequest::kMaxBytes);
  EXPECT_LT(r.ByteSizeLong(), SerializedRequest::kMaxBytes + 1100);
}

TEST(SerializedRequestTest, AnyOtherFieldMakesADifferentContent) {
  const std::string base = ContentOf(Request("a"));
  v1::CreateTrainingJobRequest r = Request("a");
  r.mutable_resource_config()->set_instance_count(2);
  EXPECT_NE(ContentOf(r), base);
  r = Request("a");
  (*r.mutable_hyper_parameters())["lr"] = "0.1";
  EXPECT_NE(ContentOf(r), base);
  r = Request("a");
  r.mutable_algorithm_specification()->set_training_image("train:other");
  EXPECT_NE(ContentOf(r), base);
  EXPECT_EQ(SerializedRequest(r).content_size(), ContentOf(r).size());
}

// Map entries are written in key order, so requests equal as messages have
// equal contents however their maps were filled.
TEST(SerializedRequestTest, MapsGiveTheSameContentWhateverTheirInsertionOrder) {
  v1::CreateTrainingJobRequest forward = Request("a");
  v1::CreateTrainingJobRequest backward = Request("b");
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(absl::StrCat("key-", i * 7919 % 50));
  for (const std::string& k : keys) (*forward.mutable_hyper_parameters())[k] = k + "-value";
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    (*backward.mutable_hyper_parameters())[*it] = *it + "-value";
  }
  (*forward.mutable_environment())["A"] = "1";
  (*forward.mutable_environment())["B"] = "2";
  (*backward.mutable_environment())["B"] = "2";
  (*backward.mutable_environment())["A"] = "1";
  EXPECT_EQ(ContentOf(forward), ContentOf(backward));
}

TEST(RecentRequestsTest, FindsWhatItRemembersUnderAnyName) {
  RecentRequests recent;
  const v1::CreateTrainingJobRequest a_request = Request("a");
  SerializedRequest a(a_request);
  EXPECT_FALSE(recent.MayHold(a.content_size()));
  a.Serialize();
  EXPECT_FALSE(recent.Find(a).seen);

  recent.Remember(a);
  EXPECT_TRUE(recent.MayHold(a.content_size()));
  EXPECT_EQ(recent.size(), 1u);
  const v1::CreateTrainingJobRequest b_request = Request("b");
  SerializedRequest b(b_request);
  b.Serialize();
  RecentRequests::Found found = recent.Find(b);
  EXPECT_TRUE(found.seen);
  EXPECT_EQ(found.shared, nullptr);  // none shared yet

  recent.Remember(b);  // the same content: held once
  EXPECT_EQ(recent.size(), 1u);

  v1::CreateTrainingJobRequest other = Request("a");
  other.set_role_arn("arn:aws:iam::123456789012:role/Other");
  SerializedRequest c(other);
  c.Serialize();
  EXPECT_FALSE(recent.Find(c).seen);
}

// The entry keeps the shared copy only while some job holds it; the first
// copy offered wins over later ones.
TEST(RecentRequestsTest, SharesOneCopyWhileItIsHeld) {
  RecentRequests recent;
  const v1::CreateTrainingJobRequest a_request = Request("a");
  SerializedRequest a(a_request);
  a.Serialize();
  auto offered = std::make_shared<const v1::CreateTrainingJobRequest>(Request(""));
  EXPECT_EQ(recent.Share(a, offered), offered);  // not held: not kept
  EXPECT_EQ(recent.Find(a).shared, nullptr);

  recent.Remember(a);
  std::shared_ptr<const v1::CreateTrainingJobRequest> first = recent.Share(a, offered);
  EXPECT_EQ(first, offered);
  auto second_offer = std::make_shared<const v1::CreateTrainingJobRequest>(Request(""));
  EXPECT_EQ(recent.Share(a, second_offer), offered);
  EXPECT_EQ(recent.Find(a).shared, offered);

  // Weak: once no one holds it, it is gone, and the content still known.
  first.reset();
  offered.reset();
  RecentRequests::Found found = recent.Find(a);
  EXPECT_TRUE(found.seen);
  EXPECT_EQ(found.shared, nullptr);
  EXPECT_EQ(recent.Share(a, second_offer), second_offer);
}

TEST(RecentRequestsTest, DropsTheOldestWhenFull) {
  RecentRequests recent;
  std::vector<v1::CreateTrainingJobRequest> requests;
  for (size_t i = 0; i <= RecentRequests::kCapacity + 10; ++i) {
    requests.push_back(Request("job"));
    (*requests.back().mutable_hyper_parameters())["seed"] = absl::StrCat(i);
  }
  std::vector<std::unique_ptr<SerializedRequest>> serialized;
  for (const auto& r : requests) {
    serialized.push_back(std::make_unique<SerializedRequest>(r));
    serialized.back()->Serialize();
  }
  for (size_t i = 0; i < RecentRequests::kCapacity; ++i) recent.Remember(*serialized[i]);
  EXPECT_EQ(recent.size(), RecentRequests::kCapacity);
  for (size_t i = 0; i < RecentRequests::kCapacity; ++i) {
    EXPECT_TRUE(recent.Find(*serialized[i]).seen) << i;
  }
  // Eleven more: the eleven oldest go, in order.
  for (size_t i = RecentRequests::kCapacity; i < serialized.size(); ++i) {
    recent.Remember(*serialized[i]);
  }
  EXPECT_EQ(recent.size(), RecentRequests::kCapacity);
  for (size_t i = 0; i < serialized.size(); ++i) {
    EXPECT_EQ(recent.Find(*serialized[i]).seen, i >= 11) << i;
  }
  // Remembered again, a dropped one comes back in place of the oldest held.
  recent.Remember(*serialized[0]);
  EXPECT_TRUE(recent.Find(*serialized[0]).seen);
  EXPECT_FALSE(recent.Find(*serialized[11]).seen);
  EXPECT_TRUE(recent.Find(*serialized[12]).seen);
}

// MayHold answers by size: false only when no held content has that size.
TEST(RecentRequestsTest, MayHoldFollowsTheSizesHeld) {
  RecentRequests recent;
  std::vector<std::unique_ptr<SerializedRequest>> serialized;
  std::vector<v1::CreateTrainingJobRequest> requests(RecentRequests::kCapacity + 1,
                                                     Request("job"));
  for (size_t i = 0; i < requests.size(); ++i) {
    // Sizes apart by one byte each.
    requests[i].set_role_arn(absl::StrCat("arn:aws:iam::123456789012:role/", std::string(i, 'r')));
    serialized.push_back(std::make_unique<SerializedRequest>(requests[i]));
    serialized.back()->Serialize();
  }
  for (size_t i = 0; i < RecentRequests::kCapacity; ++i) recent.Remember(*serialized[i]);
  for (size_t i = 0; i < RecentRequests::kCapacity; ++i) {
    EXPECT_TRUE(recent.MayHold(serialized[i]->content_size())) << i;
  }
  EXPECT_FALSE(recent.MayHold(serialized.back()->content_size()));
  recent.Remember(*serialized.back());  // drops the first
  EXPECT_TRUE(recent.MayHold(serialized.back()->content_size()));
  EXPECT_FALSE(recent.MayHold(serialized[0]->content_size()));
}

// Callers on several threads at once (run under the sanitizers too): each
// gets a copy with its request's content, whether another thread's or its own.
TEST(RecentRequestsTest, ThreadsShareCopiesOfTheirContent) {
  RecentRequests recent;
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0), shared(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        v1::CreateTrainingJobRequest r = Request(absl::StrCat("t", t, "-", i));
        (*r.mutable_hyper_parameters())["i"] = absl::StrCat(i % 40);  // 40 contents, all held
        SerializedRequest s(r);
        s.Serialize();
        if (!recent.Find(s).seen) {
          recent.Remember(s);
          continue;
        }
        auto offered = std::make_shared<v1::CreateTrainingJobRequest>(r);
        offered->clear_training_job_name();
        std::shared_ptr<const v1::CreateTrainingJobRequest> got = recent.Share(s, offered);
        if (got == nullptr || got->SerializeAsString() != s.content()) ++wrong[t];
        ++shared[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(wrong[t], 0) << t;
    EXPECT_GT(shared[t], 0) << t;
  }
  EXPECT_LE(recent.size(), RecentRequests::kCapacity);
}

}  // namespace
}  // namespace kiln::internal
