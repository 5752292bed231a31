// LocalDataChannel: input channels from an ObjectStores source delivered into
// the instances' /opt/ml/input/data (see kiln/local/local.h), in the three
// input modes.
//
// - File: the task lists the source, checks every key, and copies with a few
//   threads (GetToFile: copy_file_range for file:// sources), then posts the
//   outcome.
// - FastFile: for file:// sources the channel directory becomes a symbolic
//   link to the source folder, made in O(1) whatever the dataset's size; the
//   bytes are read from the source when the container reads them. The link
//   alone would be writable: the channel publishes it in the view registry
//   (view_registry.h), and the runtime makes the published views read-only
//   (container_runtime.h). Under bwrap the link is replaced, inside the
//   sandbox, by a read-only bind mount of the folder. Under the process
//   runtime the container is spawned into a mount namespace of its own
//   (CLONE_NEWNS as root, else a user namespace mapping only Kiln's own ids,
//   where the kernel allows unprivileged ones) in which the link's target is
//   bind-mounted on itself read-only: writes through the link, or through the
//   folder's own path, fail with EROFS for that container only. The
//   namespace and binds are paid only by jobs with FastFile channels
//   (bench/spawn_bench measures them against a plain spawn). Where neither namespace can be made, the process runtime keeps
//   the bare link (documented in kiln/local/local.h). A per-file link tree
//   would cost O(files) at start, and a FUSE view of a local folder a daemon
//   per channel and a copy through user space per read. Other schemes
//   (s3://) have no folder to show: the task lists the prefix once and
//   mounts a FUSE view of the listing (internal/fuse_view.h) under
//   <state_dir>/fastfile, whose reads fetch ranges on demand; the channel directory links to it, exactly
//   as to a file:// folder, so both runtimes make it read-only the same way
//   (the view refuses writes itself too). One view serves every instance of
//   the delivery (they share this host). EndJob takes the job's views and
//   unmounts them on a task thread (a read in flight may wait on the
//   network); the destructor unmounts what is left. A process that crashed
//   leaves dead mounts there: the constructor detaches and removes those of
//   processes that are gone (CleanStaleViews).
// - Pipe: Deliver lists the source and makes every instance's FIFO
//   <channel>_0, then reports the channel ready; one writer thread per
//   instance then streams epoch after epoch (pipe_stream.h): objects in the
//   epoch's order, spliced from file:// sources when no transform applies,
//   else read through the ObjectStore, gunzipped, RecordIO-framed. When the
//   reader has read the epoch to the end (or closed it early) the next FIFO
//   appears and the old one is removed. EndJob (or the channel's
//   destruction) stops the writers at once, wherever they wait. An
//   AugmentedManifestFile channel streams lines instead of objects: Deliver
//   reads and checks the whole JSON Lines manifest (every line an object
//   holding every AttributeNames attribute), and each line streams its
//   attributes in that order, a "-ref" attribute as the bytes of the object
//   it names, any other as its value, one RecordIO record each when the
//   channel wraps; lines are what ShuffleConfig and ShardedByS3Key order and
//   split.
//
// Local files (file://) are used in place only where the store serving the
// URI hands out a path (ObjectStore::LocalPath), after its own checks: a
// confined file store's roots hold for the FastFile link, the Pipe splice
// and CheckChannel's look into the folder as for its reads. Every mode lists
// a prefix through the store, whose listing refuses a symbolic link leading
// out of the source folder; a manifest's keys are held to the same rule
// (CheckKeysStayInFolder). A FastFile folder is shown as it is: a link added
// to it later is resolved by the container, in its own view of the files.
//
// Deliver runs on the loop thread and only starts tasks; every completion is
// posted back (unless the channel object is gone by then).
#include "local/local_data_channel.h"

namespace kiln::local::channel {

void LocalDataChannel::RunTask(DoneCallback done, absl::AnyInvocable<absl::Status()> work) {
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, guard, done = std::move(done), work = std::move(work),
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
    absl::Status status = work();
    // (Moved: this thread keeps no reference to the status's shared message.)
    loop_.Post([alive, done = std::move(done), status = std::move(status)]() mutable {
      if (alive.lock()) done(status);
    });
    guard->Reset();
  });
}

