// File mode: the objects copied into the channel directories, a few at a
// time (local_data_channel.h).
#include "local/local_data_channel.h"

namespace kiln::local::channel {

absl::Status LocalDataChannel::Copy(const v1::Channel& channel,
                                    const std::vector<std::string>& data_roots,
                                    const Shards& shards, const std::atomic<bool>& cancelled) {
  const std::string& name = channel.channel_name();
  if (channel.data_source().s3_data_source().s3_data_type() == kAugmentedManifest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name),
        "': S3DataType AugmentedManifestFile is streamed in Pipe input mode only"));
  }
  absl::StatusOr<std::vector<Source>> sources = ListSources(channel);
  if (!sources.ok()) return sources.status();
  const bool sharded =
      channel.data_source().s3_data_source().s3_data_distribution_type() == "ShardedByS3Key";
  std::vector<CopyItem> items;
  for (size_t i = 0; i < data_roots.size(); ++i) {
    if (!internal::IsDirectory(data_roots[i])) {
      return absl::AbortedError(absl::StrCat("channel '", Shown(name), "': instance directory ",
                                             PathForMessage(data_roots[i]),
                                             " is gone (released?)"));
    }
    const std::string dir = absl::StrCat(data_roots[i], "/", name);
    absl::Status s = internal::ResetDir(dir);
    if (!s.ok()) return InChannel(name, s);
    // The instance's share: the shuffled order (ShuffleConfig) sharded, as
    // Pipe mode's first epoch.
    std::vector<const Source*> share;
    for (size_t j : internal::EpochOrder(sources->size(), channel.has_shuffle_config(),
                                         channel.shuffle_config().seed(), 0, sharded,
                                         shards.positions[i], shards.count)) {
      const Source& src = (*sources)[j];
      share.push_back(&src);
      items.push_back(
          CopyItem{src.uri, absl::StrCat(dir, "/", src.rel), data_roots[i], src.size >= 0});
    }
    s = CheckNoKeyIsAFolder(name, share);
    if (!s.ok()) return s;
  }
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first_error;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    while (!failed.load() && !cancelled.load()) {
      const size_t k = next.fetch_add(1);
      if (k >= items.size()) return;
      const CopyItem& item = items[k];
      absl::Status s;
      if (!internal::IsDirectory(item.data_root)) {
        s = absl::AbortedError(absl::StrCat("channel '", Shown(name), "': instance directory ",
                                            PathForMessage(item.data_root),
                                            " is gone (released?)"));
      } else {
        absl::StatusOr<ObjectStore*> store = stores_.For(item.uri);
        s = store.ok() ? (*store)->GetToFile(item.uri, item.dest) : store.status();
        if (absl::IsNotFound(s)) {
          s = absl::NotFoundError(absl::StrCat(
              "channel '", Shown(name), "': object '", PathForMessage(item.uri),
              item.listed ? "' disappeared during the copy (" : "' named by the manifest: ",
              s.message(), item.listed ? ")" : ""));
        } else if (absl::IsResourceExhausted(s)) {
          // A full disk (GetToFile's file-system error, which names the
          // file): in the words the service uses for a volume too small for
          // the channel's data.
          s = absl::ResourceExhaustedError(
              absl::StrCat("channel '", Shown(name),
                           "': Data download failed: Insufficient disk space: object '",
                           PathForMessage(item.uri), "': ", s.message()));
        } else if (!s.ok()) {
          s = absl::Status(s.code(), absl::StrCat("channel '", Shown(name), "': object '",
                                                  PathForMessage(item.uri), "': ", s.message()));
        }
      }
      if (!s.ok()) {
        absl::MutexLock lock(&mu);
        if (first_error.ok()) first_error = s;
        failed.store(true);
      }
    }
  };
  const size_t n = std::min<size_t>(static_cast<size_t>(options_.copy_threads), items.size());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  if (cancelled.load()) {
    return absl::CancelledError(absl::StrCat("channel '", Shown(name), "': cancelled"));
  }
  absl::MutexLock lock(&mu);
  return first_error;
}

}  // namespace kiln::local::channel
