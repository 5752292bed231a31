// The state directory of the local backend: its layout (internal/layout.h),
// the locks that mark what a live process uses, and the collection of what
// a process that is gone left behind.
//
// Everything a provider makes there is held by an exclusive flock while in
// use, which the kernel drops however the process ends: a cluster's lock
// file (locks/<cluster-id>.lock) while the cluster lives, the lock of each
// piece of scratch (tmp/upload-*, image-cache/*.tmp-*) while it is written.
// What nobody holds is what a process that is gone left behind, and a
// provider made later on the directory deletes it (StaleFiles). flock, unlike
// a pid in a name, holds across PID namespaces sharing a state directory.
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_STATE_DIR_H_
#define KILN_LIB_LOCAL_STATE_DIR_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "local/internal/fs.h"
#include "local/internal/layout.h"

namespace kiln::local::internal {

// Makes `state_dir` and its folders (instances, locks, logs, tmp) when
// missing, and returns its real path. Errors: InvalidArgument naming the
// path and the system's reason (the message starts "LocalOptions.state_dir").
absl::StatusOr<std::string> OpenStateDir(const std::string& state_dir);

// Makes the file (or, with `dir`, the directory) `path`, which must not
// exist, and takes its lock. Errors: as ErrnoStatus, naming `path`.
absl::StatusOr<UniqueFd> MakeLockedScratch(const std::string& path, bool dir);

// Marks a cluster's directory as in use while it lives: an exclusive flock on
// <state_dir>/locks/<cluster-id>.lock (ClusterLockPath), which the kernel
// drops when this process dies, however it dies.
class ClusterLock {
 public:
  // Takes the lock at `path`, waiting while a provider deletes a stale
  // cluster of the same name. Errors: as ErrnoStatus, when the lock file
  // cannot be made or locked.
  static absl::StatusOr<std::unique_ptr<ClusterLock>> Take(const std::string& path);

  // Takes the lock at `path` if its file exists and no one holds it (its
  // cluster is stale); null otherwise.
  static std::unique_ptr<ClusterLock> TryTake(const std::string& path);

  // Deletes the lock file (unless KeepFile was called), then lets the lock go.
  // (A file that cannot be deleted only makes the next provider made on the
  // state directory find the cluster stale, find its directory gone, and try
  // again.)
  ~ClusterLock();

  // Leaves the file when the lock goes: for a cluster whose directory could
  // not all be deleted, which a provider made later then finds stale and
  // tries again (StaleFiles; without the file it never would).
  void KeepFile() { keep_file_ = true; }

  ClusterLock(const ClusterLock&) = delete;
  ClusterLock& operator=(const ClusterLock&) = delete;

 private:
  ClusterLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_;
  bool keep_file_ = false;
};

// A cluster's directory while Provision makes it, with the lock that makes it
// ours. Unless the lock is handed over with the cluster, the directory is
// deleted while the lock is held, then the lock goes, its file kept when the
// directory could not all be deleted (as a release keeps it), so that a
// provider made later on the state directory tries again. Without the lock
// nothing is deleted: a cluster of the same name, made in another PID
// namespace sharing the state directory, may own the directory.
struct ProvisionedDirs {
  std::string dir;
  std::unique_ptr<ClusterLock> lock;  // null: not taken, or handed over
  ~ProvisionedDirs();
};

// What processes that are gone left in a state directory, claimed (its locks
// taken, so no other provider deletes it at the same time): the clusters
// whose lock no process holds and the scratch in tmp/ and image-cache/ whose
// lock no process holds. Cluster directories without a lock file are left
// alone.
class StaleFiles {
 public:
  struct Cluster {
    std::string id;
    std::string dir;
    std::unique_ptr<ClusterLock> lock;
  };

  // Claims what is stale in `state_dir` now. Never fails: what cannot be
  // looked at is left for a later provider. With `keep_live`, a cluster that
  // may be taken back (run_record.h: a warm pool's, or one with a container
  // whose keeper still runs) is set apart (TakeLive), claimed, rather than
  // deleted.
  static StaleFiles Claim(const std::string& state_dir, bool keep_live = false);

  // The clusters set apart by Claim, with their locks.
  std::vector<Cluster> TakeLive() { return std::exchange(live_, {}); }

  bool empty() const { return clusters_.empty() && scratch_.empty(); }

  // Deletes what was claimed and lets the locks go. What cannot be deleted
  // stays for the next provider made on the state directory to try again: a
  // cluster keeps its lock file for that, and scratch is found by its name.
  // Blocking (a job's files can take a while to delete): not on the loop
  // thread.
  void Delete();

 private:
  struct Scratch {
    std::string path;
    UniqueFd lock;
  };
  std::vector<Cluster> clusters_;
  std::vector<Cluster> live_;
  std::vector<Scratch> scratch_;
};

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_STATE_DIR_H_
