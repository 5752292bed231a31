#include <memory>
#include <string>
#include <utility>

#include "kiln/sim/sim.h"

namespace kiln::sim {
namespace {

constexpr uint64_t kChannelPurpose = 7;

class SimDataChannel final : public DataChannel {
 public:
  SimDataChannel(EventLoop& loop, SimDataChannelOptions options)
      : loop_(loop), options_(std::move(options)) {}

  void Deliver(const ChannelDelivery& delivery, DoneCallback done) override {
    const std::string& channel = delivery.channel.channel_name();
    absl::Duration d = options_.per_channel;
    if (options_.duration) {
      d = options_.duration(delivery.job.job_name, channel);
    } else if (options_.models != nullptr) {
      const std::string_view mode =
          delivery.channel.data_source().has_file_system_data_source() ? "FSx" : delivery.input_mode;
      // (Only a download's time depends on the size.)
      const bool sized = mode != "FSx" && mode != "FastFile" && mode != "Pipe";
      const int64_t bytes =
          sized && options_.channel_bytes ? options_.channel_bytes(delivery.job.job_name, channel) : 0;
      KeyedRng rng(MixKey(options_.models->seed, HashName(delivery.job.job_name), kChannelPurpose,
                          static_cast<uint64_t>(delivery.job.attempt), HashName(channel)));
      d = options_.models->data.Sample(mode, bytes, rng);
    }
    loop_.ScheduleAfter(d, [done = std::move(done)]() mutable { done(absl::OkStatus()); });
  }

 private:
  EventLoop& loop_;
  SimDataChannelOptions options_;
};

}  // namespace

std::unique_ptr<DataChannel> NewSimDataChannel(EventLoop& loop, SimDataChannelOptions options) {
  return std::make_unique<SimDataChannel>(loop, std::move(options));
}

}  // namespace kiln::sim
