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
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kiln/local/local.h"
#include "kiln/plugin/channel_layout.h"
#include "kiln/plugin/json_value.h"
#include "local/internal/fs.h"
#include "local/internal/fuse_view.h"
#include "local/internal/layout.h"
#include "local/internal/pipe_stream.h"
#include "local/internal/task_runner.h"
#include "local/view_registry.h"

namespace kiln::local {
namespace {

using internal::FifoWriter;
using internal::StopSignal;
using ::kiln::PathForMessage;

struct Alive {};

struct CopyItem {
  std::string uri;
  std::string dest;        // file path
  std::string data_root;   // the instance's input/data, which must still exist
  bool listed = true;      // seen in a listing; false: only named by a manifest
};

// One attribute of an augmented manifest line, as streamed.
struct ManifestPart {
  std::string attribute;
  bool ref = false;   // true: `value` is an object URI whose bytes are streamed
  std::string value;  // else the bytes themselves
};

// What a channel delivers, in order: objects (S3Prefix, ManifestFile), or the
// lines of an augmented manifest (then `uri` is the manifest's, `line` the
// line's number from 1, and `parts` what it streams).
struct Source {
  std::string uri;
  std::string rel;     // path below the channel directory (objects only)
  int64_t size = -1;   // the listing's (S3Prefix), else unknown
  int64_t line = 0;    // > 0: an augmented manifest line
  std::vector<ManifestPart> parts;
};

constexpr std::string_view kAugmentedManifest = "AugmentedManifestFile";

// Input as the messages show it, escaped and cut so that none can break a
// message's line or make it long: URIs and keys (of the request, of a listing,
// of a manifest) and paths made of them as PathForMessage; channel names,
// input modes, S3DataTypes, a manifest's values and AttributeNames as Shown.
// (The engine's validation allows channel names of [A-Za-z0-9.-_] only, and
// enumeration values, but a DataChannel can be used without the engine.)
std::string Shown(std::string_view text) { return kiln::TextForMessage(text); }

// A manifest (ManifestFile, AugmentedManifestFile) read whole, of at most
// kMaxManifestBytes: one ranged read a byte past the limit, so that an
// object of any size, or a file that never ends, costs no more than that.
absl::StatusOr<std::string> ReadManifest(ObjectStore& store, const std::string& uri) {
  absl::StatusOr<std::string> text = store.ReadRange(uri, 0, kMaxManifestBytes + 1);
  if (text.ok() && static_cast<int64_t>(text->size()) > kMaxManifestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a manifest may hold at most ",
                                                   kMaxManifestBytes >> 20, " MiB"));
  }
  return text;
}

// The FastFile FUSE views of one job's deliveries. EndJob marks it ended and
// takes the views; a mount finishing after that unmounts at once.
struct JobViews {
  absl::Mutex mu;
  bool ended ABSL_GUARDED_BY(mu) = false;
  std::vector<std::unique_ptr<internal::FuseView>> views ABSL_GUARDED_BY(mu);
};

// Unmounts the views and removes their (then empty) mount points. (A mount
// point that cannot be removed holds this process's pid in its name: the
// first channel made after the process has ended removes it, CleanStaleViews.)
void UnmountViews(std::vector<std::unique_ptr<internal::FuseView>> views) {
  for (auto& v : views) {
    v->Unmount();
    rmdir(v->mount_point().c_str());
  }
}

// Whether the directory `dir` (ending in '/') holds, at any depth, a regular
// file (or a link to one) whose name starts with `name_prefix` at the top
// level; stops at the first one. Linked directories are not entered (as the
// file store's List does not).
bool AnyObjectBelow(const std::string& dir, std::string_view name_prefix) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (!found) {
    struct dirent* e = readdir(d);
    if (e == nullptr) break;
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || !absl::StartsWith(internal::Av(name), internal::Av(name_prefix)) ||
        absl::StartsWith(internal::Av(name), ".kiln-tmp-")) {
      continue;
    }
    const std::string full = absl::StrCat(dir, internal::Av(name));
    struct stat st;
    if (lstat(full.c_str(), &st) != 0) continue;
    if (S_ISREG(st.st_mode)) {
      found = true;
    } else if (S_ISLNK(st.st_mode)) {
      found = stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    } else if (S_ISDIR(st.st_mode)) {
      found = AnyObjectBelow(full + "/", "");
    }
  }
  closedir(d);
  return found;
}

