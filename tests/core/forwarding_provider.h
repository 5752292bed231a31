// A ClusterProvider for engine tests: forwards every call to another provider (the simulated
// one), records what the engine asked for, and can fail provisioning.
#ifndef KILN_TESTS_CORE_FORWARDING_PROVIDER_H_
#define KILN_TESTS_CORE_FORWARDING_PROVIDER_H_

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kiln/cluster_provider.h"

namespace kiln {

class ForwardingProvider : public ClusterProvider {
 public:
  explicit ForwardingProvider(ClusterProvider& to) : to_(to) {}

  // The next `count` Provision calls fail at once with `error` instead of being forwarded.
  void FailProvisions(int count, absl::Status error) {
    failures_left_ = count;
    error_ = std::move(error);
  }

  void Provision(const ClusterSpec& spec, ClusterCallback done) override {
    if (failures_left_ > 0) {
      --failures_left_;
      done(error_);
      return;
    }
    to_.Provision(spec, std::move(done));
  }
  void PrepareImage(const Cluster& cluster, std::string_view image, DoneCallback done) override {
    to_.PrepareImage(cluster, image, std::move(done));
  }
  void StartContainers(const JobContext& job, ContainerEvents& events,
                       DoneCallback started) override {
    ++containers_started;
    to_.StartContainers(job, events, std::move(started));
  }
  void Signal(const Cluster& cluster, int signal) override {
    signals.push_back(signal);
    to_.Signal(cluster, signal);
  }
  void UploadArtifacts(const JobContext& job, ArtifactsCallback done) override {
    to_.UploadArtifacts(job, std::move(done));
  }
  void SetListener(ClusterListener* listener) override { to_.SetListener(listener); }
  absl::Status InjectInterruption(std::string_view instance_id, InterruptionKind kind,
                                  absl::Duration notice) override {
    return to_.InjectInterruption(instance_id, kind, notice);
  }
  void Recycle(const Cluster& cluster) override {
    recycled.push_back(cluster);
    to_.Recycle(cluster);
  }
  void Release(const Cluster& cluster) override { to_.Release(cluster); }

  // What the engine asked for.
  int containers_started = 0;
  std::vector<int> signals;
  std::vector<Cluster> recycled;  // clusters a warm pool kept

 private:
  ClusterProvider& to_;
  int failures_left_ = 0;
  absl::Status error_;
};

}  // namespace kiln

#endif  // KILN_TESTS_CORE_FORWARDING_PROVIDER_H_
