// ObjectStore's default bodies, the file:// and in-memory stores, and the
// scheme registry (see include/kiln/object_store.h).
//
// Local files are always replaced the same way: a temporary file
// `.kiln-tmp-<random>` is created beside the target with O_EXCL, filled,
// (for the store's own objects) fsync'ed, and renamed over the target. A
// failure at any step unlinks the temporary file. List never reports those
// temporary files.
#include "kiln/object_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/internal/files.h"
#include "core/internal/json_value.h"
#include "core/internal/object_store_args.h"
#include "core/internal/status_macros.h"

namespace kiln {
namespace {

using internal::CheckMaxObjects;
using internal::CheckRange;

using internal::ErrnoError;
using internal::ForEachEntry;
using internal::kTempPrefix;
using internal::MakeDirs;
using internal::PathForMessage;

constexpr std::string_view kFileScheme = "file://";
constexpr size_t kChunkSize = size_t{1} << 20;  // Read() and buffered copies
constexpr int kTempNameAttempts = 16;

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }


using internal::UniqueFd;


std::string_view Dirname(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}


absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("write '", PathForMessage(path), "'"));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Copies `in` (from its current offset to EOF) to `out`: copy_file_range
// where the kernel supports it for these files, otherwise a buffered copy.
// `in_name`/`out_name` name the files in errors.
absl::Status CopyFd(int in, int out, const std::string& in_name, const std::string& out_name) {
  bool use_copy_file_range = true;
  while (use_copy_file_range) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, kChunkSize * 64, 0);
    if (n > 0) continue;
    if (n == 0) return absl::OkStatus();
    int err = errno;
    if (err == EINTR) continue;
    if (err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == EBADF ||
        err == ETXTBSY || err == EPERM) {
      // Not supported between these files: fall back. Nothing was copied by
      // the failed call, so the offsets are still right.
      use_copy_file_range = false;
      break;
    }
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
      return ErrnoError(err, absl::StrCat("write '", PathForMessage(out_name), "'"));
    }
    return ErrnoError(err, absl::StrCat("copy '", PathForMessage(in_name), "' to '",
                                        PathForMessage(out_name), "'"));
  }
  std::unique_ptr<char[]> buffer(new char[kChunkSize]);
  for (;;) {
    ssize_t n = ::read(in, buffer.get(), kChunkSize);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("read '", PathForMessage(in_name), "'"));
    }
    if (n == 0) return absl::OkStatus();
    KILN_RETURN_IF_ERROR(
        WriteAll(out, std::string_view(buffer.get(), static_cast<size_t>(n)), out_name));
  }
}

std::string TempPathIn(std::string_view dir) {
  // Uniqueness only (O_EXCL catches the rest): no behaviour depends on it.
  thread_local std::mt19937_64 rng{(uint64_t{std::random_device{}()} << 32) ^
                                   std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(kTempPrefix);
  uint64_t r = rng();
  for (int i = 0; i < 16; ++i) name.push_back(kHex[(r >> (4 * i)) & 0xf]);
  if (dir == "/") return absl::StrCat("/", name);
  return absl::StrCat(AbslView(dir), "/", name);
}

// fsyncs directory `dir`, so that the entries made in it (a rename, a new
// directory) survive a crash. A file system that cannot sync a directory
// (EINVAL) is taken as having nothing to sync.
absl::Status SyncDirectory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    return ErrnoError(errno, absl::StrCat("open directory '", PathForMessage(dir), "' to sync it"));
  }
  if (::fsync(fd.get()) != 0 && errno != EINVAL) {
    return ErrnoError(errno, absl::StrCat("fsync directory '", PathForMessage(dir), "'"));
  }
  return absl::OkStatus();
}