void LocalDataChannel::Deliver(const ChannelDelivery& delivery, DoneCallback done) {
  const v1::Channel& channel = delivery.channel;
  const std::string name = channel.channel_name();
  const std::string mode(delivery.input_mode);
  absl::Status error;
  if (mode != "File" && mode != "FastFile" && mode != "Pipe") {
    error = absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name), "': input mode '", Shown(mode),
        "' is not File, FastFile or Pipe"));
  } else if (!channel.data_source().has_s3_data_source()) {
    error = absl::UnimplementedError(absl::StrCat(
        "channel '", Shown(name), "': the local backend reads only S3DataSource channels"));
  } else if (name.find('/') != std::string::npos || !internal::IsSafeRelativePath(name)) {
    error = absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name), "': the name would land outside /opt/ml/input/data"));
  } else {
    error = CheckLayoutCollisions(delivery);
  }
  absl::StatusOr<Shards> shards = ShardsOf(delivery);
  if (error.ok() && !shards.ok()) error = shards.status();
  std::vector<std::string> instance_dirs;
  std::vector<std::string> data_roots;
  for (const Instance* instance : delivery.instances) {
    if (!error.ok()) break;
    absl::StatusOr<std::string> dir = internal::InstanceDirOf(options_.state_dir, instance->id);
    if (!dir.ok()) {
      error = dir.status();
      break;
    }
    data_roots.push_back(absl::StrCat(internal::MlDir(*dir), "/input/data"));
    instance_dirs.push_back(*std::move(dir));
  }
  if (!error.ok()) {
    loop_.Post([alive = std::weak_ptr<Alive>(alive_), done = std::move(done), error]() mutable {
      if (alive.lock()) done(error);
    });
    return;
  }
  if (mode == "File") {
    RunTask(std::move(done),
            [this, channel, data_roots = std::move(data_roots), shards = *std::move(shards),
             cancelled = cancelled_] { return Copy(channel, data_roots, shards, *cancelled); });
  } else if (mode == "FastFile") {
    std::shared_ptr<JobViews> job_views;
    {
      absl::MutexLock lock(&mu_);
      std::shared_ptr<JobViews>& slot = views_[std::string(delivery.job.job_name)];
      if (slot == nullptr) slot = std::make_shared<JobViews>();
      job_views = slot;
    }
    RunTask(std::move(done), [this, channel, instance_dirs = std::move(instance_dirs),
                              count = shards->count, job_views = std::move(job_views)] {
      return MakeViews(channel, instance_dirs, count, job_views);
    });
  } else {
    auto spec = std::make_shared<PipeSpec>();
    spec->job_name = std::string(delivery.job.job_name);
    spec->attempt = delivery.job.attempt;
    spec->channel = name;
    spec->gzip = channel.compression_type() == "Gzip";
    spec->recordio = channel.record_wrapper_type() == "RecordIO";
    spec->has_seed = channel.has_shuffle_config();
    spec->seed = channel.shuffle_config().seed();
    spec->sharded =
        channel.data_source().s3_data_source().s3_data_distribution_type() == "ShardedByS3Key";
    spec->data_roots = std::move(data_roots);
    spec->shards = *std::move(shards);
    auto stop = std::make_shared<StopSignal>();
    {
      absl::MutexLock lock(&mu_);
      running_[spec->job_name].push_back(stop);
    }
    RunTask(std::move(done), [this, channel, spec = std::move(spec), stop = std::move(stop)] {
      return StartPipes(channel, spec, stop);
    });
  }
}

absl::Status LocalDataChannel::CheckChannel(const v1::Channel& channel,
                                            std::string_view input_mode) {
  if (!channel.data_source().has_s3_data_source()) return absl::OkStatus();
  const auto& s3 = channel.data_source().s3_data_source();
  const std::string& uri = s3.s3_uri();
  const std::string& name = channel.channel_name();
  const bool prefix = s3.s3_data_type() == "S3Prefix";
  if (prefix) {
    // A local directory: its first entries, not a walk of the tree.
    absl::StatusOr<std::string> local = LocalPathOf(name, uri);
    if (!local.ok()) return local.status();
    const std::string& path = *local;
    if (!path.empty()) {
      if (AnyObjectUnder(path)) return absl::OkStatus();
      return absl::InvalidArgumentError(NoObjectsMessage(name, uri));
    }
  }
  // Any other store: one bounded listing (for S3, one ListObjectsV2 with
  // max-keys 1). A manifest exists when it is the first object under its own
  // URI.
  absl::StatusOr<ObjectStore*> store = StoreFor(name, uri);
  if (!store.ok()) return store.status();
  absl::StatusOr<std::vector<ObjectInfo>> first = (*store)->ListFirst(uri, 1);
  if (!first.ok()) {
    return InChannel(name, absl::Status(first.status().code(),
                                        absl::StrCat("listing ", PathForMessage(uri), ": ",
                                                     first.status().message())));
  }
  if (prefix) {
    if (!first->empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(NoObjectsMessage(name, uri));
  }
  if (!first->empty() && first->front().uri == uri) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("channel '", Shown(name), "': the ",
                                                 Shown(s3.s3_data_type()), " '",
                                                 PathForMessage(uri), "' does not exist"));
}

