// A gmock double of ClusterProvider (kiln/cluster_provider.h). Its callbacks are the test's to
// complete: use CompleteLater (complete_later.h), which keeps the contract (later, on the loop).
#ifndef KILN_TESTS_MOCKS_MOCK_CLUSTER_PROVIDER_H_
#define KILN_TESTS_MOCKS_MOCK_CLUSTER_PROVIDER_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "kiln/cluster_provider.h"
#include "mocks/complete_later.h"

namespace kiln::mocks {

class MockClusterProvider : public ClusterProvider {
 public:
  MOCK_METHOD(void, Provision, (const ClusterSpec& spec, ClusterCallback done), (override));
  MOCK_METHOD(void, PrepareImage,
              (const Cluster& cluster, std::string_view image, DoneCallback done), (override));
  MOCK_METHOD(void, StartContainers,
              (const JobContext& job, ContainerEvents& events, DoneCallback started), (override));
  MOCK_METHOD(void, Signal, (const Cluster& cluster, int signal), (override));
  MOCK_METHOD(void, UploadArtifacts, (const JobContext& job, ArtifactsCallback done), (override));
  MOCK_METHOD(void, SetListener, (ClusterListener * listener), (override));
  MOCK_METHOD(absl::Status, InjectInterruption,
              (std::string_view instance_id, InterruptionKind kind, absl::Duration notice),
              (override));
  MOCK_METHOD(void, Recycle, (const Cluster& cluster), (override));
  MOCK_METHOD(void, Release, (const Cluster& cluster), (override));
};

}  // namespace kiln::mocks

#endif  // KILN_TESTS_MOCKS_MOCK_CLUSTER_PROVIDER_H_
