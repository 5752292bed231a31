// LocalDataChannel (kiln/local/local.h): the channel's class and the helpers
// its modes share. The modes live in rooms of their own:
// local_data_channel.cc (Deliver, CheckChannel, listing sources; its file
// comment says how each mode works), data_channel_file.cc (File),
// data_channel_fastfile.cc (FastFile), data_channel_pipe.cc (Pipe).
//
// Internal to kiln::local: never installed.
#ifndef KILN_LIB_LOCAL_LOCAL_DATA_CHANNEL_H_
#define KILN_LIB_LOCAL_LOCAL_DATA_CHANNEL_H_

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

namespace kiln::local::channel {


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
inline std::string Shown(std::string_view text) { return kiln::TextForMessage(text); }

// A manifest (ManifestFile, AugmentedManifestFile) read whole, of at most
// kMaxManifestBytes: one ranged read a byte past the limit, so that an
// object of any size, or a file that never ends, costs no more than that.
inline absl::StatusOr<std::string> ReadManifest(ObjectStore& store, const std::string& uri) {
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
inline void UnmountViews(std::vector<std::unique_ptr<internal::FuseView>> views) {
  for (auto& v : views) {
    v->Unmount();
    rmdir(v->mount_point().c_str());
  }
}

// Whether the directory `dir` (ending in '/') holds, at any depth, a regular
// file (or a link to one) whose name starts with `name_prefix` at the top
// level; stops at the first one. Linked directories are not entered (as the
// file store's List does not).
inline bool AnyObjectBelow(const std::string& dir, std::string_view name_prefix) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (!found) {
    struct dirent* e = readdir(d);
    if (e == nullptr) break;
    std::string_view name = e->d_name;
    if (name == "." || name == ".." ||
        !absl::StartsWith(internal::Av(name), internal::Av(name_prefix)) ||
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
inline bool AnyObjectUnder(const std::string& path) {
  const size_t slash = path.rfind('/');
  return AnyObjectBelow(path.substr(0, slash + 1), std::string_view(path).substr(slash + 1));
}

// `status` with its message prefixed by the channel's name (an error
// reaches the job's FailureReason, where the channel is what a user looks
// for); its code is kept.
inline absl::Status InChannel(std::string_view channel, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("channel '", Shown(channel), "': ", status.message()));
}

inline std::string NoObjectsMessage(std::string_view channel, std::string_view uri) {
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
inline absl::Status CheckLayoutCollisions(const ChannelDelivery& delivery) {
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

// Where the instances of one delivery stand among every instance of the
// cluster that receives the channel (ChannelDelivery::shard_count and
// shard_positions, with their defaults filled in).
struct Shards {
  size_t count = 0;               // the receivers in the whole cluster
  std::vector<size_t> positions;  // each delivered instance's, at its index
};

// The delivery's Shards, or InvalidArgument naming the channel, the field and
// the rule: a negative shard_count, or one below the number of instances;
// shard_positions of another size than instances; a position out of
// [0, count); a position given twice.
inline absl::StatusOr<Shards> ShardsOf(const ChannelDelivery& delivery) {
  const std::string& name = delivery.channel.channel_name();
  const size_t n = delivery.instances.size();
  Shards shards;
  if (delivery.shard_count < 0 ||
      (delivery.shard_count > 0 && static_cast<size_t>(delivery.shard_count) < n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "channel '", Shown(name), "': ChannelDelivery.shard_count ", delivery.shard_count,
        " must be 0 or at least the number of instances (", n, ")"));
  }
  shards.count = delivery.shard_count == 0 ? n : static_cast<size_t>(delivery.shard_count);
  if (delivery.shard_positions.empty()) {
    for (size_t i = 0; i < n; ++i) shards.positions.push_back(i);
    if (shards.count == n) return shards;
    return absl::InvalidArgumentError(
        absl::StrCat("channel '", Shown(name),
                     "': ChannelDelivery.shard_positions must name the position of "
                     "each of the ",
                     n, " instances when shard_count (", shards.count, ") is not their number"));
  }
  if (delivery.shard_positions.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel '", Shown(name), "': ChannelDelivery.shard_positions has ",
                     delivery.shard_positions.size(), " positions for ", n, " instances"));
  }
  std::vector<bool> taken(shards.count, false);
  for (int32_t p : delivery.shard_positions) {
    if (p < 0 || static_cast<size_t>(p) >= shards.count) {
      return absl::InvalidArgumentError(
          absl::StrCat("channel '", Shown(name), "': ChannelDelivery.shard_positions: position ", p,
                       " is not in [0, ", shards.count, ")"));
    }
    if (taken[static_cast<size_t>(p)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("channel '", Shown(name), "': ChannelDelivery.shard_positions: position ", p,
                       " is given twice"));
    }
    taken[static_cast<size_t>(p)] = true;
    shards.positions.push_back(static_cast<size_t>(p));
  }
  return shards;
}

// Why the relative key `rel` is not a path below a channel's directory, or ""
// when it is one (IsSafeRelativePath). File and FastFile make one file per
// object at its key, so a key the file system would read as another ("a//b"
// is "a/b", "a/./b" too) is refused rather than mapped: mapping would show
// the object under a name it does not have, and make two objects ("a//b" and
// "a/b") race for one file. Pipe mode keeps the same rule, which the
// conformance suite asks of every mode (a "../" key leaves its prefix).
inline std::string UnsafePathReason(std::string_view rel) {
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
inline absl::Status CheckNoKeyIsAFolder(std::string_view channel,
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
  Shards shards;  // data_roots[i] is at position shards.positions[i]
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
  // File: copies each instance's share (data_roots[i] is at position
  // shards.positions[i]).
  absl::Status Copy(const v1::Channel& channel, const std::vector<std::string>& data_roots,
                    const Shards& shards, const std::atomic<bool>& cancelled);
  // FastFile: shows the source read-only in the channel directory of each
  // instance of `instance_dirs`, published in the view registry;
  // `shard_count` receivers in the whole cluster.
  absl::Status MakeViews(const v1::Channel& channel, const std::vector<std::string>& instance_dirs,
                         size_t shard_count, const std::shared_ptr<JobViews>& job_views);
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

}  // namespace kiln::local::channel

#endif  // KILN_LIB_LOCAL_LOCAL_DATA_CHANNEL_H_