// Creates or replaces the file `path` atomically: `fill` writes the content
// into a temporary file beside it, which is then (when `durable`) fsync'ed and
// renamed over `path`. Parent directories are created. When `durable`, the
// rename and the directories created are synced too, so that once this
// returns OK a crash keeps the new file (an error then may come after the
// rename: the new file may be in place). On any failure before the rename the
// temporary file is removed; the error names `path`.
absl::Status ReplaceFile(const std::string& path, bool durable,
                         absl::FunctionRef<absl::Status(int fd, const std::string& path)> fill) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("'", PathForMessage(path), "' names a directory, not a file"));
  }
  std::string dir(Dirname(path));
  // The deepest directory on the way that exists already: those below it are
  // new entries that a durable write syncs as well.
  std::string existing = dir;
  if (durable) {
    struct stat st;
    while (existing != "/" && existing != "." && ::stat(existing.c_str(), &st) != 0 &&
           errno == ENOENT) {
      existing = std::string(Dirname(existing));
    }
  }
  KILN_RETURN_IF_ERROR(MakeDirs(dir));
  std::string temp;
  UniqueFd fd;
  for (int attempt = 0; fd.get() < 0; ++attempt) {
    temp = TempPathIn(dir);
    int raw = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (raw >= 0) {
      fd = UniqueFd(raw);
    } else if (errno != EEXIST || attempt + 1 >= kTempNameAttempts) {
      return ErrnoError(errno, absl::StrCat("create a temporary file for '", PathForMessage(path),
                                            "' in '", PathForMessage(dir), "'"));
    }
  }
  absl::Status status = fill(fd.get(), path);
  if (status.ok() && durable && ::fsync(fd.get()) != 0) {
    status = ErrnoError(errno, absl::StrCat("fsync '", PathForMessage(path), "'"));
  }
  if (int err = fd.Close(); status.ok() && err != 0) {
    status = ErrnoError(err, absl::StrCat("close '", PathForMessage(path), "'"));
  }
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno,
                        absl::StrCat("rename a temporary file over '", PathForMessage(path), "'"));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  if (durable) {
    for (std::string d = dir;; d = std::string(Dirname(d))) {
      if (absl::Status synced = SyncDirectory(d); !synced.ok()) {
        return absl::Status(synced.code(), absl::StrCat("'", PathForMessage(path),
                                                        "' is in place but may not survive a "
                                                        "crash: ",
                                                        synced.message()));
      }
      if (d == existing || d == "/" || d == "." || d.empty()) break;
    }
  }
  return status;
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data, bool durable) {
  return ReplaceFile(path, durable,
                     [&](int fd, const std::string& name) { return WriteAll(fd, data, name); });
}

// Opens a regular file for reading. `name` is what errors call it (the URI for
// an object, the path for a local file). A missing file or a directory is
// NotFound. Returns the size in `*size`.
absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path, std::string_view name,
                                         int64_t* size) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then
  // refused below); reads of regular files ignore the flag.
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (raw < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("'", PathForMessage(name), "' not found"));
    }
    return ErrnoError(err, absl::StrCat("open '", PathForMessage(name), "'"));
  }
  UniqueFd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    return ErrnoError(errno, absl::StrCat("stat '", PathForMessage(name), "'"));
  if (!S_ISREG(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("'", PathForMessage(name), "' is not a regular file (",
                                            S_ISDIR(st.st_mode) ? "a directory" : "a special file",
                                            ")"));
  }
  if (size != nullptr) *size = static_cast<int64_t>(st.st_size);
  return fd;
}

absl::StatusOr<std::string> ReadWholeFile(int fd, int64_t size_hint, std::string_view name) {
  std::string data;
  data.resize(static_cast<size_t>(std::max<int64_t>(size_hint, 0)) + 1);
  size_t used = 0;
  for (;;) {
    if (used == data.size()) data.resize(data.size() * 2);
    ssize_t n = ::read(fd, data.data() + used, data.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("read '", PathForMessage(name), "'"));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  data.resize(used);
  return data;
}

// True when `uri` has a scheme: `<scheme>://` with scheme = ALPHA *(ALPHA /
// DIGIT / "+" / "-" / ".") (RFC 3986). Sets `*scheme`.
bool ParseScheme(std::string_view uri, std::string_view* scheme) {
  size_t end = uri.find("://");
  if (end == std::string_view::npos || end == 0) return false;
  std::string_view s = uri.substr(0, end);
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.') return false;
  }
  *scheme = s;
  return true;
}

