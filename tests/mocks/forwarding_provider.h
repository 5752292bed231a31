// A ClusterProvider for engine tests: forwards every call to another provider (the simulated
// one), records what the engine asked for, and can fail provisioning. It keeps the contract of
// kiln/cluster_provider.h (tests/conformance/cluster_provider_conformance_test.cc runs it): a
// failure it makes up reaches `done` later, on the loop, never inside Provision.
#ifndef KILN_TESTS_MOCKS_FORWARDING_PROVIDER_H_
#define KILN_TESTS_MOCKS_FORWARDING_PROVIDER_H_

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kiln/cluster_provider.h"
#include "kiln/event_loop.h"

namespace kiln {

class ForwardingProvider : public ClusterProvider {
 public:
  // `to` and `loop` (the loop `to` runs on) must outlive the provider.
  ForwardingProvider(ClusterProvider& to, EventLoop& loop) : to_(to), loop_(loop) {}

  // The next `count` Provision calls fail with `error` (posted to the loop) instead of being
  // forwarded.
  void FailProvisions(int count, absl::Status error) {
    failures_left_ = count;
    error_ = std::move(error);
  }

  void Provision(const ClusterSpec& spec, ClusterCallback done) override {
    if (failures_left_ > 0) {
      --failures_left_;
      loop_.Post([done = std::move(done), error = error_]() mutable { done(error); });
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
  EventLoop& loop_;
  int failures_left_ = 0;
  absl::Status error_;
};

}  // namespace kiln

#endif  // KILN_TESTS_MOCKS_FORWARDING_PROVIDER_H_
