// LocalDataChannel: File-mode channels copied from an ObjectStores source into
// the instances' /opt/ml/input/data/<channel>/ (see kiln/local/local.h).
//
// Deliver runs on the loop thread and only starts a task; the task lists the
// source, checks every key, and copies with a few threads, then posts the
// outcome (unless the channel object is gone by then).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/internal/json_value.h"
#include "kiln/local/local.h"
#include "local/internal/fs.h"
#include "local/internal/layout.h"
#include "local/internal/task_runner.h"

namespace kiln::local {
namespace {

struct Alive {};

struct CopyItem {
  std::string uri;
  std::string dest;        // file path
  std::string data_root;   // the instance's input/data, which must still exist
};

struct Source {
  std::string uri;
  std::string rel;  // path below the channel directory
};

class LocalDataChannel final : public DataChannel {
 public:
  LocalDataChannel(EventLoop& loop, ObjectStores& stores, LocalDataChannelOptions options)
      : loop_(loop), stores_(stores), options_(std::move(options)) {
    if (options_.copy_threads < 1) options_.copy_threads = 1;
  }

  ~LocalDataChannel() override {
    alive_.reset();
    cancelled_->store(true);
    tasks_.JoinAll();
  }

  void Deliver(const ChannelDelivery& delivery, DoneCallback done) override {
    const v1::Channel& channel = delivery.channel;
    const std::string name = channel.channel_name();
    absl::Status error;
    if (delivery.input_mode != "File") {
      error = absl::UnimplementedError(absl::StrCat(
          "channel '", name, "': input mode ", internal::Av(delivery.input_mode),
          " is not supported by the local backend yet (File mode only)"));
    } else if (!channel.data_source().has_s3_data_source()) {
      error = absl::UnimplementedError(absl::StrCat(
          "channel '", name, "': the local backend reads only S3DataSource channels"));
    } else if (name.find('/') != std::string::npos || !internal::IsSafeRelativePath(name)) {
      error = absl::InvalidArgumentError(absl::StrCat(
          "channel '", name, "': the name would land outside /opt/ml/input/data"));
    }
    std::vector<std::string> data_roots;
    for (const Instance* instance : delivery.instances) {
      if (!error.ok()) break;
      absl::StatusOr<std::string> dir = internal::InstanceDirOf(options_.state_dir, instance->id);
      if (!dir.ok()) {
        error = dir.status();
        break;
      }
      data_roots.push_back(absl::StrCat(internal::MlDir(*dir), "/input/data"));
    }
    if (!error.ok()) {
      loop_.Post([alive = std::weak_ptr<Alive>(alive_), done = std::move(done), error]() mutable {
        if (alive.lock()) done(error);
      });
      return;
    }
    auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
    tasks_.Run([this, channel, data_roots = std::move(data_roots), guard,
                           done = std::move(done), alive = std::weak_ptr<Alive>(alive_),
                           cancelled = cancelled_]() mutable {
      absl::Status status = Copy(channel, data_roots, *cancelled);
      loop_.Post([alive, done = std::move(done), status]() mutable {
        if (alive.lock()) done(status);
      });
      guard->Reset();
    });
  }

 private:
  absl::StatusOr<std::vector<Source>> ListSources(const v1::Channel& channel);
  absl::Status Copy(const v1::Channel& channel, const std::vector<std::string>& data_roots,
                    const std::atomic<bool>& cancelled);