// ---------------------------------------------------------------------------
// File store.

// The part of `data` a range names (empty past the end).
std::string Slice(std::string_view data, int64_t offset, int64_t length) {
  if (offset >= static_cast<int64_t>(data.size())) return "";
  return std::string(data.substr(static_cast<size_t>(offset), static_cast<size_t>(length)));
}

class FileObjectStore final : public ObjectStore {
 public:
  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(prefix, /*object=*/false));
    std::vector<ObjectInfo> out;
    // The deepest directory that is certainly a prefix: everything up to the
    // last '/'. Below it only subdirectories compatible with the prefix are
    // entered.
    std::string dir = path.substr(0, path.rfind('/') + 1);
    KILN_RETURN_IF_ERROR(Walk(dir, path, /*top=*/true, out));
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.uri < b.uri; });
    return out;
  }

  absl::StatusOr<std::string> Get(std::string_view uri) override {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/true));
    int64_t size = 0;
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, uri, &size));
    return ReadWholeFile(fd.get(), size, uri);
  }

  absl::Status Put(std::string_view uri, std::string_view data) override {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/true));
    RemoveIfEmptyDirectory(path);
    return WriteFileAtomically(path, data, /*durable=*/true);
  }

  absl::Status Delete(std::string_view uri) override {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/true));
    if (::unlink(path.c_str()) == 0) return absl::OkStatus();
    int err = errno;
    // Missing, or a directory (which is not an object): nothing to delete.
    if (err == ENOENT || err == ENOTDIR || err == EISDIR) return absl::OkStatus();
    return ErrnoError(err, absl::StrCat("delete '", PathForMessage(path), "'"));
  }

  absl::Status Read(std::string_view uri,
                    absl::FunctionRef<absl::Status(std::string_view chunk)> sink) override {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/true));
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, uri, nullptr));
    std::unique_ptr<char[]> buffer(new char[kChunkSize]);
    for (;;) {
      ssize_t n = ::read(fd.get(), buffer.get(), kChunkSize);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, absl::StrCat("read '", PathForMessage(uri), "'"));
      }
      if (n == 0) return absl::OkStatus();
      KILN_RETURN_IF_ERROR(sink(std::string_view(buffer.get(), static_cast<size_t>(n))));
    }
  }

  absl::StatusOr<std::string> ReadRange(std::string_view uri, int64_t offset,
                                        int64_t length) override {
    KILN_RETURN_IF_ERROR(CheckRange(uri, offset, length));
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/true));
    int64_t size = 0;
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, uri, &size));
    if (offset >= size) return std::string();
    std::string out(static_cast<size_t>(std::min(length, size - offset)), '\0');
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd.get(), out.data() + done, out.size() - done,
                          static_cast<off_t>(offset + static_cast<int64_t>(done)));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, absl::StrCat("read '", PathForMessage(uri), "'"));
      }
      if (n == 0) break;  // shrunk meanwhile
      done += static_cast<size_t>(n);
    }
    out.resize(done);
    return out;
  }

  absl::Status GetToFile(std::string_view uri, const std::string& path) override {
    KILN_ASSIGN_OR_RETURN(std::string source, PathOf(uri, /*object=*/true));
    KILN_ASSIGN_OR_RETURN(UniqueFd in, OpenRegularFile(source, uri, nullptr));
    std::string uri_name(uri);
    return ReplaceFile(path, /*durable=*/false, [&](int out, const std::string& name) {
      return CopyFd(in.get(), out, uri_name, name);
    });
  }

  absl::Status PutFromFile(std::string_view uri, const std::string& path) override {
    KILN_ASSIGN_OR_RETURN(std::string target, PathOf(uri, /*object=*/true));
    KILN_ASSIGN_OR_RETURN(UniqueFd in, OpenRegularFile(path, path, nullptr));
    RemoveIfEmptyDirectory(target);
    return ReplaceFile(target, /*durable=*/true, [&](int out, const std::string& name) {
      return CopyFd(in.get(), out, path, name);
    });
  }

 private:
  // A directory where an object is to be written that holds only
  // directories holds no object (the objects once below it were deleted,
  // which leaves their folders): it goes, so that the key can be an object
  // again, as on S3. A directory holding anything else (a file, a link) stays
  // whole, and the write fails naming it. Only rmdir removes anything, so a
  // file that appears meanwhile stops the removal where it is, and what is
  // gone by then was empty.
  static void RemoveIfEmptyDirectory(const std::string& path) {
    if (::rmdir(path.c_str()) == 0 || (errno != ENOTEMPTY && errno != EEXIST)) return;
    // Only folders below? (FTW_PHYS: a link is an entry, never followed.)
    auto folders_only = [](const char*, const struct stat*, int type, struct FTW*) {
      return type == FTW_D || type == FTW_DP ? 0 : 1;
    };
    if (::nftw(path.c_str(), folders_only, kWalkDescriptors, FTW_PHYS) != 0) return;
    auto remove = [](const char* folder, const struct stat*, int, struct FTW*) {
      return ::rmdir(folder);
    };
    ::nftw(path.c_str(), remove, kWalkDescriptors, FTW_PHYS | FTW_DEPTH);
  }
  // Directories nftw keeps open at once, however deep the tree.
  static constexpr int kWalkDescriptors = 8;

  // The absolute path of a file:// URI. `object`: the URI names an object, so
  // it may not end in '/'.
  static absl::StatusOr<std::string> PathOf(std::string_view uri, bool object) {
    if (uri.substr(0, kFileScheme.size()) != kFileScheme || uri.size() == kFileScheme.size() ||
        uri[kFileScheme.size()] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("file object store: '", PathForMessage(uri),
                       "' is not a file:// URI with an absolute path (file:///dir/name)"));
    }
    std::string_view path = uri.substr(kFileScheme.size());
    if (path.find('\0') != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("file object store: URI '", PathForMessage(uri), "' contains a NUL byte"));
    }
    if (object && path.back() == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("file object store: '", PathForMessage(uri),
                       "' ends in '/': it names a directory, not an object"));
    }
    return std::string(path);
  }

  // Adds the regular files below `dir` (which ends in '/') whose path starts
  // with `prefix`. A missing `dir` at the top adds nothing.
  static absl::Status Walk(const std::string& dir, const std::string& prefix, bool top,
                           std::vector<ObjectInfo>& out) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      int err = errno;
      if (err == ENOENT || (top && err == ENOTDIR)) return absl::OkStatus();
      return ErrnoError(err, absl::StrCat("list directory '", PathForMessage(dir), "'"));
    }
    std::unique_ptr<DIR, int (*)(DIR*)> closer(d, &::closedir);
    return ForEachEntry(d, dir, [&](std::string_view name) -> absl::Status {
      std::string full = absl::StrCat(dir, AbslView(name));
      // Only a name that can still lead to the prefix (or already has it).
      size_t common = std::min(full.size(), prefix.size());
      if (full.compare(0, common, prefix, 0, common) != 0) return absl::OkStatus();
      struct stat st;
      if (::fstatat(::dirfd(d), name.data(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return absl::OkStatus();  // removed meanwhile
        return ErrnoError(errno, absl::StrCat("stat '", PathForMessage(full), "'"));
      }
      if (S_ISDIR(st.st_mode)) {
        // Symbolic links to directories are not followed (no cycles).
        std::string sub = absl::StrCat(full, "/");
        common = std::min(sub.size(), prefix.size());
        if (sub.compare(0, common, prefix, 0, common) != 0) return absl::OkStatus();
        return Walk(sub, prefix, /*top=*/false, out);
      }
      if (S_ISLNK(st.st_mode) && ::fstatat(::dirfd(d), name.data(), &st, 0) != 0) {
        return absl::OkStatus();  // dangling link
      }
      if (!S_ISREG(st.st_mode) || full.size() < prefix.size()) return absl::OkStatus();
      out.push_back(
          ObjectInfo{absl::StrCat(AbslView(kFileScheme), full), static_cast<int64_t>(st.st_size)});
      return absl::OkStatus();
    });
  }
};

