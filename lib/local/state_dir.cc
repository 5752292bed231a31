// The state directory: layout, locks, stale files (state_dir.h).
#include "local/state_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "local/run_record.h"

namespace kiln::local::internal {
namespace {

// True if `fd` is still the entry at `path` (not deleted or replaced).
bool StillAt(int fd, const std::string& path) {
  struct stat held, named;
  return fstat(fd, &held) == 0 && lstat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

// True if `fd` is still the file at `path`, links followed (not deleted or
// replaced).
bool StillLinked(int fd, const std::string& path) {
  struct stat held, named;
  return fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

absl::StatusOr<std::string> OpenStateDir(const std::string& state_dir) {
  absl::Status s = MakeDirs(state_dir);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LocalOptions.state_dir '", state_dir, "': ", s.message()));
  }
  char real[PATH_MAX];
  if (realpath(state_dir.c_str(), real) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("LocalOptions.state_dir '", state_dir, "': ", std::strerror(errno)));
  }
  for (const char* sub : {"/instances", "/locks", "/logs", "/tmp"}) {
    s = MakeDirs(absl::StrCat(real, sub));
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("LocalOptions.state_dir: ", s.message()));
    }
  }
  return std::string(real);
}

absl::StatusOr<UniqueFd> MakeLockedScratch(const std::string& path, bool dir) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    UniqueFd fd;
    if (dir) {
      if (mkdir(path.c_str(), 0755) != 0) return ErrnoStatus(errno, "create", path);
      fd.reset(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    } else {
      fd.reset(open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    }
    if (!fd.valid()) {
      if (errno == ENOENT) continue;  // deleted at once by a clean-up: again
      return ErrnoStatus(errno, "create", path);
    }
    while (flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return ErrnoStatus(errno, "lock", path);
    }
    // A clean-up may have taken it for a dead process's before the lock: again.
    if (StillAt(fd.get(), path)) return fd;
  }
  return absl::InternalError(absl::StrCat("could not create '", path, "': deleted repeatedly"));
}

absl::StatusOr<std::unique_ptr<ClusterLock>> ClusterLock::Take(const std::string& path) {
  while (true) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "create the lock file", path);
    while (flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, "lock", path);
    }
    if (StillLinked(fd, path)) return std::unique_ptr<ClusterLock>(new ClusterLock(path, fd));
    close(fd);  // deleted meanwhile, with the stale cluster it stood for: again
  }
}

std::unique_ptr<ClusterLock> ClusterLock::TryTake(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !StillLinked(fd, path)) {
    close(fd);  // in use (or just deleted)
    return nullptr;
  }
  return std::unique_ptr<ClusterLock>(new ClusterLock(path, fd));
}

ClusterLock::~ClusterLock() {
  if (!keep_file_) unlink(path_.c_str());
  close(fd_);
}

ProvisionedDirs::~ProvisionedDirs() {
  if (lock == nullptr) return;
  if (!RemoveTree(dir).ok()) lock->KeepFile();
  lock.reset();  // (deletes the lock file unless kept, then unlocks)
}

StaleFiles StaleFiles::Claim(const std::string& state_dir, bool keep_live) {
  StaleFiles stale;
  // Clusters: the lock files in <state_dir>/locks that no process holds.
  const std::string locks = LocksDir(state_dir);
  if (DIR* d = opendir(locks.c_str()); d != nullptr) {
    while (struct dirent* e = readdir(d)) {
      const std::string_view name = e->d_name;
      constexpr std::string_view kSuffix = ".lock";
      if (name.size() <= kSuffix.size() || name[0] == '.' ||
          name.substr(name.size() - kSuffix.size()) != kSuffix) {
        continue;
      }
      const std::string_view id = name.substr(0, name.size() - kSuffix.size());
      std::unique_ptr<ClusterLock> lock = ClusterLock::TryTake(ClusterLockPath(state_dir, id));
      if (lock == nullptr) continue;
      Cluster c{std::string(id), ClusterDir(state_dir, id), std::move(lock)};
      (keep_live && MayBeTakenBack(c.dir) ? stale.live_ : stale.clusters_).push_back(std::move(c));
    }
    closedir(d);
  }
  // Scratch (MakeLockedScratch) whose lock no process holds.
  const std::pair<std::string, std::string> places[] = {
      {absl::StrCat(state_dir, "/tmp"), "upload-"},
      {absl::StrCat(state_dir, "/image-cache"), ".tmp-"},
  };
  for (const auto& [dir, marker] : places) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (struct dirent* e = readdir(d)) {
      if (!absl::StrContains(e->d_name, marker)) continue;
      const std::string path = absl::StrCat(dir, "/", e->d_name);
      UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (!fd.valid() || flock(fd.get(), LOCK_EX | LOCK_NB) != 0 || !StillAt(fd.get(), path)) {
        continue;  // in use, or gone
      }
      stale.scratch_.push_back(Scratch{path, std::move(fd)});
    }
    closedir(d);
  }
  return stale;
}

void StaleFiles::Delete() {
  for (Cluster& c : clusters_) {
    if (!RemoveTree(c.dir).ok()) c.lock->KeepFile();
    c.lock.reset();  // (deletes the lock file unless kept, then unlocks)
  }
  clusters_.clear();
  for (Scratch& t : scratch_) {
    RemoveTree(t.path).IgnoreError();
    t.lock.reset();
  }
  scratch_.clear();
}

}  // namespace kiln::local::internal