// Whether a file:// prefix (a local path, prefix semantics) has any object.
bool AnyObjectUnder(const std::string& path) {
  const size_t slash = path.rfind('/');
  return AnyObjectBelow(path.substr(0, slash + 1), std::string_view(path).substr(slash + 1));
}

// `status` with its message prefixed by the channel's name (an error
// reaches the job's FailureReason, where the channel is what a user looks
// for); its code is kept.
absl::Status InChannel(std::string_view channel, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("channel '", Shown(channel), "': ", status.message()));
}

std::string NoObjectsMessage(std::string_view channel, std::string_view uri) {
  return absl::StrCat("No S3 objects found under S3 URL \"", PathForMessage(uri),
                      "\" given in input data source (channel '", Shown(channel),
                      "'). Please ensure that objects exist under that prefix.");
}

// A channel of the job whose place in /opt/ml/input/data is the delivered
// channel's on an instance that receives both (a File channel "a_1" and the
// FIFO of Pipe channel "a" for epoch 1): InvalidArgument naming both, else
// OK. The engine's validation refuses such a request at CreateTrainingJob,
// by the same rule (ChannelLayoutCollisions); this is for a DataChannel used
// without the engine. Checked before anything is made, so that the collision
// fails as the channels are set up, not when the epoch comes (a FastFile
// link would then be replaced by the FIFO; a File directory would fail that
// epoch's FIFO).
absl::Status CheckLayoutCollisions(const ChannelDelivery& delivery) {
  const v1::CreateTrainingJobRequest& request = delivery.job.request;
  const std::string& name = delivery.channel.channel_name();
  for (const kiln::ChannelLayoutCollision& c :
       kiln::ChannelLayoutCollisions(request)) {
    if (request.input_data_config(c.directory).channel_name() == name ||
        request.input_data_config(c.pipe).channel_name() == name) {
      return absl::InvalidArgumentError(kiln::ChannelLayoutCollisionMessage(request, c));
    }
  }
  return absl::OkStatus();
}

// Why the relative key `rel` is not a path below a channel's directory, or ""
// when it is one (IsSafeRelativePath). File and FastFile make one file per
// object at its key, so a key the file system would read as another ("a//b"
// is "a/b", "a/./b" too) is refused rather than mapped: mapping would show
// the object under a name it does not have, and make two objects ("a//b" and
// "a/b") race for one file. Pipe mode keeps the same rule, which the
// conformance suite asks of every mode (a "../" key leaves its prefix).
std::string UnsafePathReason(std::string_view rel) {
  if (internal::IsSafeRelativePath(rel)) return "";
  if (rel.empty()) return "it is empty";
  if (rel.find('\0') != std::string_view::npos) return "it holds a NUL character";
  if (rel.front() == '/') return "it starts with '/'";
  if (rel.back() == '/') return "it ends in '/'";
  if (rel.find("//") != std::string_view::npos) return "it has an empty segment ('//')";
  return "it has a '.' or '..' segment";
}

// Two objects of one instance's share (File mode) where one's key is a
// folder of the other's, "a" and "a/b": S3 holds both, a directory cannot.
// InvalidArgument naming both, found before anything is copied, rather than a
// file-system error halfway through the copy (in whichever order the copy
// threads reach them).
absl::Status CheckNoKeyIsAFolder(std::string_view channel,
                                 const std::vector<const Source*>& share) {
  std::map<std::string_view, const Source*> by_key;
  for (const Source* s : share) by_key.emplace(s->rel, s);
  for (const auto& [key, source] : by_key) {
    const std::string folder = absl::StrCat(internal::Av(key), "/");
    auto below = by_key.lower_bound(folder);
    if (below == by_key.end() || below->first.substr(0, folder.size()) != folder) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(channel), "': objects '", PathForMessage(source->uri), "' and '",
        PathForMessage(below->second->uri), "' cannot both be copied: key '", PathForMessage(key),
        "' would be a file and the folder holding key '", PathForMessage(below->first), "'"));
  }
  return absl::OkStatus();
}

