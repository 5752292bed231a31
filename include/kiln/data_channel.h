// DataChannel: delivers one input channel of a training job to the instances
// that receive it, in the channel's input mode (File: copy everything before
// training; FastFile: a lazily read view; Pipe: FIFOs streamed during
// training).
//
// Implementations: the simulation backend's (kiln/sim/sim.h), and the local
// backend's (kiln/local/local.h), which reads file:// and s3:// ObjectStores.
//
// A channel's life for one job: CheckChannel at CreateTrainingJob, Deliver per
// channel before training (again after a restart), then EndJob once the
// job's containers are gone. Pipe mode keeps working after Deliver (a writer
// streams epochs while the container reads): what goes wrong then reaches the
// engine through a DataChannelListener, and EndJob ends it.
//
// Threading: called on the engine's loop thread and must not block (blocking
// work runs on the implementation's threads and posts its completion), except
// CheckChannel, which runs on CreateTrainingJob's caller's thread and may
// block. Completion callbacks run on the loop thread, exactly once, never
// inline.
#ifndef KILN_DATA_CHANNEL_H_
#define KILN_DATA_CHANNEL_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "kiln/cluster_provider.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln {

// One channel to deliver. References are valid only during the call.
struct ChannelDelivery {
  const JobContext& job;
  const v1::Channel& channel;
  std::string_view input_mode;                // effective: File, Pipe or FastFile
  std::vector<const Instance*> instances;     // those that receive the channel
  // ShardedByS3Key over a cluster that spans hosts, where `instances` are
  // only some of those that receive the channel: how many receive it in the
  // whole cluster (0: instances.size()), and, at the index of each of
  // `instances`, its position among them (empty: 0 .. instances.size()-1).
  // The instance at position p of n gets the objects p, p+n, ... of the
  // channel's order. Positions must be distinct and below the count, one per
  // instance; Deliver refuses others with InvalidArgument, whatever the
  // channel's distribution (FullyReplicated gives every instance everything).
  int32_t shard_count = 0;
  std::vector<int32_t> shard_positions = {};
};

// Hears about failures of a channel after its delivery completed (a Pipe
// writer that cannot read the next object). Implemented by the engine. Loop
// thread only.
class DataChannelListener {
 public:
  virtual ~DataChannelListener() = default;
  // Attempt `attempt` of job `job_name` can no longer get its channel's data:
  // `status` names the channel and the object. The engine fails the job with
  // the message (ClientError), unless the job has moved on to another attempt
  // or ended.
  virtual void OnChannelFailed(std::string_view job_name, int32_t attempt, absl::Status status) = 0;
};

class DataChannel {
 public:
  using DoneCallback = absl::AnyInvocable<void(absl::Status)>;
  virtual ~DataChannel() = default;

  // Makes the channel ready for training on every instance of the delivery:
  // File mode's copy has completed, FastFile's view and Pipe's first FIFO exist.
  // `done` gets OK, or an error naming the channel and object that fails the
  // job. Called exactly once. Work still running when the job's cluster is
  // released stops; its callback may then be dropped.
  virtual void Deliver(const ChannelDelivery& delivery, DoneCallback done) = 0;

  // The checks the service makes synchronously in CreateTrainingJob, for one
  // channel whose effective mode is `input_mode`: OK, or InvalidArgument
  // (a ValidationException) with the service's message, e.g. for an S3Prefix
  // with no objects; other codes for a source that cannot be looked at now
  // (Unavailable for an unreachable store). The engine calls it on
  // CreateTrainingJob's caller's thread, after the request validated and
  // before the job exists, so a refusal leaves nothing behind; calls for
  // different jobs may run at once, and alongside the loop thread's calls.
  // It may block, but only for a bounded look (a directory's first entry,
  // one listing request): what is found later is left to Deliver, which
  // fails the job instead. A caller on the loop thread blocks the loop for
  // that long. Default: OK.
  virtual absl::Status CheckChannel(const v1::Channel& channel, std::string_view input_mode) {
    return absl::OkStatus();
  }

  // The containers of job `job_name` have ended (or will not start), or the
  // job is about to be delivered again for a restart: stops whatever the
  // implementation still does for the job's deliveries (Pipe writers) without
  // waiting for it. Harmless for a job with nothing running, and when called
  // more than once. Default: nothing (Deliver leaves no work behind).
  virtual void EndJob(std::string_view job_name) {}

  // Sets the listener for failures after delivery (Pipe writers); null
  // removes it. `listener` must outlive the channel or be removed first.
  // Default: the channel never reports such failures.
  virtual void SetListener(DataChannelListener* listener) {}
};

}  // namespace kiln

#endif  // KILN_DATA_CHANNEL_H_
