// The simulation backend: components that model instead of doing, for running
// the engine in virtual time. Nothing here blocks or starts a thread; every
// completion is an event scheduled on the engine's loop.
//
// SimClusterProvider models provisioning latency, capacity shortage, image
// preparation, a container run (duration, log lines, exit code, failure
// file, reaction to SIGTERM) and artifact upload, per job. SimDataChannel
// models channel delivery time. Both grow with the simulation work.
//
// Threading: loop thread only, like every component.
#ifndef KILN_SIM_SIM_H_
#define KILN_SIM_SIM_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "kiln/cluster_provider.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"

namespace kiln::sim {

// How one simulated job behaves.
struct SimJobBehavior {
  absl::Duration provision_latency = absl::Seconds(60);
  // The first `capacity_failures` Provision calls of the job report
  // insufficient capacity (ResourceExhausted), each after this latency.
  int capacity_failures = 0;
  absl::Duration capacity_error_latency = absl::Seconds(5);
  absl::Duration image_preparation = absl::Seconds(30);
  // From entrypoint start to exit.
  absl::Duration run_duration = absl::Minutes(10);
  // Exit code of the instance at `failing_instance` (0-based, in cluster
  // order); the other instances exit 0 at the same time.
  int exit_code = 0;
  int failing_instance = 0;
  std::string failure_text;  // what that instance wrote to /opt/ml/output/failure
  // After SIGTERM a container exits 0 after this delay; InfiniteDuration()
  // means it ignores SIGTERM and only SIGKILL ends it (exit code 137).
  absl::Duration sigterm_exit_delay = absl::Seconds(1);
  // Lines every container writes, at these offsets from its start.
  std::vector<std::pair<absl::Duration, std::string>> log_lines;
  absl::Duration upload_duration = absl::Seconds(5);

  // Spot interruption notices, as offsets from the start of each attempt's
  // containers: entry k applies to attempt k+1 (InfiniteDuration(): none).
  // The instance (the first) is lost `spot_notice` after its notice.
  std::vector<absl::Duration> spot_notices;
  absl::Duration spot_notice = absl::Minutes(2);
  // Node failures, in the same form: instance `lost_instance` fails then.
  std::vector<absl::Duration> instance_losses;
  int lost_instance = 0;

  // Work model: run_duration is the job's total work. With a CheckpointConfig
  // in the request and a positive interval, progress is saved every
  // `checkpoint_interval` of work, under the CheckpointConfig's S3Uri: a
  // restarted attempt, or a new job pointed at the same S3Uri, resumes from
  // the last saved progress. Otherwise a restart starts from nothing.
  absl::Duration checkpoint_interval = absl::ZeroDuration();
};

// What the simulation did for one job, for tests and reports.
struct SimJobStats {
  int attempts = 0;                 // StartContainers calls
  absl::Duration work_executed;     // work run over all attempts, redone work included
  absl::Duration progress;          // saved progress when the last attempt ended
  bool completed = false;           // the last attempt ran all remaining work
};

struct SimClusterOptions {
  SimJobBehavior defaults;
  // Returns the behaviour of the named job; null means `defaults` for all.
  std::function<SimJobBehavior(std::string_view job_name)> behavior;
  // When set, filled per job name. Must outlive the provider.
  std::map<std::string, SimJobStats>* stats = nullptr;
};

// Returns a simulated ClusterProvider on `loop`, which must outlive it.
std::unique_ptr<ClusterProvider> NewSimClusterProvider(EventLoop& loop,
                                                       SimClusterOptions options = {});

struct SimDataChannelOptions {
  // Time to deliver one channel (all channels of a job are delivered in
  // parallel). `duration`, when set, decides per job and channel.
  absl::Duration per_channel = absl::Seconds(10);
  std::function<absl::Duration(std::string_view job_name, std::string_view channel_name)> duration;
};

// Returns a simulated DataChannel on `loop`, which must outlive it.
std::unique_ptr<DataChannel> NewSimDataChannel(EventLoop& loop, SimDataChannelOptions options = {});

}  // namespace kiln::sim

#endif  // KILN_SIM_SIM_H_