// ---------------------------------------------------------------------------
// In-memory store.

class InMemoryObjectStore final : public ObjectStore {
 public:
  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    return ListUpTo(prefix, std::numeric_limits<int64_t>::max());
  }

  absl::StatusOr<std::vector<ObjectInfo>> ListFirst(std::string_view prefix,
                                                    int64_t max_objects) override {
    KILN_RETURN_IF_ERROR(CheckMaxObjects(prefix, max_objects));
    return ListUpTo(prefix, max_objects);
  }

  absl::StatusOr<std::string> Get(std::string_view uri) override {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, Find(uri));
    return *data;
  }

  absl::Status Put(std::string_view uri, std::string_view data) override {
    KILN_RETURN_IF_ERROR(CheckUri(uri));
    auto value = std::make_shared<const std::string>(data);
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(uri);
    if (it == objects_.end()) {
      objects_.emplace(std::string(uri), std::move(value));
    } else {
      it->second = std::move(value);
    }
    return absl::OkStatus();
  }

  absl::Status Delete(std::string_view uri) override {
    KILN_RETURN_IF_ERROR(CheckUri(uri));
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(uri);
    if (it != objects_.end()) objects_.erase(it);
    return absl::OkStatus();
  }

  // Streams from a snapshot of the object, outside the lock (the sink may call
  // the store).
  absl::Status Read(std::string_view uri,
                    absl::FunctionRef<absl::Status(std::string_view chunk)> sink) override {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, Find(uri));
    std::string_view rest = *data;
    while (!rest.empty()) {
      std::string_view chunk = rest.substr(0, kChunkSize);
      rest.remove_prefix(chunk.size());
      KILN_RETURN_IF_ERROR(sink(chunk));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadRange(std::string_view uri, int64_t offset,
                                        int64_t length) override {
    KILN_RETURN_IF_ERROR(CheckRange(uri, offset, length));
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, Find(uri));
    return Slice(*data, offset, length);
  }

  absl::Status GetToFile(std::string_view uri, const std::string& path) override {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, Find(uri));
    return WriteFileAtomically(path, *data, /*durable=*/false);
  }

 private:
  static absl::Status CheckUri(std::string_view uri) {
    std::string_view scheme;
    if (!ParseScheme(uri, &scheme)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "in-memory object store: '", PathForMessage(uri), "' is not a URI (<scheme>://...)"));
    }
    return absl::OkStatus();
  }

  std::vector<ObjectInfo> ListUpTo(std::string_view prefix, int64_t max_objects) {
    std::vector<ObjectInfo> out;
    absl::MutexLock lock(&mu_);
    for (auto it = objects_.lower_bound(prefix);
         it != objects_.end() && static_cast<int64_t>(out.size()) < max_objects &&
         std::string_view(it->first).substr(0, prefix.size()) == prefix;
         ++it) {
      out.push_back(ObjectInfo{it->first, static_cast<int64_t>(it->second->size())});
    }
    return out;
  }

  absl::StatusOr<std::shared_ptr<const std::string>> Find(std::string_view uri) {
    KILN_RETURN_IF_ERROR(CheckUri(uri));
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(uri);
    if (it == objects_.end()) {
      return absl::NotFoundError(absl::StrCat("'", PathForMessage(uri), "' not found"));
    }
    return it->second;
  }

  absl::Mutex mu_;
  // Values are immutable once stored; a Put swaps in a new one.
  std::map<std::string, std::shared_ptr<const std::string>, std::less<>> objects_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

