// The instance tree (instance_tree.h).
#include "local/instance_tree.h"

#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "local/internal/fs.h"
#include "local/internal/layout.h"
#include "local/view_registry.h"

namespace kiln::local::internal {
namespace {

// The /opt/ml tree of an instance.
constexpr const char* kMlTree[] = {"input/config",        "input/data",  "model", "output/data",
                                   "output/intermediate", "checkpoints", "code"};

absl::Status MakeMlTree(const std::string& ml_dir) {
  absl::Status status;
  for (const char* sub : kMlTree) {
    if (status.ok()) status = MakeDirs(absl::StrCat(ml_dir, "/", sub));
  }
  return status;
}

}  // namespace

bool IsUnderContainerBase(std::string_view path) {
  const std::string_view base = kContainerBase;
  return path == base || (path.size() > base.size() && path.substr(0, base.size()) == base &&
                          path[base.size()] == '/');
}

InstancePaths InstancePaths::Of(std::string_view state_dir, std::string_view instance_id) {
  InstancePaths paths;
  paths.dir = InstanceDir(state_dir, instance_id);
  paths.ml_dir = MlDir(paths.dir);
  paths.tmp_dir = absl::StrCat(paths.dir, "/", kInstanceTmp);
  return paths;
}

absl::Status MakeInstanceTree(const InstancePaths& paths) {
  absl::Status status;
  for (const std::string& d : {absl::StrCat(paths.dir, "/image-cache"), paths.tmp_dir}) {
    if (status.ok()) status = MakeDirs(d);
  }
  if (status.ok()) status = MakeMlTree(paths.ml_dir);
  return status;
}

absl::Status FreshInstanceTree(const InstancePaths& paths, std::vector<std::string>& trash) {
  static std::atomic<uint64_t> next_trash{0};
  for (const std::string& old : {paths.ml_dir, paths.tmp_dir,
                                 absl::StrCat(paths.dir, "/checkpoints-local"),
                                 absl::StrCat(paths.dir, "/", kViewsDir)}) {
    const std::string aside = absl::StrCat(paths.dir, "/trash-", getpid(), "-", ++next_trash);
    if (rename(old.c_str(), aside.c_str()) == 0) {
      trash.push_back(aside);
    } else if (errno != ENOENT) {
      // Not movable (e.g. another file system): delete it in place.
      absl::Status s = RemoveTree(old);
      if (!s.ok()) return s;
    }
  }
  absl::Status status = MakeDirs(paths.tmp_dir);
  if (status.ok()) status = MakeMlTree(paths.ml_dir);
  return status;
}

void EmptyTrash(const std::shared_ptr<RunLog>& run, std::vector<std::string>& trash) {
  absl::Status status;
  for (const std::string& t : trash) status.Update(RemoveTree(t));
  trash.clear();
  if (!status.ok()) {
    NoteForRun(run, LeftoverText("the files of this run could not all be deleted", status,
                                 kLeftForDispose));
  }
}

absl::Status PrepareRunTree(const InstancePaths& paths, const std::vector<std::string>& fresh_dirs,
                            const ContainerConfig& config) {
  absl::Status status;
  for (const std::string& d : fresh_dirs) {
    if (status.ok()) status = ResetDirBelow(paths.dir, d);
  }
  // (Made anew too: an earlier run may have planted a link on the way.)
  if (status.ok()) status = ResetDirBelow(paths.dir, "ml/input/config");
  if (status.ok()) status = WriteConfigFiles(config, absl::StrCat(paths.ml_dir, "/input/config"));
  for (const std::string& ch : config.channels) {
    if (status.ok()) status = MakeDirs(absl::StrCat(paths.ml_dir, "/input/data/", ch));
  }
  return status;
}

absl::Status GiveTreeToContainer(const std::string& instance_dir,
                                 const std::string& checkpoint_dir, const Credentials& user) {
  const std::pair<std::string, int> parts[] = {
      {"ml", 0},          {"ml/model", -1},     {"ml/output", -1},     {"ml/code", -1},
      {"ml/checkpoints", -1}, {"ml/input", 0},  {"ml/input/data", 1},  {"ml/input/config", 1},
      {kInstanceTmp, -1},
  };
  for (const auto& [rel, depth] : parts) {
    absl::Status s = ChownBelow(instance_dir, rel, user.uid, user.gid, depth);
    if (!s.ok()) return s;
  }
  if (!checkpoint_dir.empty()) {
    const std::string rel = checkpoint_dir.substr(instance_dir.size() + 1);
    return ChownBelow(instance_dir, rel, user.uid, user.gid, -1);
  }
  return absl::OkStatus();
}

}  // namespace kiln::local::internal
