// ObjectStore's default bodies, the file:// and in-memory stores, and the
// scheme registry (see include/kiln/object_store.h).
//
// Local files are always replaced the same way: a temporary file
// `.kiln-tmp-<random>` is created beside the target with O_EXCL and locked
// (flock) until the end, filled, (for the store's own objects) fsync'ed, and
// renamed over the target. A failure at any step unlinks the temporary file.
// List never reports those temporary files. A process killed meanwhile
// leaves its temporary file unlocked: the store's first write into that
// directory removes it (SweepStaleTemporaries). Copies keep holes as holes
// (CopyFd).
//
// A confined file store (FileObjectStoreOptions::allowed_roots) checks each
// URI twice: by path before anything is opened or made (ResolveExisting:
// the links of its existing part resolved), and by the file or directory
// actually opened (its /proc/self/fd link), so a link swapped in between
// reaches nothing outside the roots.
#include "kiln/object_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kiln/plugin/files.h"
#include "kiln/plugin/json_value.h"
#include "kiln/plugin/object_store_checks.h"
#include "kiln/plugin/status_macros.h"

namespace kiln {
namespace {



constexpr std::string_view kFileScheme = "file://";
constexpr size_t kChunkSize = size_t{1} << 20;  // Read() and buffered copies
constexpr int kTempNameAttempts = 16;

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }




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

// Copies bytes [offset, offset + length) of `in` to the same offsets of
// `out` (length < 0: up to `in`'s end): copy_file_range where the kernel
// supports it for these files, otherwise pread/pwrite. Returns the offset
// where the copy ended (where `in` ended, when it ended first).
// `in_name`/`out_name` name the files in errors.
absl::StatusOr<off_t> CopyRange(int in, int out, off_t offset, off_t length,
                                const std::string& in_name, const std::string& out_name) {
  off_t in_off = offset;
  off_t out_off = offset;
  auto left = [&]() -> size_t {
    if (length < 0) return kChunkSize * 64;
    return static_cast<size_t>(std::min<off_t>(offset + length - in_off, kChunkSize * 64));
  };
  bool use_copy_file_range = true;
  while (use_copy_file_range && left() > 0) {
    ssize_t n = ::copy_file_range(in, &in_off, out, &out_off, left(), 0);
    if (n > 0) continue;
    if (n == 0) return in_off;
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
  std::unique_ptr<char[]> buffer;
  while (left() > 0) {
    if (buffer == nullptr) buffer.reset(new char[kChunkSize]);
    ssize_t n = ::pread(in, buffer.get(), std::min(left(), kChunkSize), in_off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("read '", PathForMessage(in_name), "'"));
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::pwrite(out, buffer.get() + done, static_cast<size_t>(n - done),
                           out_off + done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, absl::StrCat("write '", PathForMessage(out_name), "'"));
      }
      done += w;
    }
    in_off += n;
    out_off += n;
  }
  return in_off;
}