// Everything one Pipe channel's writers need, shared by them.
struct PipeSpec {
  std::string job_name;
  int32_t attempt = 1;
  std::string channel;
  std::vector<Source> sources;
  bool gzip = false;
  bool recordio = false;
  bool has_seed = false;
  int64_t seed = 0;
  bool sharded = false;
  std::vector<std::string> data_roots;
};

class LocalDataChannel final : public DataChannel {
 public:
  LocalDataChannel(EventLoop& loop, ObjectStores& stores, LocalDataChannelOptions options)
      : loop_(loop), stores_(stores), options_(std::move(options)) {
    if (options_.copy_threads < 1) options_.copy_threads = 1;
    // FUSE views a crashed process left behind (their server gone: any
    // access fails with "Transport endpoint is not connected").
    if (!options_.state_dir.empty()) {
      internal::CleanStaleViews(absl::StrCat(options_.state_dir, "/fastfile"));
    }
  }

  ~LocalDataChannel() override {
    alive_.reset();
    cancelled_->store(true);
    {
      absl::MutexLock lock(&mu_);
      for (auto& [job, stops] : running_) {
        for (auto& s : stops) s->Stop();
      }
      running_.clear();
    }
    tasks_.JoinAll();
    // No mount task is left: every view is in views_ now.
    std::map<std::string, std::shared_ptr<JobViews>> views;
    {
      absl::MutexLock lock(&mu_);
      views.swap(views_);
    }
    for (auto& [job, jv] : views) UnmountViews(TakeViews(*jv));
  }

  void Deliver(const ChannelDelivery& delivery, DoneCallback done) override;
  absl::Status CheckChannel(const v1::Channel& channel, std::string_view input_mode) override;
  void EndJob(std::string_view job_name) override {
    std::shared_ptr<JobViews> views;
    {
      absl::MutexLock lock(&mu_);
      auto it = running_.find(std::string(job_name));
      if (it != running_.end()) {
        for (auto& s : it->second) s->Stop();
        running_.erase(it);
      }
      auto v = views_.find(std::string(job_name));
      if (v != views_.end()) {
        views = std::move(v->second);
        views_.erase(v);
      }
    }
    if (views == nullptr) return;
    // Unmounting waits for reads in progress: not on the loop thread.
    std::vector<std::unique_ptr<internal::FuseView>> taken = TakeViews(*views);
    if (taken.empty()) return;
    tasks_.Run([taken = std::make_shared<decltype(taken)>(std::move(taken))]() mutable {
      UnmountViews(std::move(*taken));
    });
  }
  void SetListener(DataChannelListener* listener) override { listener_ = listener; }