// ---------------------------------------------------------------------------
// ObjectStore's default bodies.

absl::StatusOr<std::vector<ObjectInfo>> ObjectStore::ListFirst(std::string_view prefix,
                                                               int64_t max_objects) {
  KILN_RETURN_IF_ERROR(CheckMaxObjects(prefix, max_objects));
  KILN_ASSIGN_OR_RETURN(std::vector<ObjectInfo> all, List(prefix));
  if (static_cast<int64_t>(all.size()) > max_objects) all.resize(static_cast<size_t>(max_objects));
  return all;
}

absl::Status ObjectStore::Read(std::string_view uri,
                               absl::FunctionRef<absl::Status(std::string_view chunk)> sink) {
  KILN_ASSIGN_OR_RETURN(std::string data, Get(uri));
  if (data.empty()) return absl::OkStatus();
  return sink(data);
}

absl::StatusOr<std::string> ObjectStore::ReadRange(std::string_view uri, int64_t offset,
                                                   int64_t length) {
  KILN_RETURN_IF_ERROR(CheckRange(uri, offset, length));
  KILN_ASSIGN_OR_RETURN(std::string data, Get(uri));
  return Slice(data, offset, length);
}

absl::Status ObjectStore::GetToFile(std::string_view uri, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string data, Get(uri));
  return WriteFileAtomically(path, data, /*durable=*/false);
}

