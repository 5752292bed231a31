// The process runtime (container_runtime.h): the entrypoint runs as a child
// process in its own process group (setsid), under the process keeper
// (internal/process_keeper.h), with the instance tree at its host path.
// Where this process can make a mount namespace, the container gets one in
// which the image and the FastFile sources are bind-mounted on themselves
// read-only.
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "local/container_runtime.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {
namespace {

using ::kiln::PathForMessage;

class ProcessRuntime final : public ContainerRuntime {
 public:
  explicit ProcessRuntime(std::optional<Credentials> run_as) : run_as_(run_as) {}

  bool MountsTree() const override { return false; }

  // The process runtime cannot show the container another directory at a
  // host path: the path itself would be used, shared by every instance and
  // every job, and never emptied (a later job would restore an earlier
  // one's checkpoints). Only /opt/ml, which it maps to the instance's tree.
  absl::Status CheckCheckpointPath(const std::string& path) const override {
    if (IsUnderContainerBase(path)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "CheckpointConfig.LocalPath '", PathForMessage(path),
        "' is outside /opt/ml: on the local backend's process runtime it must be under "
        "/opt/ml (the default is /opt/ml/checkpoints), which maps to each instance's own "
        "directory; the bwrap runtime maps any path"));
  }

  void FillPaths(const CommandInput& in, const std::string& home,
                 ContainerConfigInput& config) const override {
    config.base_dir = in.paths.ml_dir;
    config.program_dir = in.program_dir;
    config.tmp_dir = in.paths.tmp_dir;
    // (The container user gets a home it may write: the instance's scratch
    // space.)
    config.home = run_as_.has_value() ? in.paths.tmp_dir : home;
  }

  void BuildCommand(const CommandInput& in, RunSpec& spec) const override {
    // The container paths, on this host.
    std::vector<std::string> command = in.command;
    for (std::string& arg : command) {
      arg = Rebase(arg, kContainerBase, in.paths.ml_dir);
      arg = Rebase(arg, kContainerProgram, in.program_dir);
    }
    spec.argv = std::move(command);
    spec.cwd = in.paths.ml_dir;
    // The image, read-only to the container (with the FastFile sources
    // AttachViews adds): a job cannot change what the instance's next job
    // runs.
    char real[PATH_MAX];
    if (realpath(in.image_root.c_str(), real) != nullptr) spec.readonly_paths.push_back(real);
  }

  // The FastFile views are links the container keeps; it gets a mount
  // namespace of its own in which each link's target (the source folder, or
  // the FUSE view of an s3:// prefix) is bind-mounted on itself read-only, so
  // writes through the link, or through the folder's own path, fail with
  // EROFS, while the host and other containers are untouched. Where this
  // process can make no mount namespace (neither root nor unprivileged user
  // namespaces) the links stay writable views, as documented in
  // kiln/local/local.h.
  absl::Status AttachViews(RunSpec& spec, const std::vector<std::string>& views) const override {
    for (const std::string& path : views) {
      char target[PATH_MAX];
      if (realpath(path.c_str(), target) == nullptr) {
        return ErrnoStatus(errno, "resolve the FastFile view", path);
      }
      if (std::find(spec.readonly_paths.begin(), spec.readonly_paths.end(), target) ==
          spec.readonly_paths.end()) {
        spec.readonly_paths.push_back(target);
      }
    }
    if (!spec.readonly_paths.empty() &&
        GetMountNamespaceSupport() == MountNamespaceSupport::kNone) {
      spec.readonly_paths.clear();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Started> Start(RunSpec& spec, UniqueFd output, ContainerProc& proc,
                                absl::FunctionRef<void(std::string_view)> log_platform)
      const override {
    SpawnSpec ss = SpawnSpecFor(spec, output.get());
    // The keeper ends the container with this process, or, with a lease,
    // when no process has held the run for that long.
    ss.keeper = true;
    if (spec.lease_ms > 0 && !spec.keeper_fds.empty()) {
      ss.keeper_lease_ms = spec.lease_ms;
      ss.fds = spec.keeper_fds;
    }
    absl::StatusOr<pid_t> spawned = Spawn(ss);
    output.reset();
    if (!spawned.ok()) return spawned.status();
    // (A spawn that ran the program directly marked the keeper unusable
    // first.)
    const bool kept = !KeeperUnusable();
    if (!kept) {
      log_platform(
          "the process keeper cannot run here (a memory file cannot be executed): the "
          "container's processes would outlive a crash of the process running Kiln");
    }
    absl::MutexLock lock(&proc.mu);
    proc.pid = *spawned;
    proc.kept = kept;
    return Started{*spawned, /*up=*/true};
  }

 private:
  const std::optional<Credentials> run_as_;
};

}  // namespace

std::unique_ptr<ContainerRuntime> NewProcessRuntime(std::optional<Credentials> run_as) {
  return std::make_unique<ProcessRuntime>(run_as);
}

}  // namespace kiln::local::internal