 private:
  // The store serving `uri`; an error names the channel.
  absl::StatusOr<ObjectStore*> StoreFor(std::string_view channel, std::string_view uri) const {
    absl::StatusOr<ObjectStore*> store = stores_.For(uri);
    if (!store.ok()) return InChannel(channel, store.status());
    return store;
  }
  // The local path of `uri` when its store keeps it in a local file (the
  // file store's LocalPath: links of its existing part resolved, a confined
  // store's roots checked), "" when the store keeps no local files; any
  // other error names the channel.
  absl::StatusOr<std::string> LocalPathOf(std::string_view channel, std::string_view uri) const {
    absl::StatusOr<ObjectStore*> store = StoreFor(channel, uri);
    if (!store.ok()) return store.status();
    absl::StatusOr<std::string> path = (*store)->LocalPath(uri);
    if (absl::IsUnimplemented(path.status())) return std::string();
    if (!path.ok()) return InChannel(channel, path.status());
    return path;
  }
  absl::StatusOr<std::vector<Source>> ListSources(const v1::Channel& channel);
  // For a manifest whose prefix is kept in local files: every object it
  // names lies, its links resolved, inside the prefix's folder (as a
  // listing's must, ObjectStore::List); else PermissionDenied naming the
  // object and the folder.
  absl::Status CheckKeysStayInFolder(std::string_view channel, std::string_view prefix,
                                     const std::vector<Source>& sources) const;
  // The lines of an AugmentedManifestFile channel, in the manifest's order,
  // each with the attributes it streams. Errors name the channel, the line
  // and the attribute.
  absl::StatusOr<std::vector<Source>> ListAugmentedManifest(const v1::Channel& channel,
                                                            ObjectStore& store);
  absl::Status Copy(const v1::Channel& channel, const std::vector<std::string>& data_roots,
                    const std::atomic<bool>& cancelled);
  // FastFile: shows the source read-only in the channel directory of each
  // instance of `instance_dirs`, published in the view registry.
  absl::Status MakeViews(const v1::Channel& channel,
                         const std::vector<std::string>& instance_dirs,
                         const std::shared_ptr<JobViews>& job_views);
  // FastFile for a source that is not local: a FUSE view of the listing.
  absl::Status MountView(const v1::Channel& channel,
                         const std::vector<std::string>& instance_dirs,
                         const std::shared_ptr<JobViews>& job_views);
  // Publishes `folder` as the channel directory of each instance.
  absl::Status PublishViews(std::string_view channel,
                            const std::vector<std::string>& instance_dirs,
                            const std::string& folder) const;
  // Marks the job's views ended and returns them (for unmounting).
  static std::vector<std::unique_ptr<internal::FuseView>> TakeViews(JobViews& jv) {
    absl::MutexLock lock(&jv.mu);
    jv.ended = true;
    return std::move(jv.views);
  }
  absl::Status StartPipes(const v1::Channel& channel, std::shared_ptr<PipeSpec> spec,
                          std::shared_ptr<StopSignal> stop);
  void RunPipe(std::shared_ptr<const PipeSpec> spec, size_t instance,
               std::shared_ptr<StopSignal> stop);
  // Streams one object into the FIFO. Errors name neither channel nor object.
  absl::StatusOr<FifoWriter::Result> StreamObject(FifoWriter& writer, const PipeSpec& spec,
                                                  const std::string& uri);
  // Streams one augmented manifest line: its attributes in AttributeNames
  // order, each one RecordIO record when the channel wraps. Errors name the
  // attribute (and the object of a -ref).
  absl::StatusOr<FifoWriter::Result> StreamLine(FifoWriter& writer, const PipeSpec& spec,
                                                const Source& line);
  void ReportFailure(const PipeSpec& spec, absl::Status status);

  // Runs `work` on a task thread and posts its status to `done`.
  void RunTask(DoneCallback done, absl::AnyInvocable<absl::Status()> work);

  EventLoop& loop_;
  ObjectStores& stores_;
  LocalDataChannelOptions options_;
  DataChannelListener* listener_ = nullptr;  // loop thread only
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  absl::Mutex mu_;
  // Stop signals of the writers of each job's Pipe channels.
  std::map<std::string, std::vector<std::shared_ptr<StopSignal>>> running_ ABSL_GUARDED_BY(mu_);
  // FastFile FUSE views of each job.
  std::map<std::string, std::shared_ptr<JobViews>> views_ ABSL_GUARDED_BY(mu_);
  // Where FastFile views are published for the runtime (view_registry.h).
  internal::ViewRegistry views_registry_;
  internal::TaskRunner tasks_;  // last: joined first
};