absl::Status ObjectStore::PutFromFile(std::string_view uri, const std::string& path) {
  int64_t size = 0;
  KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, path, &size));
  KILN_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(fd.get(), size, path));
  fd.Close();
  return Put(uri, data);
}

std::unique_ptr<ObjectStore> NewFileObjectStore() { return std::make_unique<FileObjectStore>(); }

std::unique_ptr<ObjectStore> NewInMemoryObjectStore() {
  return std::make_unique<InMemoryObjectStore>();
}

// ---------------------------------------------------------------------------
// ObjectStores.

void ObjectStores::Register(std::string scheme, ObjectStore* store) {
  absl::MutexLock lock(&mu_);
  if (store == nullptr) {
    stores_.erase(scheme);
  } else {
    stores_[std::move(scheme)] = store;
  }
}

absl::StatusOr<ObjectStore*> ObjectStores::For(std::string_view uri) const {
  std::string_view scheme;
  if (!ParseScheme(uri, &scheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", PathForMessage(uri), "' has no URI scheme (expected <scheme>://...)"));
  }
  absl::MutexLock lock(&mu_);
  auto it = stores_.find(scheme);
  if (it == stores_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("no object store is registered for scheme '",
                                                      PathForMessage(scheme), "' (URI '",
                                                      PathForMessage(uri), "')"));
  }
  return it->second;
}

// ---------------------------------------------------------------------------
// Argument checks shared with the other stores (core/internal/object_store_args.h).

namespace internal {

absl::Status CheckRange(std::string_view uri, int64_t offset, int64_t length) {
  if (offset < 0 || length < 0) {
    return absl::InvalidArgumentError(absl::StrCat("reading '", PathForMessage(uri), "': offset ",
                                                   offset, " and length ", length,
                                                   " of a range must not be negative"));
  }
  return absl::OkStatus();
}

absl::Status CheckMaxObjects(std::string_view prefix, int64_t max_objects) {
  if (max_objects < 1) {
    return absl::InvalidArgumentError(absl::StrCat("listing '", PathForMessage(prefix),
                                                   "': max_objects ", max_objects,
                                                   " must be at least 1"));
  }
  return absl::OkStatus();
}

}  // namespace internal

}  // namespace kiln
