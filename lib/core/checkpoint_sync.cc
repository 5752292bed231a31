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

#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/internal/files.h"
#include "core/internal/status_macros.h"

namespace kiln {
namespace {

// The object stores' temporary files (object_store.cc): never uploaded, never
// restored.
using internal::ErrnoError;
using internal::IsTempName;

// Local file systems stamp a write with the kernel's coarse clock, which moves
// in ticks of at most 10 ms. A file stamped in the tick during which we
// looked at it can be rewritten in that same tick with the same size and so
// the same (size, mtime): such a "racy" file is recorded as uploaded but not
// in sync, so the next SyncOnce uploads it again.
constexpr int64_t kRacyWindowNs = 20'000'000;

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }


// `status` with `context` before its message, same code.
absl::Status Annotate(const absl::Status& status, std::string_view context) {
  return absl::Status(status.code(), absl::StrCat(AbslView(context), ": ", status.message()));
}

int64_t RealtimeNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
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

// Refuses to restore `key` through a symbolic link (or a non-directory) in
// the local tree: every directory between `root` and the file must be a real
// directory or not exist yet (it is then created as one).
absl::Status CheckParentsAreDirectories(const std::string& root, std::string_view key,
                                        std::string_view uri) {
  for (size_t slash = key.find('/'); slash != std::string_view::npos;
       slash = key.find('/', slash + 1)) {
    std::string dir = absl::StrCat(root, "/", AbslView(key.substr(0, slash)));
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0) {
      if (errno == ENOENT) return absl::OkStatus();
      return ErrnoError(
          errno, absl::StrCat("checkpoint restore of '", AbslView(uri), "': stat '", dir, "'"));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint restore of '", AbslView(uri), "': local path '", dir, "' is ",
                       S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory",
                       "; refusing to write through it"));
    }
  }
  return absl::OkStatus();
}

struct LocalFile {
  int64_t size = 0;
  int64_t mtime_ns = 0;
};

// Adds the regular files (and symbolic links to regular files) below
// `root`/`rel` to `out`, keyed by relative path. Symbolic links to
// directories are not followed; temporary files are skipped.
absl::Status WalkLocal(const std::string& root, const std::string& rel,
                       std::map<std::string, LocalFile>& out) {
  std::string dir = rel.empty() ? root : absl::StrCat(root, "/", rel);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT && !rel.empty()) return absl::OkStatus();  // removed meanwhile
    return ErrnoError(errno, absl::StrCat("list directory '", dir, "'"));
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(d, &::closedir);
  for (;;) {
    errno = 0;
    struct dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      if (errno != 0) return ErrnoError(errno, absl::StrCat("list directory '", dir, "'"));
      return absl::OkStatus();
    }
    std::string_view name = entry->d_name;
    if (name == "." || name == ".." || IsTempName(name)) continue;
    std::string key = rel.empty() ? std::string(name) : absl::StrCat(rel, "/", AbslView(name));
    struct stat st;
    if (::fstatat(::dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoError(errno, absl::StrCat("stat '", root, "/", key, "'"));
    }
    if (S_ISDIR(st.st_mode)) {
      KILN_RETURN_IF_ERROR(WalkLocal(root, key, out));
      continue;
    }
    if (S_ISLNK(st.st_mode) && ::fstatat(::dirfd(d), entry->d_name, &st, 0) != 0) continue;
    if (!S_ISREG(st.st_mode)) continue;
    out[key] = LocalFile{static_cast<int64_t>(st.st_size), MtimeNs(st)};
  }
}

}  // namespace

CheckpointSync::CheckpointSync(ObjectStore& store, std::string prefix, std::string local_dir)
    : store_(store), prefix_(std::move(prefix)), local_dir_(std::move(local_dir)) {
  if (prefix_.empty() || prefix_.back() != '/') prefix_.push_back('/');
  while (local_dir_.size() > 1 && local_dir_.back() == '/') local_dir_.pop_back();
}

