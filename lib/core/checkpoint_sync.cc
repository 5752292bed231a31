// CheckpointSync (see include/kiln/checkpoint_sync.h).
//
// The local directory is the truth while the container runs: SyncOnce walks
// it, uploads what differs from the stamp recorded at the last upload or
// restore, and deletes the keys it knows that are gone. Keys it never knew
// (objects others put under the prefix after Restore) are left alone.
#include "kiln/checkpoint_sync.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kiln/plugin/files.h"
#include "kiln/plugin/status_macros.h"

namespace kiln {
namespace {

// The object stores' temporary files (object_store.cc): never uploaded, never
// restored.
// Paths, URIs and keys in messages: a key is a name the container chose.

// Local file systems stamp a write with the kernel's coarse clock, which moves
// in ticks of at most 10 ms, truncated to the file system's granularity. A
// file stamped in the tick during which we looked at it can be rewritten in
// that same tick with the same size and so the same (size, mtime): such a
// "racy" file is recorded as uploaded but not in sync, so the next SyncOnce
// uploads it again (git's racy-clean rule, an upload standing for the
// content check).
constexpr int64_t kClockTickNs = 20'000'000;  // two of its ticks, for margin

constexpr int64_t kSecondNs = 1'000'000'000;

// A file system's granularity divides one second (1 ns: ext4, XFS, tmpfs;
// 100 ns: NTFS, SMB; 10 ms: exFAT; 1 s: ext3, HFS+, some NFS servers), but
// for FAT's 2 s modification times, and every stamp is a multiple of it. So
// it divides gcd(stamp, 1 s), or is 2 s for an even second: a bound taken
// from the stamp, whatever the file system. (A fine stamp that happens to be
// round only keeps its file racy a little longer.)
int64_t GranularityBoundNs(int64_t mtime_ns) {
  // (A stamp clamped to the range's start tells nothing, and has no |x| for gcd.)
  if (mtime_ns % (2 * kSecondNs) == 0 || mtime_ns == std::numeric_limits<int64_t>::min()) {
    return 2 * kSecondNs;
  }
  return std::gcd(mtime_ns, kSecondNs);
}

// How long after its stamp a write can still get it: a file is racy when
// looked at sooner than that.
int64_t RacyWindowNs(int64_t mtime_ns) { return kClockTickNs + GranularityBoundNs(mtime_ns); }

// Whether a file stamped `mtime_ns`, looked at from `since_ns` on, may be
// rewritten with the same size and stamp: it was stamped less than a racy
// window before `since_ns`, or after it. A stamp ahead of this host's clock
// (a file server's clock ahead of ours, a stamp set by hand or unpacked from
// an archive) can be given again to a rewrite, by that server's clock or by
// the same hand, so it is trusted only once this host's clock has passed it
// (git's racy-clean rule has no upper bound either).
bool IsRacy(int64_t mtime_ns, int64_t since_ns) {
  return mtime_ns >= since_ns - RacyWindowNs(mtime_ns);
}

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }


// `status` with `context` before its message, same code.
absl::Status Annotate(const absl::Status& status, std::string_view context) {
  return absl::Status(status.code(), absl::StrCat(AbslView(context), ": ", status.message()));
}

// The time file stamps are compared with: `clock`'s, or the system clock's
// (which the kernel stamps files with) when null.
int64_t NowNs(const Clock* clock) {
  if (clock != nullptr) return absl::ToUnixNanos(clock->Now());
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The stamp in nanoseconds since the epoch; one beyond int64's range (before
// 1677 or after 2262, which a file can be given) is clamped into it.
int64_t MtimeNs(const struct stat& st) {
  int64_t ns;
  if (__builtin_mul_overflow(int64_t{st.st_mtim.tv_sec}, kSecondNs, &ns) ||
      __builtin_add_overflow(ns, int64_t{st.st_mtim.tv_nsec}, &ns)) {
    return st.st_mtim.tv_sec < 0 ? std::numeric_limits<int64_t>::min()
                                 : std::numeric_limits<int64_t>::max();
  }
  return ns;
}



// Whether `key` is a clean relative path: '/'-separated segments, none empty,
// "." or "..", no NUL. Anything else could land outside the directory (or
// alias another key).
bool IsCleanKey(std::string_view key) {
  if (key.empty() || key.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  for (;;) {
    size_t end = key.find('/', start);
    std::string_view segment =
        key.substr(start, end == std::string_view::npos ? key.npos : end - start);
    if (segment.empty() || segment == "." || segment == "..") return false;
    if (end == std::string_view::npos) return true;
    start = end + 1;
  }
}

bool HasTempSegment(std::string_view key) {
  size_t start = 0;
  for (;;) {
    if (IsTempName(key.substr(start))) return true;
    size_t slash = key.find('/', start);
    if (slash == std::string_view::npos) return false;
    start = slash + 1;
  }
}


constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Opens the checkpoint directory (made when missing, with `create`): as
// named without a trusted root; with one, walked down from it one component
// at a time, never through a symbolic link.
absl::StatusOr<UniqueFd> OpenLocalDir(const std::string& local_dir,
                                      const std::string& trusted_root, bool create) {
  if (trusted_root.empty()) {
    if (create) KILN_RETURN_IF_ERROR(MakeDirs(local_dir));
    UniqueFd dir(::open(local_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) {
      return ErrnoError(errno, absl::StrCat("open directory '", PathForMessage(local_dir), "'"));
    }
    return dir;
  }
  std::string_view rel;
  if (local_dir != trusted_root) {
    const std::string below = trusted_root == "/" ? "/" : absl::StrCat(trusted_root, "/");
    if (local_dir.compare(0, below.size(), below) != 0 ||
        !IsCleanKey(std::string_view(local_dir).substr(below.size()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint directory '", PathForMessage(local_dir),
                       "' is not a clean path below '", PathForMessage(trusted_root), "'"));
    }
    rel = std::string_view(local_dir).substr(below.size());
  }
  UniqueFd dir(::open(trusted_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return ErrnoError(errno, absl::StrCat("open directory '", PathForMessage(trusted_root), "'"));
  }
  std::string walked = trusted_root;
  while (!rel.empty()) {
    const size_t slash = rel.find('/');
    const std::string name(rel.substr(0, slash));
    rel = slash == std::string_view::npos ? std::string_view() : rel.substr(slash + 1);
    absl::StrAppend(&walked, "/", name);
    UniqueFd next(::openat(dir.get(), name.c_str(), kDirFlags));
    if (!next.valid() && errno == ENOENT && create) {
      if (::mkdirat(dir.get(), name.c_str(), 0777) != 0 && errno != EEXIST) {
        return ErrnoError(errno, absl::StrCat("create directory '", PathForMessage(walked), "'"));
      }
      next = UniqueFd(::openat(dir.get(), name.c_str(), kDirFlags));
    }
    if (!next.valid()) {
      const int err = errno;
      struct stat st;
      if (err == ELOOP || err == ENOTDIR) {
        const bool link = ::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                          S_ISLNK(st.st_mode);
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint directory '", PathForMessage(local_dir), "': '", PathForMessage(walked),
            "' is ", link ? "a symbolic link, which is not followed" : "not a directory"));
      }
      return ErrnoError(err, absl::StrCat("open directory '", PathForMessage(walked), "'"));
    }
    dir = std::move(next);
  }
  return dir;
}

// Opens `key` below the directory open as `root`: every directory on the way
// with O_NOFOLLOW, each closed once the next is open, and `key` itself with
// `flags` (which should hold O_NOFOLLOW). At most two descriptors are open at
// once, however deep `key` is. Invalid, errno set, on failure (ELOOP or
// ENOTDIR: a symbolic link on the way or at `key`).
UniqueFd OpenBelow(int root, std::string_view key, int flags) {
  UniqueFd dir;
  int at = root;
  for (;;) {
    const size_t slash = key.find('/');
    const std::string name(key.substr(0, slash));
    if (slash == std::string_view::npos) return UniqueFd(::openat(at, name.c_str(), flags));
    dir = UniqueFd(::openat(at, name.c_str(), kDirFlags));
    if (!dir.valid()) return UniqueFd();
    at = dir.get();
    key = key.substr(slash + 1);
  }
}

// Opens the file `key` below the directory open as `root` for reading,
// without following a symbolic link (see OpenBelow).
UniqueFd OpenFileBelow(int root, std::string_view key) {
  return OpenBelow(root, key, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

// Refuses to restore `key` through a symbolic link (or a non-directory) in
// the local tree open as `root`: every directory between it and the file
// must be a real directory or not exist yet (it is then created as one).
absl::Status CheckParentsAreDirectories(int root, const std::string& local_dir,
                                        std::string_view key, std::string_view uri) {
  for (size_t slash = key.find('/'); slash != std::string_view::npos;
       slash = key.find('/', slash + 1)) {
    const std::string rel(key.substr(0, slash));
    const std::string dir = absl::StrCat(local_dir, "/", rel);
    struct stat st;
    if (::fstatat(root, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return absl::OkStatus();
      return ErrnoError(errno, absl::StrCat("checkpoint restore of '", PathForMessage(uri),
                                            "': stat '", PathForMessage(dir), "'"));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint restore of '", PathForMessage(uri), "': local path '", PathForMessage(dir),
          "' is ", S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory",
          "; refusing to write through it"));
    }
  }
  return absl::OkStatus();
}

struct LocalFile {
  int64_t size = 0;
  int64_t mtime_ns = 0;
};

// Adds the regular files below the checkpoint directory `root`, open as
// `root_fd`, to `out`, keyed by relative path. Symbolic links are skipped,
// never followed; temporary files are skipped. Each directory is listed
// whole, then closed, and reopened from `root_fd` (OpenBelow) when its turn
// comes: the walk holds at most three descriptors and no stack frame per
// level, however deep the tree a container made.
//
// A folder that cannot be listed (EACCES, EMFILE, a readdir error), or an
// entry that cannot be examined (its type unknown), does not end the walk:
// the rest of the tree still counts, and `unread` gets its relative path
// ("" for the directory itself) and the error, so that no key at or below
// it is taken for deleted.
void WalkLocal(int root_fd, const std::string& root, std::map<std::string, LocalFile>& out,
               std::map<std::string, absl::Status>& unread) {
  std::vector<std::string> pending = {""};  // directories to list, by relative path
  while (!pending.empty()) {
    const std::string rel = std::move(pending.back());
    pending.pop_back();
    const std::string dir = rel.empty() ? root : absl::StrCat(root, "/", rel);
    UniqueFd dir_fd(rel.empty() ? ::fcntl(root_fd, F_DUPFD_CLOEXEC, 0)
                                : OpenBelow(root_fd, rel, kDirFlags).release());
    if (!dir_fd.valid()) {
      // Removed, or replaced by a link, since it was listed: not walked.
      if (!rel.empty() && (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)) continue;
      unread.emplace(rel,
                     ErrnoError(errno, absl::StrCat("list directory '", PathForMessage(dir), "'")));
      continue;
    }
    DIR* d = ::fdopendir(dir_fd.get());
    if (d == nullptr) {
      unread.emplace(rel,
                     ErrnoError(errno, absl::StrCat("list directory '", PathForMessage(dir), "'")));
      continue;
    }
    dir_fd.release();  // closedir closes it
    std::unique_ptr<DIR, int (*)(DIR*)> closer(d, &::closedir);
    absl::Status listed = ForEachEntry(d, dir, [&](std::string_view name) {
      std::string key = rel.empty() ? std::string(name) : absl::StrCat(rel, "/", AbslView(name));
      struct stat st;
      if (::fstatat(::dirfd(d), name.data(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) {
          absl::Status error = ErrnoError(
              errno, absl::StrCat("stat '", PathForMessage(absl::StrCat(root, "/", key)), "'"));
          unread.emplace(std::move(key), std::move(error));
        }
        return absl::OkStatus();
      }
      if (S_ISDIR(st.st_mode)) {
        pending.push_back(std::move(key));
      } else if (S_ISREG(st.st_mode)) {  // not links (never followed), FIFOs, devices
        out[std::move(key)] = LocalFile{static_cast<int64_t>(st.st_size), MtimeNs(st)};
      }
      return absl::OkStatus();
    });
    // The entries seen before a readdir error stand; the folder's others are unknown.
    if (!listed.ok()) unread.emplace(rel, std::move(listed));
  }
}

// The relative path an element of a std::set or std::map of them holds.
const std::string& KeyOf(const std::string& key) { return key; }
template <typename Value>
const std::string& KeyOf(const std::pair<const std::string, Value>& entry) {
  return entry.first;
}

// Whether the sorted `keys` (a std::set or a std::map keyed by relative path)
// hold a proper ancestor of `key` ("a" or "a/b" for "a/b/c").
template <typename Keys>
bool HoldsAncestor(const Keys& keys, std::string_view key) {
  for (size_t slash = key.find('/'); slash != std::string_view::npos;
       slash = key.find('/', slash + 1)) {
    if (keys.count(std::string(key.substr(0, slash))) > 0) return true;
  }
  return false;
}

// The first of the sorted `keys` below `key` ("a/b" for "a"), or null.
template <typename Keys>
const std::string* FirstBelow(const Keys& keys, const std::string& key) {
  const std::string below = absl::StrCat(key, "/");
  auto next = keys.lower_bound(below);
  if (next == keys.end() || KeyOf(*next).compare(0, below.size(), below) != 0) return nullptr;
  return &KeyOf(*next);
}

// Whether `key` is at or below one of the `unread` paths of WalkLocal: it may
// still exist locally, unseen.
bool IsUnseen(const std::map<std::string, absl::Status>& unread, const std::string& key) {
  return !unread.empty() &&
         (unread.count("") > 0 || unread.count(key) > 0 || HoldsAncestor(unread, key));
}

}  // namespace

CheckpointSync::CheckpointSync(ObjectStore& store, std::string prefix, std::string local_dir,
                               std::string trusted_root, const Clock* clock)
    : store_(store),
      prefix_(std::move(prefix)),
      local_dir_(std::move(local_dir)),
      trusted_root_(std::move(trusted_root)),
      clock_(clock) {
  if (prefix_.empty() || prefix_.back() != '/') prefix_.push_back('/');
  while (local_dir_.size() > 1 && local_dir_.back() == '/') local_dir_.pop_back();
  while (trusted_root_.size() > 1 && trusted_root_.back() == '/') trusted_root_.pop_back();
}

absl::Status CheckpointSync::Restore() {
  if (local_dir_.empty()) {
    return absl::InvalidArgumentError("checkpoint sync: the local directory is empty");
  }
  absl::StatusOr<UniqueFd> root = OpenLocalDir(local_dir_, trusted_root_, /*create=*/true);
  if (!root.ok()) return Annotate(root.status(), "checkpoint restore");
  absl::StatusOr<std::vector<ObjectInfo>> listed = store_.List(prefix_);
  if (!listed.ok()) {
    return Annotate(listed.status(),
                    absl::StrCat("checkpoint restore: list '", PathForMessage(prefix_), "'"));
  }
  // Every key is checked before anything is written.
  std::vector<std::pair<std::string, std::string>> to_restore;  // uri, key
  for (const ObjectInfo& info : *listed) {
    if (info.uri.compare(0, prefix_.size(), prefix_) != 0) continue;
    std::string key = info.uri.substr(prefix_.size());
    // A directory marker ("folder" objects of S3 consoles) holds no file.
    if (key.empty() || key.back() == '/') continue;
    if (!IsCleanKey(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint restore: object '", PathForMessage(info.uri), "' has key '",
          PathForMessage(key),
          "', which is not a clean relative path (absolute, '..', '.' or empty segments) and could "
          "land outside '",
          PathForMessage(local_dir_), "'"));
    }
    if (HasTempSegment(key)) continue;
    to_restore.emplace_back(info.uri, std::move(key));
  }
  // `a` and `a/b` cannot both be restored: a path is a file or a directory.
  // Found here, or the restore would stop halfway, with part of the files
  // written. (S3 holds both; SyncOnce takes care not to leave both there.)
  std::map<std::string, const std::string*> uri_of;  // key -> uri, in to_restore
  for (const auto& [uri, key] : to_restore) uri_of.emplace(key, &uri);
  for (const auto& [key, uri] : uri_of) {
    const std::string* below = FirstBelow(uri_of, key);
    if (below == nullptr) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint restore: objects '", PathForMessage(*uri), "' and '",
                     PathForMessage(*uri_of.at(*below)), "' cannot both be restored: key '",
                     PathForMessage(key), "' would be a file in '", PathForMessage(local_dir_),
                     "' and the directory holding key '", PathForMessage(*below), "'"));
  }
  synced_.clear();
  // When a write can no longer be stamped as a file written here was, and
  // the longest racy window of those files: Restore returns only then (below).
  int64_t settled_ns = std::numeric_limits<int64_t>::min();
  int64_t longest_window_ns = 0;
  absl::Status status = [&]() -> absl::Status {
    for (const auto& [uri, key] : to_restore) {
      std::string path = absl::StrCat(local_dir_, "/", key);
      KILN_RETURN_IF_ERROR(CheckParentsAreDirectories(root->get(), local_dir_, key, uri));
      absl::Status got = store_.GetToFile(uri, path);
      if (absl::IsNotFound(got)) continue;  // deleted since the listing
      if (!got.ok()) {
        return Annotate(got, absl::StrCat("checkpoint restore of '", PathForMessage(uri), "' to '",
                                          PathForMessage(path), "'"));
      }
      struct stat st;
      if (::fstatat(root->get(), key.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return ErrnoError(errno, absl::StrCat("checkpoint restore of '", PathForMessage(uri),
                                              "': stat '", PathForMessage(path), "'"));
      }
      const int64_t mtime_ns = MtimeNs(st);
      synced_[key] = Stamp{static_cast<int64_t>(st.st_size), mtime_ns};
      const int64_t window_ns = RacyWindowNs(mtime_ns);
      settled_ns = std::max(settled_ns, mtime_ns > std::numeric_limits<int64_t>::max() - window_ns
                                            ? std::numeric_limits<int64_t>::max()
                                            : mtime_ns + window_ns);
      longest_window_ns = std::max(longest_window_ns, window_ns);
    }
    return absl::OkStatus();
  }();
  // The container starts as soon as this returns (a warm local start takes a
  // few ms) and may rewrite a restored file at once: in the tick of the
  // restore, with the same size, the file would keep the stamp recorded here
  // and never be uploaded. So wait until the file system's clock has left
  // that tick (at most one racy window: 20 ms, up to 2 s more for round stamps).
  // A stamp ahead of the clock (a file server's clock ahead of ours) is not
  // waited for: such a file stays racy, so the first SyncOnce uploads it.
  if (!synced_.empty()) {
    const int64_t wait_ns = std::min(longest_window_ns, settled_ns - NowNs(clock_));
    if (wait_ns > 0) absl::SleepFor(absl::Nanoseconds(wait_ns));
    const int64_t settled_at_ns = NowNs(clock_);
    for (auto& [key, stamp] : synced_) {
      if (IsRacy(stamp.mtime_ns, settled_at_ns)) stamp.size = -1;
    }
  }
  return status;
}

absl::Status CheckpointSync::SyncOnce(CheckpointSyncStats* stats_out) {
  // Counted as it goes, so that the caller has it whatever this returns.
  CheckpointSyncStats unwanted;
  CheckpointSyncStats& stats = stats_out != nullptr ? *stats_out : unwanted;
  stats = CheckpointSyncStats();
  if (local_dir_.empty()) {
    return absl::InvalidArgumentError("checkpoint sync: the local directory is empty");
  }
  absl::StatusOr<UniqueFd> root = OpenLocalDir(local_dir_, trusted_root_, /*create=*/true);
  if (!root.ok()) return Annotate(root.status(), "checkpoint sync");
  std::map<std::string, LocalFile> local;
  // Folders (or entries) that could not be read, by relative path: what lies
  // there is unknown, so nothing at or below them is deleted this round.
  std::map<std::string, absl::Status> unread;
  const int64_t walk_start_ns = NowNs(clock_);
  WalkLocal(root->get(), local_dir_, local, unread);

  absl::Status first_error;
  int failures = 0;
  auto fail = [&](absl::Status status) {
    if (failures++ == 0) first_error = std::move(status);
  };
  for (const auto& [rel, error] : unread) {
    fail(absl::Status(error.code(),
                      absl::StrCat("checkpoint sync of '", PathForMessage(local_dir_), "': ",
                                   error.message(), "; nothing at or below it is deleted from ",
                                   "the store until it can be read")));
  }

  // A known key gone from the directory is in the way of a local file now
  // below it (a file replaced by a directory of the same name) or above it (a
  // directory replaced by a file): a file store cannot take the new file
  // while the old key is there, and a store that can (S3) would hold both a
  // file and a directory at one path, which Restore refuses. So these keys are
  // deleted before the uploads, and a file whose way could not be cleared
  // waits for a later round (`blocked`).
  auto in_the_way = [&](const std::string& key) {
    return FirstBelow(local, key) != nullptr || HoldsAncestor(local, key);
  };
  std::set<std::string> blocked;  // keys in the way whose deletion failed
  // Deletes the known keys gone from the directory (but the unseen ones):
  // with `first`, those in the way; without, the others.
  auto delete_gone = [&](bool first) {
    for (auto it = synced_.begin(); it != synced_.end();) {
      if (local.count(it->first) > 0 || IsUnseen(unread, it->first) ||
          in_the_way(it->first) != first) {
        ++it;
        continue;
      }
      std::string uri = absl::StrCat(prefix_, it->first);
      absl::Status status = store_.Delete(uri);
      if (status.ok()) {
        ++stats.deleted;
        it = synced_.erase(it);
      } else {
        fail(Annotate(
            status,
            absl::StrCat("checkpoint sync: delete '", PathForMessage(uri), "' (removed from '",
                         PathForMessage(absl::StrCat(local_dir_, "/", it->first)), "')")));
        if (first) blocked.insert(it->first);
        ++it;
      }
    }
  };
  delete_gone(/*first=*/true);

  for (const auto& [key, file] : local) {
    auto known = synced_.find(key);
    if (known != synced_.end() && known->second.size == file.size &&
        known->second.mtime_ns == file.mtime_ns) {
      continue;
    }
    // A key in its way could not be deleted (reported above): uploaded now,
    // the store would hold both. Both are retried next round.
    if (HoldsAncestor(blocked, key) || FirstBelow(blocked, key) != nullptr) continue;
    std::string path = absl::StrCat(local_dir_, "/", key);
    std::string uri = absl::StrCat(prefix_, key);
    // Uploaded from the descriptor opened here (by its /proc name), so that
    // a link put in its place, or on its way, since the walk is not followed.
    UniqueFd opened = OpenFileBelow(root->get(), key);
    struct stat st;
    if (!opened.valid() || ::fstat(opened.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      const int err = opened.valid() ? 0 : errno;
      if (opened.valid() || err == ENOENT || err == ELOOP || err == ENOTDIR) {
        continue;  // removed or replaced meanwhile: the next call deletes it if it was known
      }
      fail(ErrnoError(err, absl::StrCat("checkpoint sync: open '", PathForMessage(path), "'")));
      continue;
    }
    absl::Status status = store_.PutFromFile(uri, absl::StrCat("/proc/self/fd/", opened.get()));
    if (!status.ok()) {
      // A failure other than a refusal (the URI) or a missing file may come
      // after the store took the object (an answer lost, a timeout): a new
      // key is then known, with a stamp no file has, so that it is uploaded
      // again, or deleted if the file goes meanwhile.
      if (!absl::IsInvalidArgument(status) && !absl::IsNotFound(status)) {
        synced_.try_emplace(key, Stamp{-1, -1});
      }
      fail(Annotate(status, absl::StrCat("checkpoint sync: upload '", PathForMessage(path),
                                         "' to '", PathForMessage(uri), "'")));
      continue;
    }
    ++stats.uploaded;
    stats.bytes_uploaded += file.size;
    // A racy file keeps an impossible size so that the next call uploads it
    // once more, when its stamp can be trusted.
    synced_[key] = Stamp{IsRacy(file.mtime_ns, walk_start_ns) ? -1 : file.size, file.mtime_ns};
  }

  // The other deletions come last: a checkpoint the script replaced (wrote
  // the new one, deleted the old) stays in the store until the new one is
  // there, so a crash during the upload leaves one of them.
  delete_gone(/*first=*/false);

  if (failures > 0) {
    if (failures == 1) return first_error;
    return absl::Status(first_error.code(), absl::StrCat(first_error.message(), " (and ",
                                                         failures - 1, " more failures)"));
  }
  return absl::OkStatus();
}

}  // namespace kiln