absl::StatusOr<std::vector<Source>> LocalDataChannel::ListSources(const v1::Channel& channel) {
  const std::string& name = channel.channel_name();
  const auto& s3 = channel.data_source().s3_data_source();
  const std::string& uri = s3.s3_uri();
  absl::StatusOr<ObjectStore*> store = StoreFor(name, uri);
  if (!store.ok()) return store.status();
  std::vector<Source> sources;
  std::string manifest_prefix;  // a ManifestFile's
  if (s3.s3_data_type() == kAugmentedManifest) {
    return ListAugmentedManifest(channel, **store);
  }
  if (s3.s3_data_type() == "S3Prefix") {
    absl::StatusOr<std::vector<ObjectInfo>> objects = (*store)->List(uri);
    if (!objects.ok()) {
      return absl::Status(objects.status().code(),
                          absl::StrCat("channel '", Shown(name), "': listing ", PathForMessage(uri),
                                       ": ", objects.status().message()));
    }
    // Paths are relative to the prefix's directory: s3://b/data/tr lists
    // data/train/x.csv as train/x.csv.
    const size_t base = uri.rfind('/') + 1;
    for (const ObjectInfo& o : *objects) {
      if (o.uri.size() <= base || o.uri.back() == '/') continue;  // folder markers
      Source source;
      source.uri = o.uri;
      source.rel = o.uri.substr(base);
      source.size = o.size;
      sources.push_back(std::move(source));
    }
    if (sources.empty()) return absl::NotFoundError(NoObjectsMessage(name, uri));
  } else if (s3.s3_data_type() == "ManifestFile") {
    absl::StatusOr<std::string> text = ReadManifest(**store, uri);
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat("channel '", Shown(name), "': reading manifest ",
                                       PathForMessage(uri), ": ", text.status().message()));
    }
    absl::StatusOr<kiln::JsonValue> doc = kiln::ParseJsonValue(*text);
    const kiln::JsonValue* prefix = nullptr;
    if (doc.ok() && doc->is_array() && !doc->elements().empty()) {
      prefix = doc->elements()[0].Find("prefix");
    }
    if (prefix == nullptr || !prefix->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("channel '", Shown(name), "': manifest ", PathForMessage(uri),
                       " must be a JSON array whose first element is {\"prefix\": \"<uri>\"}",
                       doc.ok() ? "" : absl::StrCat(" (", doc.status().message(), ")")));
    }
    for (size_t i = 1; i < doc->elements().size(); ++i) {
      const kiln::JsonValue& key = doc->elements()[i];
      if (!key.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("channel '", Shown(name), "': manifest ",
                                                       PathForMessage(uri), ": element ", i,
                                                       " is not a string key"));
      }
      Source source;
      source.uri = absl::StrCat(prefix->string_value(), key.string_value());
      source.rel = key.string_value();
      sources.push_back(std::move(source));
    }
    if (sources.empty()) {
      return absl::NotFoundError(absl::StrCat("channel '", Shown(name), "': manifest ",
                                              PathForMessage(uri), " lists no object"));
    }
    manifest_prefix = prefix->string_value();
  } else {
    return absl::UnimplementedError(absl::StrCat("channel '", Shown(name), "': S3DataType ",
                                                 Shown(s3.s3_data_type()),
                                                 " is not supported by the local backend yet"));
  }
  for (const Source& s : sources) {
    const std::string reason = UnsafePathReason(s.rel);
    if (reason.empty()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name), "': object '", PathForMessage(s.uri), "' has the key '",
        PathForMessage(s.rel), "', which is not a path below /opt/ml/input/data/", Shown(name),
        ": ", reason,
        " (a key must be a relative path of segments that are not empty, '.' or '..')"));
  }
  if (!manifest_prefix.empty()) {
    absl::Status s = CheckKeysStayInFolder(name, manifest_prefix, sources);
    if (!s.ok()) return s;
  }
  // A listing in key order; a manifest keeps its own order.
  if (s3.s3_data_type() == "S3Prefix") {
    std::sort(sources.begin(), sources.end(),
              [](const Source& a, const Source& b) { return a.uri < b.uri; });
  }
  return sources;
}