// Copies `in` (from offset 0 to its end) into the empty file `out`, holes as
// holes: only the extents SEEK_DATA finds are copied, and the size is set
// last, so a sparse file stays sparse. Where the file system cannot tell
// (SEEK_DATA unsupported) the rest is copied whole. `in_name`/`out_name`
// name the files in errors.
absl::Status CopyFd(int in, int out, const std::string& in_name, const std::string& out_name) {
  off_t end = 0;  // the copy holds `in`'s bytes [0, end)
  for (;;) {
    off_t data = ::lseek(in, end, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // no data after `end`
    off_t hole = data < 0 ? -1 : ::lseek(in, data, SEEK_HOLE);
    if (hole < 0) {
      KILN_ASSIGN_OR_RETURN(end, CopyRange(in, out, end, -1, in_name, out_name));
      break;
    }
    KILN_ASSIGN_OR_RETURN(off_t copied, CopyRange(in, out, data, hole - data, in_name, out_name));
    end = copied;
    if (copied < hole) break;  // `in` shrank meanwhile
  }
  // The trailing hole (or a file that is all hole).
  struct stat st;
  if (::fstat(in, &st) != 0) {
    return ErrnoError(errno, absl::StrCat("stat '", PathForMessage(in_name), "'"));
  }
  if (st.st_size > end && ::ftruncate(out, st.st_size) != 0) {
    return ErrnoError(errno, absl::StrCat("write '", PathForMessage(out_name), "'"));
  }
  return absl::OkStatus();
}

std::string TempName() {
  // Uniqueness only (O_EXCL catches the rest): no behaviour depends on it.
  thread_local std::mt19937_64 rng{(uint64_t{std::random_device{}()} << 32) ^
                                   std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(kTempPrefix);
  uint64_t r = rng();
  for (int i = 0; i < 16; ++i) name.push_back(kHex[(r >> (4 * i)) & 0xf]);
  return name;
}

// Whether the entry `name` of directory `dir_fd` is still the file open as
// `fd` (not removed, not replaced).
bool StillNamed(int dir_fd, const char* name, int fd) {
  struct stat named, open;
  return ::fstatat(dir_fd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && ::fstat(fd, &open) == 0 &&
         named.st_dev == open.st_dev && named.st_ino == open.st_ino;
}

// Removes the temporary files in directory `dir_fd` that no writer holds
// locked: those of a process killed before its rename. Best effort: a file
// that cannot be opened or removed stays (and stays out of listings). Each
// is locked before it is removed, so a writer that has just created it
// (and not yet locked it) finds it gone and takes another name.
void SweepStaleTemporaries(int dir_fd) {
  UniqueFd list_fd(::dup(dir_fd));
  if (list_fd.get() < 0) return;
  DIR* d = ::fdopendir(list_fd.get());
  if (d == nullptr) return;
  list_fd.release();
  std::unique_ptr<DIR, int (*)(DIR*)> closer(d, &::closedir);
  ::rewinddir(d);
  std::vector<std::string> stale;
  for (;;) {
    errno = 0;
    const struct dirent* entry = ::readdir(d);
    if (entry == nullptr) break;
    if (IsTempName(entry->d_name)) stale.emplace_back(entry->d_name);
  }
  for (const std::string& name : stale) {
    UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a live writer's
    if (StillNamed(dir_fd, name.c_str(), fd.get())) ::unlinkat(dir_fd, name.c_str(), 0);
  }
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

struct ReplaceOptions {
  // fsync the file, the rename and the directories created (the store's own
  // objects); else scratch data that can be fetched again.
  bool durable = false;
  // Remove stale temporary files from the target's directory first.
  bool sweep = false;
  // Called with the target's directory, opened, before anything is made in
  // it; an error stops the write (a confined store's check). Null: none.
  const std::function<absl::Status(int dir_fd)>* check_dir = nullptr;
};

// Creates or replaces the file `path` atomically: `fill` writes the content
// into a temporary file beside it, which is then (when durable) fsync'ed and
// renamed over `path`. Parent directories are created. When durable, the
// rename and the directories created are synced too, so that once this
// returns OK a crash keeps the new file (an error then may come after the
// rename: the new file may be in place). On any failure before the rename the
// temporary file is removed; the error names `path`.
absl::Status ReplaceFile(const std::string& path, const ReplaceOptions& options,
                         absl::FunctionRef<absl::Status(int fd, const std::string& path)> fill) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("'", PathForMessage(path), "' names a directory, not a file"));
  }
  const bool durable = options.durable;
  std::string dir(Dirname(path));
  const std::string base = path.substr(path.rfind('/') + 1);
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
  // The file is made and renamed relative to this descriptor: the directory
  // checked is the one written.
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) {
    return ErrnoError(errno, absl::StrCat("open directory '", PathForMessage(dir), "' to write '",
                                          PathForMessage(path), "'"));
  }
  if (options.check_dir != nullptr) KILN_RETURN_IF_ERROR((*options.check_dir)(dir_fd.get()));
  if (options.sweep) SweepStaleTemporaries(dir_fd.get());
  std::string temp;
  UniqueFd fd;
  for (int attempt = 0; fd.get() < 0; ++attempt) {
    temp = TempName();
    UniqueFd made(
        ::openat(dir_fd.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (made.get() < 0) {
      if (errno != EEXIST || attempt + 1 >= kTempNameAttempts) {
        return ErrnoError(errno, absl::StrCat("create a temporary file for '",
                                              PathForMessage(path), "' in '", PathForMessage(dir),
                                              "'"));
      }
      continue;
    }
    // Locked, and still ours: a sweep that took it between the open and the
    // lock removes it; then another name.
    if (::flock(made.get(), LOCK_EX | LOCK_NB) == 0 &&
        StillNamed(dir_fd.get(), temp.c_str(), made.get())) {
      fd = std::move(made);
    } else if (attempt + 1 >= kTempNameAttempts) {
      return absl::UnavailableError(absl::StrCat("create a temporary file for '",
                                                 PathForMessage(path), "' in '",
                                                 PathForMessage(dir), "': each was taken away"));
    }
  }
  absl::Status status = fill(fd.get(), path);
  if (status.ok() && durable && ::fsync(fd.get()) != 0) {
    status = ErrnoError(errno, absl::StrCat("fsync '", PathForMessage(path), "'"));
  }
  // The lock lives on in `lock` until the rename is done; `fd` closes now,
  // for the errors only close() reports.
  UniqueFd lock(::dup(fd.get()));
  if (int err = fd.Close(); status.ok() && err != 0) {
    status = ErrnoError(err, absl::StrCat("close '", PathForMessage(path), "'"));
  }
  if (status.ok() && ::renameat(dir_fd.get(), temp.c_str(), dir_fd.get(), base.c_str()) != 0) {
    status = ErrnoError(errno,
                        absl::StrCat("rename a temporary file over '", PathForMessage(path), "'"));
  }
  if (!status.ok()) {
    ::unlinkat(dir_fd.get(), temp.c_str(), 0);
    return status;
  }
  lock.reset();
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

absl::Status WriteFileAtomically(const std::string& path, std::string_view data,
                                 const ReplaceOptions& options) {
  return ReplaceFile(path, options,
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

// Whether the absolute path `path` is `root` or below it (`root` without a
// trailing '/', "/" alone for the whole tree).
bool IsWithin(std::string_view path, std::string_view root) {
  if (root == "/") return !path.empty() && path.front() == '/';
  return path.size() >= root.size() && path.compare(0, root.size(), root) == 0 &&
         (path.size() == root.size() || path[root.size()] == '/');
}

// The path the open descriptor `fd` is at (its /proc/self/fd link: links
// resolved, as the kernel reached it). `name` names the file in errors.
absl::StatusOr<std::string> PathOfFd(int fd, std::string_view name) {
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  char buffer[PATH_MAX];
  ssize_t n = ::readlink(link.c_str(), buffer, sizeof buffer);
  if (n < 0 || static_cast<size_t>(n) >= sizeof buffer) {
    return ErrnoError(n < 0 ? errno : ENAMETOOLONG,
                      absl::StrCat("find where '", PathForMessage(name), "' is (", link, ")"));
  }
  return std::string(buffer, static_cast<size_t>(n));
}

// `path` (absolute) with the symbolic links of its longest existing leading
// part resolved (realpath), the rest appended as it is (a trailing '/'
// kept). `name` names the path in errors (any failure but a missing part).
absl::StatusOr<std::string> ResolveExisting(std::string_view path, std::string_view name) {
  const bool slash = path.size() > 1 && path.back() == '/';
  std::string head(path);
  while (head.size() > 1 && head.back() == '/') head.pop_back();
  std::string tail;
  for (;;) {
    char real[PATH_MAX];
    if (::realpath(head.c_str(), real) != nullptr) {
      std::string out = real;
      if (!tail.empty()) absl::StrAppend(&out, out == "/" ? "" : "/", tail);
      if (slash && out != "/") out.push_back('/');
      return out;
    }
    int err = errno;
    if ((err != ENOENT && err != ENOTDIR) || head == "/") {
      return ErrnoError(err, absl::StrCat("resolve '", PathForMessage(name), "'"));
    }
    size_t cut = head.rfind('/');
    tail = tail.empty() ? head.substr(cut + 1) : absl::StrCat(head.substr(cut + 1), "/", tail);
    head = cut == 0 ? "/" : head.substr(0, cut);
  }
}

class FileObjectStore final : public ObjectStore {
 public:
  // `roots`: real paths without a trailing '/' ("/" alone); empty: unconfined.
  explicit FileObjectStore(std::vector<std::string> roots = {}) : roots_(std::move(roots)) {}

  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(prefix, /*object=*/false));
    std::vector<ObjectInfo> out;
    // The deepest directory that is certainly a prefix: everything up to the
    // last '/'. Below it only subdirectories compatible with the prefix are
    // entered.
    std::string dir = path.substr(0, path.rfind('/') + 1);
    KILN_RETURN_IF_ERROR(CheckSegments(prefix, path));
    KILN_ASSIGN_OR_RETURN(std::string real_dir, ResolveExisting(dir, prefix));
    KILN_RETURN_IF_ERROR(Confine(prefix, real_dir));
    // Links in the tree may lead only into the folder itself.
    while (real_dir.size() > 1 && real_dir.back() == '/') real_dir.pop_back();
    KILN_RETURN_IF_ERROR(Walk(dir, path, real_dir, /*top=*/true, out));
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.uri < b.uri; });
    return out;
  }

  absl::StatusOr<std::string> Get(std::string_view uri) override {
    int64_t size = 0;
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenObject(uri, &size));
    return ReadWholeFile(fd.get(), size, uri);
  }

  absl::Status Put(std::string_view uri, std::string_view data) override {
    KILN_ASSIGN_OR_RETURN(std::string path, WritablePathOf(uri));
    RemoveIfEmptyDirectory(path);
    std::function<absl::Status(int)> check = CheckDir(uri);
    return WriteFileAtomically(path, data, StoreWrite(path, check));
  }

  absl::Status Delete(std::string_view uri) override {
    KILN_ASSIGN_OR_RETURN(std::string path, WritablePathOf(uri));
    UniqueFd dir_fd(AT_FDCWD);  // (not a descriptor: never closed)
    std::string name = path;
    if (!roots_.empty()) {
      // Removed from the directory checked.
      const std::string dir(Dirname(path));
      dir_fd = UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (dir_fd.get() < 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR) return absl::OkStatus();
        return ErrnoError(err, absl::StrCat("delete '", PathForMessage(path), "'"));
      }
      KILN_RETURN_IF_ERROR(CheckDir(uri)(dir_fd.get()));
      name = path.substr(path.rfind('/') + 1);
    }
    if (::unlinkat(dir_fd.get(), name.c_str(), 0) == 0) return absl::OkStatus();
    int err = errno;
    // Missing, or a directory (which is not an object): nothing to delete.
    if (err == ENOENT || err == ENOTDIR || err == EISDIR) return absl::OkStatus();
    return ErrnoError(err, absl::StrCat("delete '", PathForMessage(path), "'"));
  }

  absl::Status Read(std::string_view uri,
                    absl::FunctionRef<absl::Status(std::string_view chunk)> sink) override {
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenObject(uri, nullptr));
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
    int64_t size = 0;
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenObject(uri, &size));
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
    KILN_ASSIGN_OR_RETURN(UniqueFd in, OpenObject(uri, nullptr));
    std::string uri_name(uri);
    return ReplaceFile(path, ReplaceOptions{}, [&](int out, const std::string& name) {
      return CopyFd(in.get(), out, uri_name, name);
    });
  }

  absl::Status PutFromFile(std::string_view uri, const std::string& path) override {
    KILN_ASSIGN_OR_RETURN(std::string target, WritablePathOf(uri));
    KILN_ASSIGN_OR_RETURN(UniqueFd in, OpenRegularFile(path, path, nullptr));
    RemoveIfEmptyDirectory(target);
    std::function<absl::Status(int)> check = CheckDir(uri);
    return ReplaceFile(target, StoreWrite(target, check), [&](int out, const std::string& name) {
      return CopyFd(in.get(), out, path, name);
    });
  }

  absl::StatusOr<std::string> LocalPath(std::string_view uri) override {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/false));
    KILN_RETURN_IF_ERROR(CheckSegments(uri, path));
    KILN_ASSIGN_OR_RETURN(std::string real, ResolveExisting(path, uri));
    KILN_RETURN_IF_ERROR(Confine(uri, real));
    return real;
  }

 private:
  // OK when the store is unconfined or `real` (a resolved path) is inside a
  // root; else PermissionDenied naming `uri` (and `real` when it differs).
  absl::Status Confine(std::string_view uri, std::string_view real) const {
    if (roots_.empty()) return absl::OkStatus();
    for (const std::string& root : roots_) {
      if (IsWithin(real, root)) return absl::OkStatus();
    }
    std::vector<std::string> shown;
    for (const std::string& root : roots_) shown.push_back(PathForMessage(root));
    std::string_view named = std::string_view(uri).substr(kFileScheme.size());
    return absl::PermissionDeniedError(absl::StrCat(
        "file object store: '", PathForMessage(uri), "'",
        real == named ? "" : absl::StrCat(" (which is '", PathForMessage(real), "')"),
        " is outside the allowed roots (", absl::StrJoin(shown, ", "), ")"));
  }

  // A confined store takes no '.' or '..' segment: the part of a path that
  // does not exist yet cannot be resolved, and mkdir would follow it.
  absl::Status CheckSegments(std::string_view uri, std::string_view path) const {
    if (roots_.empty()) return absl::OkStatus();
    for (std::string_view rest = path; !rest.empty();) {
      size_t slash = rest.find('/');
      std::string_view segment = rest.substr(0, slash);
      if (segment == "." || segment == "..") {
        return absl::InvalidArgumentError(absl::StrCat(
            "file object store: '", PathForMessage(uri),
            "' has a '.' or '..' segment, which a store confined to roots does not take"));
      }
      if (slash == std::string_view::npos) break;
      rest.remove_prefix(slash + 1);
    }
    return absl::OkStatus();
  }

  // The object's file, opened for reading (as OpenRegularFile), inside the
  // roots by its path and by the file opened.
  absl::StatusOr<UniqueFd> OpenObject(std::string_view uri, int64_t* size) const {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/true));
    if (roots_.empty()) return OpenRegularFile(path, uri, size);
    KILN_RETURN_IF_ERROR(CheckSegments(uri, path));
    KILN_ASSIGN_OR_RETURN(std::string real, ResolveExisting(path, uri));
    KILN_RETURN_IF_ERROR(Confine(uri, real));
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, uri, size));
    KILN_ASSIGN_OR_RETURN(std::string opened, PathOfFd(fd.get(), uri));
    KILN_RETURN_IF_ERROR(Confine(uri, opened));
    return fd;
  }

  // The path an object is written at or deleted from, its folder inside the
  // roots (as far as it exists).
  absl::StatusOr<std::string> WritablePathOf(std::string_view uri) const {
    KILN_ASSIGN_OR_RETURN(std::string path, PathOf(uri, /*object=*/true));
    if (roots_.empty()) return path;
    KILN_RETURN_IF_ERROR(CheckSegments(uri, path));
    KILN_ASSIGN_OR_RETURN(std::string real_dir, ResolveExisting(Dirname(path), uri));
    KILN_RETURN_IF_ERROR(Confine(uri, real_dir));
    return path;
  }

  // The check of the directory a write of `uri` renames into, by the
  // directory opened (empty when unconfined).
  std::function<absl::Status(int)> CheckDir(std::string_view uri) const {
    if (roots_.empty()) return nullptr;
    return [this, uri = std::string(uri)](int dir_fd) -> absl::Status {
      KILN_ASSIGN_OR_RETURN(std::string opened, PathOfFd(dir_fd, uri));
      return Confine(uri, opened);
    };
  }

  // How the store writes an object at `path`: durable, checked by `check`
  // (when set), and sweeping the stale temporary files of the directory the
  // first time this store writes into it.
  ReplaceOptions StoreWrite(const std::string& path,
                            const std::function<absl::Status(int)>& check) {
    ReplaceOptions options;
    options.durable = true;
    options.check_dir = check ? &check : nullptr;
    std::string dir(Dirname(path));
    absl::MutexLock lock(&mu_);
    // Bounded: a long-lived store forgets (and sweeps again) now and then.
    if (swept_dirs_.size() >= kSweptDirsRemembered) swept_dirs_.clear();
    options.sweep = swept_dirs_.insert(std::move(dir)).second;
    return options;
  }
  static constexpr size_t kSweptDirsRemembered = 4096;

  const std::vector<std::string> roots_;
  absl::Mutex mu_;
  // Directories this store has swept of stale temporary files.
  std::set<std::string, std::less<>> swept_dirs_ ABSL_GUARDED_BY(mu_);

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
  // Links are followed only to files inside `folder` (the listed folder's
  // real path, without a trailing '/'): one leading elsewhere is
  // PermissionDenied naming it.
  static absl::Status Walk(const std::string& dir, const std::string& prefix,
                           const std::string& folder, bool top, std::vector<ObjectInfo>& out) {
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
        return Walk(sub, prefix, folder, /*top=*/false, out);
      }
      if (S_ISLNK(st.st_mode)) {
        if (full.size() < prefix.size()) return absl::OkStatus();
        if (::fstatat(::dirfd(d), name.data(), &st, 0) != 0) return absl::OkStatus();  // dangling
        char target[PATH_MAX];
        if (!S_ISREG(st.st_mode) || ::realpath(full.c_str(), target) == nullptr) {
          return absl::OkStatus();
        }
        if (!IsWithin(target, folder)) {
          return absl::PermissionDeniedError(absl::StrCat(
              "file object store: '", PathForMessage(full), "' is a symbolic link to '",
              PathForMessage(target), "', outside the listed folder '", PathForMessage(folder),
              "': links are not followed out of it"));
        }
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
    return WriteFileAtomically(path, *data, ReplaceOptions{});
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
  return WriteFileAtomically(path, data, ReplaceOptions{});
}