  EventLoop& loop_;
  ObjectStores& stores_;
  LocalDataChannelOptions options_;
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  internal::TaskRunner tasks_;  // last: joined first
};

absl::StatusOr<std::vector<Source>> LocalDataChannel::ListSources(const v1::Channel& channel) {
  const std::string& name = channel.channel_name();
  const auto& s3 = channel.data_source().s3_data_source();
  const std::string& uri = s3.s3_uri();
  absl::StatusOr<ObjectStore*> store = stores_.For(uri);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("channel '", name, "': ", store.status().message()));
  }
  std::vector<Source> sources;
  if (s3.s3_data_type() == "S3Prefix") {
    absl::StatusOr<std::vector<ObjectInfo>> objects = (*store)->List(uri);
    if (!objects.ok()) {
      return absl::Status(objects.status().code(),
                          absl::StrCat("channel '", name, "': listing ", uri, ": ",
                                       objects.status().message()));
    }
    // Paths are relative to the prefix's directory: s3://b/data/tr lists
    // data/train/x.csv as train/x.csv.
    const size_t base = uri.rfind('/') + 1;
    for (const ObjectInfo& o : *objects) {
      if (o.uri.size() <= base || o.uri.back() == '/') continue;  // folder markers
      sources.push_back(Source{o.uri, o.uri.substr(base)});
    }
    if (sources.empty()) {
      return absl::NotFoundError(absl::StrCat("channel '", name, "': no objects found under \"",
                                              uri, "\""));
    }
  } else if (s3.s3_data_type() == "ManifestFile") {
    absl::StatusOr<std::string> text = (*store)->Get(uri);
    if (!text.ok()) {
      return absl::Status(text.status().code(), absl::StrCat("channel '", name,
                                                             "': reading manifest ", uri, ": ",
                                                             text.status().message()));
    }
    absl::StatusOr<kiln::internal::JsonValue> doc = kiln::internal::ParseJsonValue(*text);
    const kiln::internal::JsonValue* prefix = nullptr;
    if (doc.ok() && doc->is_array() && !doc->elements().empty()) {
      prefix = doc->elements()[0].Find("prefix");
    }
    if (prefix == nullptr || !prefix->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "channel '", name, "': manifest ", uri,
          " must be a JSON array whose first element is {\"prefix\": \"<uri>\"}",
          doc.ok() ? "" : absl::StrCat(" (", doc.status().message(), ")")));
    }
    for (size_t i = 1; i < doc->elements().size(); ++i) {
      const kiln::internal::JsonValue& key = doc->elements()[i];
      if (!key.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "channel '", name, "': manifest ", uri, ": element ", i, " is not a string key"));
      }
      sources.push_back(Source{absl::StrCat(prefix->string_value(), key.string_value()),
                               key.string_value()});
    }
  } else {
    return absl::UnimplementedError(absl::StrCat("channel '", name, "': S3DataType ",
                                                 s3.s3_data_type(),
                                                 " is not supported by the local backend yet"));
  }
  for (const Source& s : sources) {
    if (!internal::IsSafeRelativePath(s.rel)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "channel '", name, "': object '", s.uri, "' has the key '", s.rel,
          "', which would land outside /opt/ml/input/data/", name));
    }
  }
  std::sort(sources.begin(), sources.end(),
            [](const Source& a, const Source& b) { return a.uri < b.uri; });
  return sources;
}

absl::Status LocalDataChannel::Copy(const v1::Channel& channel,
                                    const std::vector<std::string>& data_roots,
                                    const std::atomic<bool>& cancelled) {
  const std::string& name = channel.channel_name();
  absl::StatusOr<std::vector<Source>> sources = ListSources(channel);
  if (!sources.ok()) return sources.status();
  const bool sharded =
      channel.data_source().s3_data_source().s3_data_distribution_type() == "ShardedByS3Key";
  std::vector<CopyItem> items;
  for (size_t i = 0; i < data_roots.size(); ++i) {
    if (!internal::IsDirectory(data_roots[i])) {
      return absl::AbortedError(absl::StrCat("channel '", name, "': instance directory ",
                                             data_roots[i], " is gone (released?)"));
    }
    const std::string dir = absl::StrCat(data_roots[i], "/", name);
    absl::Status s = internal::ResetDir(dir);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("channel '", name, "': ", s.message()));
    for (size_t j = 0; j < sources->size(); ++j) {
      if (sharded && j % data_roots.size() != i) continue;
      const Source& src = (*sources)[j];
      items.push_back(CopyItem{src.uri, absl::StrCat(dir, "/", src.rel), data_roots[i]});
    }
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
        s = absl::AbortedError(absl::StrCat("channel '", name, "': instance directory ",
                                            item.data_root, " is gone (released?)"));
      } else {
        absl::StatusOr<ObjectStore*> store = stores_.For(item.uri);
        s = store.ok() ? (*store)->GetToFile(item.uri, item.dest) : store.status();
        if (absl::IsNotFound(s)) {
          s = absl::NotFoundError(absl::StrCat("channel '", name, "': object '", item.uri,
                                               "' disappeared during the copy (", s.message(), ")"));
        } else if (!s.ok()) {
          s = absl::Status(s.code(), absl::StrCat("channel '", name, "': object '", item.uri,
                                                  "': ", s.message()));
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
  if (cancelled.load()) return absl::CancelledError(absl::StrCat("channel '", name, "': cancelled"));
  absl::MutexLock lock(&mu);
  return first_error;
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
