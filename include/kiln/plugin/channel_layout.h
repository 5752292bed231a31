// Where a training job's input channels appear in the container, as the
// SageMaker container contract lays them out, and which channels would meet
// there. A File or FastFile channel is /opt/ml/input/data/<channel> itself (a
// directory, or FastFile's link to one); a Pipe channel is the FIFOs
// /opt/ml/input/data/<channel>_<epoch>, epoch 0, 1, 2, ... written in decimal
// without sign or leading zero. So File channel "a_1" and Pipe channel "a"
// want one path on every instance that receives both. The rule belongs to the
// contract, not to a backend: request validation refuses such a request
// (CreateTrainingJob, PrepareTrainingJob, `kiln validate`), and the local
// DataChannel, which may be used without the engine, refuses to deliver
// either channel, with the same message.
// Part of the plugin kit (docs/plugins.md): a DataChannel implementation refuses
// such channels with this message. Thread-safe.
#ifndef KILN_PLUGIN_CHANNEL_LAYOUT_H_
#define KILN_PLUGIN_CHANNEL_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/v1/sagemaker.pb.h"

namespace kiln {

// Two channels of a request, by index into its InputDataConfig: the
// directory of File or FastFile channel `directory` has the name of Pipe
// channel `pipe`'s FIFO for epoch `epoch`.
struct ChannelLayoutCollision {
  int directory;
  int pipe;
  uint64_t epoch;
};

// Every collision among `request`'s channels that happens on some instance,
// ordered by `directory`, then `pipe`. A channel's mode is its effective one
// (its InputMode, else AlgorithmSpecification.TrainingInputMode); it reaches
// the instances of the groups its InstanceGroupNames lists, or every instance
// when it lists none. Other checks' concerns (unique names, valid modes and
// group names) are not this function's: it reports what the names and modes
// given would make.
std::vector<ChannelLayoutCollision> ChannelLayoutCollisions(
    const v1::CreateTrainingJobRequest& request);

// The message for `collision` of `request`: it names both channels, their
// modes, the path they share and the way out ("channels 'a_1' (File mode)
// and 'a' (Pipe mode) collide in /opt/ml/input/data: ..."), names escaped for
// a message (TextForMessage).
std::string ChannelLayoutCollisionMessage(const v1::CreateTrainingJobRequest& request,
                                          const ChannelLayoutCollision& collision);

}  // namespace kiln

#endif  // KILN_PLUGIN_CHANNEL_LAYOUT_H_