absl::Status ObjectStore::PutFromFile(std::string_view uri, const std::string& path) {
  int64_t size = 0;
  KILN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, path, &size));
  KILN_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(fd.get(), size, path));
  fd.Close();
  return Put(uri, data);
}

absl::StatusOr<std::string> ObjectStore::LocalPath(std::string_view uri) {
  return absl::UnimplementedError(
      absl::StrCat("'", PathForMessage(uri), "': this object store keeps no local files"));
}

std::unique_ptr<ObjectStore> NewFileObjectStore() { return std::make_unique<FileObjectStore>(); }

absl::StatusOr<std::unique_ptr<ObjectStore>> NewFileObjectStore(FileObjectStoreOptions options) {
  std::vector<std::string> roots;
  for (const std::string& root : options.allowed_roots) {
    char real[PATH_MAX];
    struct stat st;
    if (root.empty() || root.front() != '/' || root.find('\0') != std::string::npos ||
        ::realpath(root.c_str(), real) == nullptr || ::stat(real, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("file object store: allowed root '", PathForMessage(root),
                       "' is not an absolute path to an existing directory"));
    }
    roots.emplace_back(real);
  }
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return std::make_unique<FileObjectStore>(std::move(roots));
}

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
// Argument checks shared with the other stores (kiln/plugin/object_store_checks.h).

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

}  // namespace kiln