absl::Status CheckpointSync::Restore() {
  if (local_dir_.empty()) {
    return absl::InvalidArgumentError("checkpoint sync: the local directory is empty");
  }
  KILN_RETURN_IF_ERROR(internal::MakeDirs(local_dir_));
  absl::StatusOr<std::vector<ObjectInfo>> listed = store_.List(prefix_);
  if (!listed.ok()) {
    return Annotate(listed.status(), absl::StrCat("checkpoint restore: list '", prefix_, "'"));
  }
  // Every key is checked before anything is written.
  std::vector<std::pair<std::string, std::string>> todo;  // uri, key
  for (const ObjectInfo& info : *listed) {
    if (info.uri.compare(0, prefix_.size(), prefix_) != 0) continue;
    std::string key = info.uri.substr(prefix_.size());
    // A directory marker ("folder" objects of S3 consoles) holds no file.
    if (key.empty() || key.back() == '/') continue;
    if (!IsCleanKey(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint restore: object '", info.uri, "' has key '", key,
          "', which is not a clean relative path (absolute, '..', '.' or empty segments) and could "
          "land outside '",
          local_dir_, "'"));
    }
    if (HasTempSegment(key)) continue;
    todo.emplace_back(info.uri, std::move(key));
  }
  synced_.clear();
  for (const auto& [uri, key] : todo) {
    std::string path = absl::StrCat(local_dir_, "/", key);
    KILN_RETURN_IF_ERROR(CheckParentsAreDirectories(local_dir_, key, uri));
    absl::Status status = store_.GetToFile(uri, path);
    if (absl::IsNotFound(status)) continue;  // deleted since the listing
    if (!status.ok()) {
      return Annotate(status, absl::StrCat("checkpoint restore of '", uri, "' to '", path, "'"));
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return ErrnoError(errno,
                        absl::StrCat("checkpoint restore of '", uri, "': stat '", path, "'"));
    }
    synced_[key] = Stamp{static_cast<int64_t>(st.st_size), MtimeNs(st)};
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointSyncStats> CheckpointSync::SyncOnce() {
  if (local_dir_.empty()) {
    return absl::InvalidArgumentError("checkpoint sync: the local directory is empty");
  }
  KILN_RETURN_IF_ERROR(internal::MakeDirs(local_dir_));
  std::map<std::string, LocalFile> local;
  int64_t walk_start_ns = RealtimeNs();
  absl::Status walked = WalkLocal(local_dir_, "", local);
  int64_t walk_end_ns = RealtimeNs();
  // Without a complete picture nothing may be deleted: give up this round.
  if (!walked.ok()) return Annotate(walked, absl::StrCat("checkpoint sync of '", local_dir_, "'"));

  CheckpointSyncStats stats;
  absl::Status first_error;
  int failures = 0;
  auto fail = [&](absl::Status status) {
    if (failures++ == 0) first_error = std::move(status);
  };

  // Deletions first, so that a file replaced by a directory of the same name
  // is gone from a file store before the directory's files arrive.
  for (auto it = synced_.begin(); it != synced_.end();) {
    if (local.count(it->first) > 0) {
      ++it;
      continue;
    }
    std::string uri = absl::StrCat(prefix_, it->first);
    absl::Status status = store_.Delete(uri);
    if (status.ok()) {
      ++stats.deleted;
      it = synced_.erase(it);
    } else {
      fail(Annotate(status, absl::StrCat("checkpoint sync: delete '", uri, "' (removed from '",
                                         local_dir_, "/", it->first, "')")));
      ++it;
    }
  }

  for (const auto& [key, file] : local) {
    auto known = synced_.find(key);
    if (known != synced_.end() && known->second.size == file.size &&
        known->second.mtime_ns == file.mtime_ns) {
      continue;
    }
    std::string path = absl::StrCat(local_dir_, "/", key);
    std::string uri = absl::StrCat(prefix_, key);
    absl::Status status = store_.PutFromFile(uri, path);
    if (!status.ok()) {
      struct stat st;
      if (absl::IsNotFound(status) && ::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
        continue;  // removed meanwhile: the next call deletes it if it was known
      }
      fail(Annotate(status, absl::StrCat("checkpoint sync: upload '", path, "' to '", uri, "'")));
      continue;
    }
    ++stats.uploaded;
    stats.bytes_uploaded += file.size;
    bool racy = file.mtime_ns >= walk_start_ns - kRacyWindowNs &&
                file.mtime_ns <= walk_end_ns + kRacyWindowNs;
    // A racy file keeps an impossible size so that the next call uploads it
    // once more, when its stamp can be trusted.
    synced_[key] = Stamp{racy ? -1 : file.size, file.mtime_ns};
  }

  if (failures > 0) {
    if (failures == 1) return first_error;
    return absl::Status(first_error.code(), absl::StrCat(first_error.message(), " (and ",
                                                         failures - 1, " more failures)"));
  }
  return stats;
}

}  // namespace kiln