void LocalDataChannel::RunTask(DoneCallback done, absl::AnyInvocable<absl::Status()> work) {
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, guard, done = std::move(done), work = std::move(work),
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
    absl::Status status = work();
    loop_.Post([alive, done = std::move(done), status]() mutable {
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
    RunTask(std::move(done), [this, channel, data_roots = std::move(data_roots),
                              cancelled = cancelled_] { return Copy(channel, data_roots, *cancelled); });
  } else if (mode == "FastFile") {
    std::shared_ptr<JobViews> job_views;
    {
      absl::MutexLock lock(&mu_);
      std::shared_ptr<JobViews>& slot = views_[std::string(delivery.job.job_name)];
      if (slot == nullptr) slot = std::make_shared<JobViews>();
      job_views = slot;
    }
    RunTask(std::move(done), [this, channel, instance_dirs = std::move(instance_dirs),
                              job_views = std::move(job_views)] {
      return MakeViews(channel, instance_dirs, job_views);
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

// ---------------------------------------------------------------------------
// File

absl::Status LocalDataChannel::Copy(const v1::Channel& channel,
                                    const std::vector<std::string>& data_roots,
                                    const std::atomic<bool>& cancelled) {
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
                                         channel.shuffle_config().seed(), 0, sharded, i,
                                         data_roots.size())) {
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

// ---------------------------------------------------------------------------
// FastFile

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
                                         const std::shared_ptr<JobViews>& job_views) {
  const std::string& name = channel.channel_name();
  const auto& s3 = channel.data_source().s3_data_source();
  const std::string& uri = s3.s3_uri();
  if (s3.s3_data_type() != "S3Prefix") {
    return absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name), "': FastFile input mode supports only S3DataType S3Prefix"));
  }
  if (s3.s3_data_distribution_type() == "ShardedByS3Key" && instance_dirs.size() > 1) {
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

// ---------------------------------------------------------------------------
// Pipe

std::string FifoPath(const std::string& root, const std::string& channel, uint64_t epoch) {
  return absl::StrCat(root, "/", channel, "_", epoch);
}

absl::Status MakeFifo(const std::string& path) {
  if (mkfifo(path.c_str(), 0644) == 0) return absl::OkStatus();
  if (errno == EEXIST) {
    unlink(path.c_str());
    if (mkfifo(path.c_str(), 0644) == 0) return absl::OkStatus();
  }
  return internal::ErrnoStatus(errno, "mkfifo", path);
}

absl::Status LocalDataChannel::StartPipes(const v1::Channel& channel, std::shared_ptr<PipeSpec> spec,
                                          std::shared_ptr<StopSignal> stop) {
  absl::StatusOr<std::vector<Source>> sources = ListSources(channel);
  if (!sources.ok()) return sources.status();
  spec->sources = *std::move(sources);
  for (const std::string& root : spec->data_roots) {
    if (!internal::IsDirectory(root)) {
      return absl::AbortedError(absl::StrCat("channel '", Shown(spec->channel),
                                             "': instance directory ", PathForMessage(root),
                                             " is gone (released?)"));
    }
    absl::Status s = MakeFifo(FifoPath(root, spec->channel, 0));
    if (!s.ok()) return InChannel(spec->channel, s);
  }
  if (stop->stopped()) {
    return absl::CancelledError(absl::StrCat("channel '", Shown(spec->channel), "': job ended"));
  }
  std::shared_ptr<const PipeSpec> shared = std::move(spec);
  for (size_t i = 0; i < shared->data_roots.size(); ++i) {
    tasks_.Run([this, shared, i, stop] { RunPipe(shared, i, stop); });
  }
  return absl::OkStatus();
}

void LocalDataChannel::ReportFailure(const PipeSpec& spec, absl::Status status) {
  loop_.Post([this, alive = std::weak_ptr<Alive>(alive_), job = spec.job_name,
              attempt = spec.attempt, status = std::move(status)]() mutable {
    if (alive.lock() && listener_ != nullptr) listener_->OnChannelFailed(job, attempt, status);
  });
}

absl::StatusOr<FifoWriter::Result> LocalDataChannel::StreamObject(FifoWriter& writer,
                                                                  const PipeSpec& spec,
                                                                  const std::string& uri) {
  if (!spec.gzip && !spec.recordio) {
    absl::StatusOr<ObjectStore*> store = stores_.For(uri);
    if (!store.ok()) return store.status();
    absl::StatusOr<std::string> local = (*store)->LocalPath(uri);
    if (!local.ok() && !absl::IsUnimplemented(local.status())) return local.status();
    const std::string path = local.value_or("");
    if (!path.empty()) {
      // file://: the page cache's pages straight into the pipe.
      // O_NONBLOCK: a FIFO put in the object's place must not block the
      // open (and the job's end with it); it is refused below. O_NOFOLLOW:
      // the store resolved the path; a link put in its place meanwhile is
      // not followed.
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
      // (The path is a manifest's or a listing's: shown escaped, which
      // ErrnoStatus does itself.)
      if (fd < 0) return internal::ErrnoStatus(errno, "open", path);
      struct stat st;
      absl::StatusOr<FifoWriter::Result> r;
      if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        r = absl::NotFoundError(absl::StrCat("'", PathForMessage(path), "' is not a regular file"));
      } else {
        r = writer.SpliceFrom(fd, path);
      }
      close(fd);
      return r;
    }
  }
  absl::StatusOr<ObjectStore*> store = stores_.For(uri);
  if (!store.ok()) return store.status();
  FifoWriter::Result stopped_with = FifoWriter::Result::kOk;
  absl::Status write_error;
  std::string record;
  // Where decompressed bytes go: the record being built, or the FIFO.
  auto emit = [&](std::string_view data) -> absl::Status {
    if (spec.recordio) {
      if (record.size() + data.size() >= (size_t{1} << 29)) {
        return absl::InvalidArgumentError(
            "a RecordIO record holds less than 2^29 bytes; this object has more");
      }
      record.append(data.data(), data.size());
      return absl::OkStatus();
    }
    absl::StatusOr<FifoWriter::Result> r = writer.Write(data);
    if (!r.ok()) {
      write_error = r.status();
      return absl::CancelledError("write");
    }
    if (*r != FifoWriter::Result::kOk) {
      stopped_with = *r;
      return absl::CancelledError("write");
    }
    return absl::OkStatus();
  };
  internal::Inflater inflater;
  absl::Status s = (*store)->Read(uri, [&](std::string_view chunk) -> absl::Status {
    return spec.gzip ? inflater.Feed(chunk, emit) : emit(chunk);
  });
  if (!write_error.ok()) return write_error;
  if (stopped_with != FifoWriter::Result::kOk) return stopped_with;
  if (!s.ok()) return s;
  if (spec.gzip) {
    s = inflater.Finish();
    if (!s.ok()) return s;
  }
  if (spec.recordio) {
    std::string framed;
    s = internal::AppendRecordIO(record, &framed);
    if (!s.ok()) return s;
    record.clear();
    return writer.Write(framed);
  }
  return FifoWriter::Result::kOk;
}

absl::StatusOr<FifoWriter::Result> LocalDataChannel::StreamLine(FifoWriter& writer,
                                                                const PipeSpec& spec,
                                                                const Source& line) {
  using R = FifoWriter::Result;
  std::string framed;
  for (const ManifestPart& part : line.parts) {
    absl::StatusOr<R> r;
    if (part.ref) {
      r = StreamObject(writer, spec, part.value);
      if (!r.ok()) {
        const absl::Status& e = r.status();
        return absl::Status(e.code(), absl::StrCat("attribute '", Shown(part.attribute),
                                                   "': object '", PathForMessage(part.value), "'",
                                                   absl::IsNotFound(e) ? " does not exist" : "",
                                                   ": ", e.message()));
      }
    } else if (spec.recordio) {
      framed.clear();
      absl::Status s = internal::AppendRecordIO(part.value, &framed);
      if (!s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("attribute '", Shown(part.attribute), "': ",
                                         s.message()));
      }
      r = writer.Write(framed);
    } else {
      r = writer.Write(part.value);
    }
    if (!r.ok() || *r != R::kOk) return r;
  }
  return R::kOk;
}

void LocalDataChannel::RunPipe(std::shared_ptr<const PipeSpec> spec, size_t instance,
                               std::shared_ptr<StopSignal> stop) {
  const PipeSpec& s = *spec;
  const std::string& root = s.data_roots[instance];
  struct stat root_st;
  if (stat(root.c_str(), &root_st) != 0) return;
  // Whether `root` is still the directory this delivery made its FIFOs in (a
  // reset tree is a new directory: a late writer must not touch it).
  auto same_root = [&] {
    struct stat now;
    return stat(root.c_str(), &now) == 0 && now.st_ino == root_st.st_ino &&
           now.st_dev == root_st.st_dev;
  };
  // (Best effort: a FIFO left is an ended epoch's, or a stopped or failed
  // stream's, in the instance's tree, which the next run makes fresh.)
  auto remove_fifo = [&](const std::string& path) {
    if (same_root()) unlink(path.c_str());
  };
  FifoWriter writer(*stop);
  using R = FifoWriter::Result;
  for (uint64_t epoch = 0;; ++epoch) {
    const std::string fifo = FifoPath(root, s.channel, epoch);
    absl::StatusOr<R> r = writer.Open(fifo);
    if (!r.ok()) {
      ReportFailure(s, InChannel(s.channel, r.status()));
      remove_fifo(fifo);
      return;
    }
    if (*r != R::kOk) {  // stopped, or the tree is gone
      remove_fifo(fifo);
      return;
    }
    bool read_to_end = true;
    for (size_t j : internal::EpochOrder(s.sources.size(), s.has_seed, s.seed, epoch, s.sharded,
                                         instance, s.data_roots.size())) {
      const Source& source = s.sources[j];
      r = source.line > 0 ? StreamLine(writer, s, source) : StreamObject(writer, s, source.uri);
      if (!r.ok()) {
        const absl::Status& e = r.status();
        ReportFailure(
            s,
            absl::Status(e.code(),
                         source.line > 0
                             ? absl::StrCat("channel '", Shown(s.channel), "': augmented manifest ",
                                            PathForMessage(source.uri), " line ", source.line,
                                            " (epoch ", epoch, "): ", e.message())
                             : absl::StrCat("channel '", Shown(s.channel), "': object '",
                                            PathForMessage(source.uri), "'",
                                            !absl::IsNotFound(e) ? ""
                                            : source.size >= 0   ? " disappeared during the stream"
                                                                 : " named by the manifest",
                                            " (epoch ", epoch, "): ", e.message())));
        writer.Close();
        remove_fifo(fifo);
        return;
      }
      if (*r == R::kStopped) {
        writer.Close();
        remove_fifo(fifo);
        return;
      }
      if (*r == R::kReaderClosed) {
        read_to_end = false;
        break;
      }
    }
    if (read_to_end) {
      r = writer.WaitDrained();
      if (!r.ok() || *r == R::kStopped) {
        writer.Close();
        remove_fifo(fifo);
        return;
      }
    }
    // The reader has it all (or closed early): the next epoch's FIFO first,
    // so a reader at end of file finds it, then end of file on this one.
    if (stop->stopped() || !same_root()) {
      writer.Close();
      remove_fifo(fifo);
      return;
    }
    absl::Status made = MakeFifo(FifoPath(root, s.channel, epoch + 1));
    writer.Close();
    remove_fifo(fifo);
    if (!made.ok()) {
      if (same_root() && !stop->stopped()) {
        ReportFailure(s, InChannel(s.channel, made));
      }
      return;
    }
  }
}

}  // namespace

std::unique_ptr<DataChannel> NewLocalDataChannel(EventLoop& loop, ObjectStores& stores,
                                                 LocalDataChannelOptions options) {
  if (!options.state_dir.empty()) {
    char real[PATH_MAX];
    if (realpath(options.state_dir.c_str(), real) != nullptr) options.state_dir = real;
  }
  return std::make_unique<LocalDataChannel>(loop, stores, std::move(options));
}

}  // namespace kiln::local
