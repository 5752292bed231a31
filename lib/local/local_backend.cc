// NewLocalBackend: a provider and a data channel over one state directory.
#include <utility>

#include "kiln/local/local.h"
#include "local/state_dir.h"

namespace kiln::local {

absl::StatusOr<LocalBackend> NewLocalBackend(EventLoop& loop, ObjectStores& stores,
                                             LocalOptions options, int32_t copy_threads) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("LocalOptions.state_dir is required");
  }
  // One real path for both: the channel finds the provider's instances, and
  // publishes its views, under the same name.
  absl::StatusOr<std::string> state_dir = internal::OpenStateDir(options.state_dir);
  if (!state_dir.ok()) return state_dir.status();
  options.state_dir = *std::move(state_dir);
  if (options.object_stores == nullptr) options.object_stores = &stores;
  LocalDataChannelOptions channel_options;
  channel_options.state_dir = options.state_dir;
  channel_options.copy_threads = copy_threads;
  absl::StatusOr<std::unique_ptr<LocalClusterProviderInterface>> provider =
      NewLocalClusterProviderWithParts(loop, std::move(options));
  if (!provider.ok()) return provider.status();
  LocalBackend backend;
  backend.cluster_provider = *std::move(provider);
  backend.data_channel = NewLocalDataChannel(loop, stores, std::move(channel_options));
  return backend;
}

}  // namespace kiln::local
