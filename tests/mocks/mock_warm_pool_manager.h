// A gmock double of WarmPoolManager (kiln/warm_pool.h). Loop thread only, synchronous.
#ifndef KILN_TESTS_MOCKS_MOCK_WARM_POOL_MANAGER_H_
#define KILN_TESTS_MOCKS_MOCK_WARM_POOL_MANAGER_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "kiln/warm_pool.h"

namespace kiln::mocks {

class MockWarmPoolManager : public WarmPoolManager {
 public:
  MOCK_METHOD(absl::StatusOr<bool>, OnJobCreated, (const WarmPoolJob& job), (override));
  MOCK_METHOD(std::optional<Cluster>, Acquire, (std::string_view job), (override));
  MOCK_METHOD(void, OnClusterLaunched, (std::string_view job, const Cluster& cluster),
              (override));
  MOCK_METHOD(bool, OnJobEnded,
              (std::string_view job, std::optional<Cluster>& cluster, bool healthy), (override));
  MOCK_METHOD(void, OnClusterLost, (const Cluster& cluster), (override));
  MOCK_METHOD(absl::Status, UpdateKeepAlive, (std::string_view job, absl::Duration keep_alive),
              (override));
  MOCK_METHOD(std::optional<v1::WarmPoolStatus>, Status, (std::string_view job),
              (const, override));
  MOCK_METHOD(std::string, NotKeptReason, (std::string_view job), (const, override));
  MOCK_METHOD(absl::Status, OnJobDeleted, (std::string_view job), (override));
  MOCK_METHOD(void, ReleaseAll, (), (override));
};

}  // namespace kiln::mocks

#endif  // KILN_TESTS_MOCKS_MOCK_WARM_POOL_MANAGER_H_