absl::Status LocalDataChannel::CheckKeysStayInFolder(std::string_view channel,
                                                     std::string_view prefix,
                                                     const std::vector<Source>& sources) const {
  const std::string_view folder_uri = prefix.substr(0, prefix.rfind('/') + 1);
  absl::StatusOr<std::string> folder = LocalPathOf(channel, folder_uri);
  if (!folder.ok() || folder->empty()) return folder.status();
  std::string root = *folder;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  for (const Source& s : sources) {
    absl::StatusOr<std::string> path = LocalPathOf(channel, s.uri);
    if (!path.ok()) return path.status();
    if (root == "/" || absl::StartsWith(internal::Av(*path), internal::Av(root + "/"))) continue;
    return absl::PermissionDeniedError(absl::StrCat(
        "channel '", Shown(channel), "': object '", PathForMessage(s.uri), "' leads to '",
        PathForMessage(*path), "', outside the manifest's prefix folder '", PathForMessage(root),
        "': symbolic links are not followed out of it"));
  }
  return absl::OkStatus();
}

// The JSON Lines manifest: each line one object; AttributeNames picks the
// attributes to stream, in that order (others are ignored). An attribute
// whose name ends in "-ref" holds the URI of an object whose bytes are
// streamed; any other streams its value: a string's characters, any other
// value its compact JSON text.
absl::StatusOr<std::vector<Source>> LocalDataChannel::ListAugmentedManifest(
    const v1::Channel& channel, ObjectStore& store) {
  const std::string& name = channel.channel_name();
  const auto& s3 = channel.data_source().s3_data_source();
  const std::string& uri = s3.s3_uri();
  if (s3.attribute_names_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name),
        "': S3DataType AugmentedManifestFile needs AttributeNames (the attributes of each line "
        "to stream, in order)"));
  }
  absl::StatusOr<std::string> text = ReadManifest(store, uri);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("channel '", Shown(name), "': reading augmented manifest ",
                                     PathForMessage(uri), ": ", text.status().message()));
  }
  std::vector<Source> lines;
  int64_t number = 0;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t end = text->find('\n', pos);
    if (end == std::string::npos) end = text->size();
    std::string_view line = std::string_view(*text).substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank
    auto where = [&] {
      return absl::StrCat("channel '", Shown(name), "': augmented manifest ", PathForMessage(uri),
                          " line ", number);
    };
    absl::StatusOr<kiln::JsonValue> doc = kiln::ParseJsonValue(line);
    if (!doc.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), " is not valid JSON (", doc.status().message(), ")"));
    }
    if (!doc->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), " must be a JSON object, not ",
          internal::Av(kiln::JsonKindName(doc->kind()))));
    }
    Source source;
    source.uri = uri;
    source.line = number;
    for (const std::string& attribute : s3.attribute_names()) {
      const kiln::JsonValue* value = doc->Find(attribute);
      if (value == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), " has no attribute '", Shown(attribute), "' (AttributeNames)"));
      }
      ManifestPart part;
      part.attribute = attribute;
      part.ref = absl::EndsWith(attribute, "-ref");
      if (part.ref) {
        if (!value->is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              where(), ": attribute '", Shown(attribute),
              "' must be a string holding an object URI, not ",
              internal::Av(kiln::JsonKindName(value->kind()))));
        }
        absl::StatusOr<ObjectStore*> ref_store = stores_.For(value->string_value());
        if (!ref_store.ok()) {
          return absl::Status(ref_store.status().code(),
                              absl::StrCat(where(), ": attribute '", Shown(attribute), "': ",
                                           ref_store.status().message()));
        }
        part.value = value->string_value();
      } else if (value->is_string()) {
        part.value = value->string_value();
      } else {
        part.value = kiln::WriteJson(*value);
      }
      source.parts.push_back(std::move(part));
    }
    lines.push_back(std::move(source));
  }
  if (lines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("channel '", Shown(name),
                                                   "': augmented manifest ", PathForMessage(uri),
                                                   " holds no JSON lines"));
  }
  return lines;
}

}  // namespace kiln::local::channel

namespace kiln::local {

std::unique_ptr<DataChannel> NewLocalDataChannel(EventLoop& loop, ObjectStores& stores,
                                                 LocalDataChannelOptions options) {
  if (!options.state_dir.empty()) {
    char real[PATH_MAX];
    if (realpath(options.state_dir.c_str(), real) != nullptr) options.state_dir = real;
  }
  return std::make_unique<channel::LocalDataChannel>(loop, stores, std::move(options));
}

}  // namespace kiln::local
