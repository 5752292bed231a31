// DataChannel: delivers one input channel of a training job to the instances
// that receive it, in the channel's input mode (File: copy everything before
// training; FastFile: a lazily read view; Pipe: FIFOs streamed during
// training).
//
// Implementations: the simulation backend's modelled channel (kiln/sim/sim.h),
// the local backend's (file:// sources) and the AWS backend's (s3:// sources).
//
// Threading: called on the engine's loop thread; must not block (blocking work
// runs on the implementation's threads and posts its completion). Completion
// callbacks run on the loop thread, exactly once, never inline.
#ifndef KILN_DATA_CHANNEL_H_
#define KILN_DATA_CHANNEL_H_

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
};

}  // namespace kiln

#endif  // KILN_DATA_CHANNEL_H_
