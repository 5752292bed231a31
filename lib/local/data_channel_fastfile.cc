// FastFile mode: read-only views of the source, published in the view
// registry (local_data_channel.h, view_registry.h).
#include "local/local_data_channel.h"

namespace kiln::local::channel {

absl::Status LocalDataChannel::PublishViews(std::string_view channel,
                                            const std::vector<std::string>& instance_dirs,
                                            const std::string& folder) const {
  for (const std::string& dir : instance_dirs) {
    const std::string root = absl::StrCat(internal::MlDir(dir), "/input/data");
    if (!internal::IsDirectory(root)) {
      return absl::AbortedError(absl::StrCat("channel '", Shown(channel), "': instance directory ",
                                             PathForMessage(root), " is gone (released?)"));
    }
    absl::Status s = views_registry_.Publish(dir, channel, folder);
    if (!s.ok()) return InChannel(channel, s);
  }
  return absl::OkStatus();
}

absl::Status LocalDataChannel::MakeViews(const v1::Channel& channel,
                                         const std::vector<std::string>& instance_dirs,
                                         size_t shard_count,
                                         const std::shared_ptr<JobViews>& job_views) {
  const std::string& name = channel.channel_name();
  const auto& s3 = channel.data_source().s3_data_source();
  const std::string& uri = s3.s3_uri();
  if (s3.s3_data_type() != "S3Prefix") {
    return absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name), "': FastFile input mode supports only S3DataType S3Prefix"));
  }
  if (s3.s3_data_distribution_type() == "ShardedByS3Key" && shard_count > 1) {
    return absl::UnimplementedError(absl::StrCat(
        "channel '", Shown(name),
        "': the local backend's FastFile view shows the whole folder to every instance; use File "
        "or Pipe mode for ShardedByS3Key"));
  }
  absl::StatusOr<std::string> local = LocalPathOf(name, uri);
  if (!local.ok()) return local.status();
  std::string path = *local;
  if (path.empty()) return MountView(channel, instance_dirs, job_views);
  const std::string prefix_path = path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  char real[PATH_MAX];
  struct stat st;
  if (realpath(path.c_str(), real) == nullptr || stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (!AnyObjectUnder(prefix_path)) return absl::NotFoundError(NoObjectsMessage(name, uri));
    return absl::InvalidArgumentError(
        absl::StrCat("channel '", Shown(name), "': FastFile needs S3Uri to name a folder ('",
                     PathForMessage(uri), "' is not a directory); a trailing '/' is recommended"));
  }
  if (!AnyObjectBelow(absl::StrCat(real, "/"), "")) {
    return absl::NotFoundError(NoObjectsMessage(name, uri));
  }
  return PublishViews(name, instance_dirs, real);
}

absl::Status LocalDataChannel::MountView(const v1::Channel& channel,
                                         const std::vector<std::string>& instance_dirs,
                                         const std::shared_ptr<JobViews>& job_views) {
  const std::string& name = channel.channel_name();
  const std::string& uri = channel.data_source().s3_data_source().s3_uri();
  // The listing only: no object byte is read here.
  absl::StatusOr<std::vector<Source>> sources = ListSources(channel);
  if (!sources.ok()) return sources.status();
  absl::StatusOr<ObjectStore*> store = stores_.For(uri);
  if (!store.ok()) return store.status();
  std::vector<internal::FuseViewFile> files;
  files.reserve(sources->size());
  for (Source& s : *sources) files.push_back({std::move(s.rel), std::move(s.uri), s.size});
  // A mount point of its own, made here: mkdir fails on a name already
  // taken, by a crashed process of the same PID (a container's host process
  // often has the same PID from one start to the next) or by a process of
  // another PID namespace sharing the state directory, whose live view a
  // mount on the same point would hide.
  static std::atomic<uint64_t> next_view{0};
  const std::string views_dir = absl::StrCat(options_.state_dir, "/fastfile");
  absl::Status s = MakeDirs(views_dir);
  if (!s.ok()) return InChannel(name, s);
  std::string mount_point;
  for (int tries = 1;; ++tries) {
    mount_point = absl::StrCat(views_dir, "/", getpid(), "-", ++next_view, "-", name);
    if (mkdir(mount_point.c_str(), 0755) == 0) break;
    if (errno != EEXIST || tries == 1000) {
      return InChannel(name, internal::ErrnoStatus(errno, "mkdir", mount_point));
    }
  }
  absl::StatusOr<std::unique_ptr<internal::FuseView>> view =
      internal::FuseView::Mount(**store, mount_point, std::move(files));
  if (!view.ok()) {
    rmdir(mount_point.c_str());
    return InChannel(name, view.status());
  }
  {
    absl::MutexLock lock(&job_views->mu);
    if (!job_views->ended) {
      job_views->views.push_back(*std::move(view));
    }
  }
  if (*view != nullptr) {  // the job ended meanwhile
    std::vector<std::unique_ptr<internal::FuseView>> late;
    late.push_back(*std::move(view));
    UnmountViews(std::move(late));
    return absl::CancelledError(absl::StrCat("channel '", Shown(name), "': job ended"));
  }
  return PublishViews(name, instance_dirs, mount_point);
}

}  // namespace kiln::local::channel
