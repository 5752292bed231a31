// The doubles of tests/mocks: each can stand for its interface, and CompleteLater keeps the
// callback contract (later, on the loop thread, once per call).
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"
#include "mocks/complete_later.h"
#include "mocks/mock_cluster_provider.h"
#include "mocks/mock_data_channel.h"
#include "mocks/mock_object_store.h"
#include "mocks/mock_spot_interruption_handler.h"
#include "mocks/mock_warm_pool_manager.h"

namespace kiln::mocks {
namespace {

using ::testing::_;
using ::testing::Return;

TEST(CompleteLaterTest, CompletesAfterTheCallOnTheLoopThreadWithTheValue) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  MockClusterProvider provider;
  Cluster cluster;
  cluster.id = "c-1";
  EXPECT_CALL(provider, Provision(_, _))
      .Times(2)
      .WillRepeatedly(CompleteLater<1>(*loop, absl::StatusOr<Cluster>(cluster)));
  std::vector<std::string> got;
  bool returned = false;
  // From another thread too: the completion still comes on the loop thread.
  std::thread([&] {
    provider.Provision(ClusterSpec(), [&](absl::StatusOr<Cluster> c) {
      EXPECT_TRUE(loop->IsLoopThread());
      got.push_back(c.ok() ? c->id : c.status().ToString());
    });
  }).join();
  provider.Provision(ClusterSpec(), [&](absl::StatusOr<Cluster> c) {
    EXPECT_TRUE(returned) << "completed inline";
    EXPECT_TRUE(loop->IsLoopThread());
    got.push_back(c.ok() ? c->id : c.status().ToString());
  });
  returned = true;
  EXPECT_TRUE(got.empty());
  loop->RunUntilIdle();
  EXPECT_THAT(got, ::testing::ElementsAre("c-1", "c-1"));
}

TEST(CompleteLaterTest, StatusCallbacksOfEveryDoubleComplete) {
  std::unique_ptr<EventLoop> loop = NewVirtualEventLoop();
  MockClusterProvider provider;
  MockDataChannel channel;
  EXPECT_CALL(provider, PrepareImage(_, _, _))
      .WillOnce(CompleteLater<2>(*loop, absl::UnavailableError("no image")));
  EXPECT_CALL(channel, Deliver(_, _)).WillOnce(CompleteLater<1>(*loop, absl::OkStatus()));
  std::optional<absl::Status> prepared;
  std::optional<absl::Status> delivered;
  provider.PrepareImage(Cluster(), "image", [&](absl::Status s) { prepared = s; });
  v1::CreateTrainingJobRequest request;
  Cluster cluster;
  v1::Channel c;
  JobContext job{"job", "arn", request, cluster, 1};
  channel.Deliver(ChannelDelivery{job, c, "File", {}}, [&](absl::Status s) { delivered = s; });
  EXPECT_FALSE(prepared.has_value());
  EXPECT_FALSE(delivered.has_value());
  loop->RunUntilIdle();
  ASSERT_TRUE(prepared.has_value() && delivered.has_value());
  EXPECT_TRUE(absl::IsUnavailable(*prepared)) << *prepared;
  EXPECT_TRUE(delivered->ok()) << *delivered;
}

TEST(MocksTest, SynchronousDoublesAnswerAsTold) {
  MockObjectStore store;
  EXPECT_CALL(store, Get("s3://b/k")).WillOnce(Return(absl::StatusOr<std::string>("data")));
  EXPECT_EQ(static_cast<ObjectStore&>(store).Get("s3://b/k").value_or(""), "data");

  MockWarmPoolManager pools;
  EXPECT_CALL(pools, Acquire("job")).WillOnce(Return(std::nullopt));
  EXPECT_FALSE(static_cast<WarmPoolManager&>(pools).Acquire("job").has_value());

  MockSpotInterruptionHandler handler;
  InterruptionDecision give_up;
  give_up.action = InterruptionDecision::Action::kGiveUp;
  EXPECT_CALL(handler, OnInterruption(_)).WillOnce(Return(give_up));
  EXPECT_CALL(handler, Name()).WillOnce(Return("mock"));
  SpotInterruptionHandler& h = handler;
  EXPECT_EQ(h.OnInterruption(InterruptionContext()).action, InterruptionDecision::Action::kGiveUp);
  EXPECT_EQ(h.Name(), "mock");
}

}  // namespace
}  // namespace kiln::mocks
