#include "kiln/plugin/channel_layout.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kiln/cluster_provider.h"
#include "kiln/plugin/json_value.h"

namespace kiln {
namespace {

// Whether `mode` makes /opt/ml/input/data/<channel> itself (a directory, or
// FastFile's link), rather than Pipe's <channel>_<epoch> FIFOs.
bool MakesChannelDirectory(std::string_view mode) { return mode == "File" || mode == "FastFile"; }

// A Pipe channel's FIFO: its channel's name and its epoch.
struct Fifo {
  std::string_view pipe;
  uint64_t epoch;
};

// The FIFO named `name`, if a Pipe channel can make one so named: `name` is
// the channel's name, '_', and an epoch as Pipe mode writes it (decimal, no
// sign or leading zero, at most 2^64 - 1). An epoch holds no '_', so the name
// can only be what comes before the last one. This is why only a directory
// and a FIFO can meet: two directories differ (names are unique), and two
// Pipe channels' FIFOs x_N and y_M with x != y would need a '_' in an epoch.
std::optional<Fifo> FifoNamed(std::string_view name) {
  const size_t underscore = name.rfind('_');
  if (underscore == std::string_view::npos) return std::nullopt;
  const std::string_view digits = name.substr(underscore + 1);
  uint64_t epoch = 0;
  if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &epoch) ||
      absl::StrCat(epoch) != digits) {
    return std::nullopt;  // not a number, or not as written ("+1", "01", " 1")
  }
  return Fifo{name.substr(0, underscore), epoch};
}

// Whether some instance receives both channels: one of them reaches every
// instance (no InstanceGroupNames), or they name a group in common.
bool ShareAnInstance(const v1::Channel& a, const v1::Channel& b) {
  const auto& a_groups = a.data_source().s3_data_source().instance_group_names();
  const auto& b_groups = b.data_source().s3_data_source().instance_group_names();
  if (a_groups.empty() || b_groups.empty()) return true;
  return std::any_of(a_groups.begin(), a_groups.end(), [&](const std::string& group) {
    return std::find(b_groups.begin(), b_groups.end(), group) != b_groups.end();
  });
}

}  // namespace

std::vector<ChannelLayoutCollision> ChannelLayoutCollisions(
    const v1::CreateTrainingJobRequest& request) {
  std::vector<ChannelLayoutCollision> collisions;
  const auto& channels = request.input_data_config();
  // Pipe channels by name, in request order among equal names (a request
  // may repeat a name; validation refuses that on its own).
  std::multimap<std::string_view, int> pipes;
  for (int i = 0; i < channels.size(); ++i) {
    if (EffectiveInputMode(request, channels[i]) == "Pipe") {
      pipes.emplace(channels[i].channel_name(), i);
    }
  }
  if (pipes.empty()) return collisions;
  for (int d = 0; d < channels.size(); ++d) {
    if (!MakesChannelDirectory(EffectiveInputMode(request, channels[d]))) continue;
    const std::optional<Fifo> fifo = FifoNamed(channels[d].channel_name());
    if (!fifo) continue;
    const auto [begin, end] = pipes.equal_range(fifo->pipe);
    for (auto it = begin; it != end; ++it) {
      if (ShareAnInstance(channels[d], channels[it->second])) {
        collisions.push_back(ChannelLayoutCollision{d, it->second, fifo->epoch});
      }
    }
  }
  return collisions;
}

std::string ChannelLayoutCollisionMessage(const v1::CreateTrainingJobRequest& request,
                                          const ChannelLayoutCollision& collision) {
  const v1::Channel& directory = request.input_data_config(collision.directory);
  const std::string dir = TextForMessage(directory.channel_name());
  const std::string pipe = TextForMessage(request.input_data_config(collision.pipe).channel_name());
  return absl::StrCat("channels '", dir, "' (", EffectiveInputMode(request, directory),
                      " mode) and '", pipe, "' (Pipe mode) collide in /opt/ml/input/data: '", dir,
                      "' is both the directory of channel '", dir, "' and the FIFO of channel '",
                      pipe, "' for epoch ", collision.epoch,
                      " (Pipe mode names its FIFOs <channel>_<epoch>); rename one of the channels");
}

}  // namespace kiln
