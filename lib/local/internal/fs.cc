#include "local/internal/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kiln/plugin/json_value.h"

namespace kiln::local::internal {
namespace {

using ::kiln::PathForMessage;

std::string Join(const std::string& dir, std::string_view name) {
  return absl::StrCat(dir, "/", Av(name));
}

// Removes the entry `name` of the directory open as `dir_fd`.
absl::Status RemoveAt(int dir_fd, const std::string& name, const std::string& display) {
  struct stat st;
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, "stat", display);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "remove", display);
    }
    return absl::OkStatus();
  }
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, "open", display);
  }
  // A job may have left a directory without write permission. (When this
  // fails, removing the entries below says why.)
  if ((st.st_mode & 0700) != 0700) fchmod(fd, (st.st_mode & 07777) | 0700);
  UniqueFd dir(fd);
  absl::StatusOr<std::vector<std::string>> names = NamesAt(dir.get(), display);
  if (!names.ok()) return names.status();
  absl::Status status;
  for (const std::string& child : *names) {
    status.Update(RemoveAt(dir.get(), child, Join(display, child)));
  }
  dir.reset();
  if (!status.ok()) return status;
  if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, "remove directory", display);
  }
  return absl::OkStatus();
}

absl::Status CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoStatus(errno, "open", from);
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 0777);
  if (out < 0) {
    const int err = errno;
    close(in);
    return ErrnoStatus(err, "create", to);
  }
  absl::Status status;
  char buf[1 << 16];
  while (true) {
    ssize_t n = read(in, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = ErrnoStatus(errno, "read", from);
      break;
    }
    if (n == 0) break;
    ssize_t off = 0;
    while (off < n) {
      ssize_t w = write(out, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        status = ErrnoStatus(errno, "write", to);
        break;
      }
      off += w;
    }
    if (!status.ok()) break;
  }
  close(in);
  if (close(out) != 0 && status.ok()) status = ErrnoStatus(errno, "close", to);
  // (What the umask took off open's mode. `to` is a file this process just
  // made: should this fail, its owner still has the bits open gave it.)
  if (status.ok()) fchmodat(AT_FDCWD, to.c_str(), mode & 0777, 0);
  return status;
}

}  // namespace

absl::Status ErrnoStatus(int err, std::string_view what, std::string_view path) {
  std::string message =
      absl::StrCat(Av(what), " '", PathForMessage(path), "': ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty directory path");
  // Usually the parent exists: one call.
  if (mkdir(path.c_str(), 0755) == 0) return absl::OkStatus();
  if (errno == EEXIST && IsDirectory(path)) return absl::OkStatus();
  std::string partial;
  if (path[0] == '/') partial = "/";
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&partial, part);
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, "create directory", partial);
    }
    partial.push_back('/');
  }
  if (!IsDirectory(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", PathForMessage(path), "' is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  if (path.empty() || path == "/") {
    return absl::InvalidArgumentError(
        absl::StrCat("refusing to remove '", PathForMessage(path), "'"));
  }
  return RemoveAt(AT_FDCWD, path, path);
}

absl::Status ResetDir(const std::string& path) {
  absl::Status s = RemoveTree(path);
  if (!s.ok()) return s;
  return MakeDirs(path);
}

absl::Status WriteFileAtomic(const std::string& path, std::string_view data) {
  // Errors name `path`: the temporary file is ours, and gone by the time the
  // caller reads the message.
  std::string tmp = absl::StrCat(path, ".tmp-", getpid(), "-", gettid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", path);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = write(fd, data.data() + off, data.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return ErrnoStatus(err, "write", path);
    }
    off += static_cast<size_t>(w);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(err, "close", path);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(err, "rename", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  std::string out;
  out.resize(max_bytes);
  size_t got = 0;
  while (got < max_bytes) {
    ssize_t n = read(fd, out.data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, "read", path);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(got);
  return out;
}

absl::Status CopyTree(const std::string& from, const std::string& to) {
  absl::Status s = MakeDirs(to);
  if (!s.ok()) return s;
  DIR* dir = opendir(from.c_str());
  if (dir == nullptr) return ErrnoStatus(errno, "read directory", from);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  closedir(dir);
  for (const std::string& name : names) {
    const std::string src = Join(from, name);
    const std::string dst = Join(to, name);
    struct stat st;
    if (lstat(src.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", src);
    if (S_ISDIR(st.st_mode)) {
      s = CopyTree(src, dst);
      // (Should this fail, the directory keeps MakeDirs' 0755.)
      if (s.ok()) chmod(dst.c_str(), (st.st_mode & 0777) | 0700);
    } else if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      ssize_t n = readlink(src.c_str(), target.data(), target.size());
      if (n < 0) return ErrnoStatus(errno, "read link", src);
      target.resize(static_cast<size_t>(n));
      unlink(dst.c_str());
      if (symlink(target.c_str(), dst.c_str()) != 0) return ErrnoStatus(errno, "create link", dst);
    } else if (S_ISREG(st.st_mode)) {
      s = CopyFile(src, dst, st.st_mode);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

int OpenAtNoFollow(int dir_fd, std::string_view rel, int flags) {
  std::vector<std::string> parts = absl::StrSplit(Av(rel), '/');
  UniqueFd dir;  // the directory reached so far (dir_fd itself at first)
  int at = dir_fd;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const int next =
        openat(at, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return -1;
    dir.reset(next);
    at = next;
  }
  return openat(at, parts.back().c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
}

absl::StatusOr<UniqueFd> OpenDirBelow(const std::string& base, std::string_view rel,
                                      std::string_view display) {
  UniqueFd dir(open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return ErrnoStatus(errno, "open directory", base);
  if (rel.empty()) return dir;
  std::string walked = base;
  for (absl::string_view part : absl::StrSplit(Av(rel), '/')) {
    absl::StrAppend(&walked, "/", part);
    const std::string name(part);
    UniqueFd next(openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      const int err = errno;
      struct stat st;
      if (err == ELOOP || err == ENOTDIR) {
        const bool link = fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                          S_ISLNK(st.st_mode);
        return absl::FailedPreconditionError(absl::StrCat(
            PathForMessage(display), " is not read: '", PathForMessage(walked), "' is ",
            link ? "a symbolic link, which is never followed" : "not a directory"));
      }
      return ErrnoStatus(err, "open directory", walked);
    }
    dir = std::move(next);
  }
  return dir;
}

absl::Status ResetDirBelow(const std::string& base, std::string_view rel) {
  UniqueFd dir(open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return ErrnoStatus(errno, "open directory", base);
  std::vector<std::string> parts = absl::StrSplit(Av(rel), '/');
  std::string walked = base;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& name = parts[i];
    absl::StrAppend(&walked, "/", name);
    const bool last = i + 1 == parts.size();
    if (last) {
      absl::Status s = RemoveAt(dir.get(), name, walked);
      if (!s.ok()) return s;
    }
    // A few rounds: a process may plant something again meanwhile.
    UniqueFd next;
    for (int attempt = 0; attempt < 8 && !next.valid(); ++attempt) {
      next.reset(openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (next.valid()) break;
      if (errno == ELOOP || errno == ENOTDIR) {
        // Not a directory (a link, a file): not ours to follow; replaced.
        absl::Status s = RemoveAt(dir.get(), name, walked);
        if (!s.ok()) return s;
      } else if (errno != ENOENT) {
        return ErrnoStatus(errno, "open directory", walked);
      }
      if (mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoStatus(errno, "create directory", walked);
      }
    }
    if (!next.valid()) return ErrnoStatus(errno, "open directory", walked);
    dir = std::move(next);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> MemoryFile(const char* name, std::string_view data) {
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "create the memory file", name);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(n < 0 ? errno : EIO, "write the memory file", name);
    done += static_cast<size_t>(n);
  }
  if (lseek(fd.get(), 0, SEEK_SET) != 0) {
    return ErrnoStatus(errno, "rewind the memory file", name);
  }
  return fd;
}

absl::StatusOr<std::vector<std::string>> NamesAt(int dir_fd, std::string_view display) {
  // (A descriptor of its own: a dup would share dir_fd's offset.)
  const int own = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (own < 0) return ErrnoStatus(errno, "read directory", display);
  DIR* d = fdopendir(own);
  if (d == nullptr) {
    const int err = errno;
    close(own);
    return ErrnoStatus(err, "read directory", display);
  }
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  closedir(d);
  return names;
}

namespace {

// ChownBelow's walk below the open directory `dir` (`path` names it).
absl::Status ChownEntries(int dir, const std::string& path, uid_t uid, gid_t gid, int depth) {
  if (depth == 0) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> names = NamesAt(dir, path);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::string child = absl::StrCat(path, "/", name);
    if (fchownat(dir, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, "change the owner of", child);
    }
    if (depth == 1) continue;
    UniqueFd sub(openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) continue;  // not a directory (or gone)
    absl::Status s = ChownEntries(sub.get(), child, uid, gid, depth < 0 ? depth : depth - 1);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ChownBelow(const std::string& base, std::string_view rel, uid_t uid, gid_t gid,
                        int depth) {
  const std::string path = rel.empty() ? base : absl::StrCat(base, "/", Av(rel));
  absl::StatusOr<UniqueFd> dir = OpenDirBelow(base, rel, path);
  if (!dir.ok()) {
    return absl::IsNotFound(dir.status()) ? absl::OkStatus() : dir.status();
  }
  if (fchown(dir->get(), uid, gid) != 0) return ErrnoStatus(errno, "change the owner of", path);
  return ChownEntries(dir->get(), path, uid, gid, depth);
}

absl::Status CheckSearchable(const std::string& path, uid_t uid, gid_t gid) {
  std::string walked;
  std::vector<std::string> dirs = {"/"};
  for (absl::string_view part : absl::StrSplit(Av(path), '/', absl::SkipEmpty())) {
    absl::StrAppend(&walked, "/", part);
    dirs.push_back(walked);
  }
  for (const std::string& dir : dirs) {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "examine", dir);
    const mode_t bit = st.st_uid == uid ? S_IXUSR : st.st_gid == gid ? S_IXGRP : S_IXOTH;
    if ((st.st_mode & bit) == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "'%s' is not searchable by uid %d gid %d (mode %04o, owner %d:%d)", PathForMessage(dir),
          uid, gid, st.st_mode & 07777, st.st_uid, st.st_gid));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFilePrefixBelow(const std::string& base, std::string_view rel,
                                                std::string_view display, size_t max_bytes) {
  // The directories on the way as OpenDirBelow opens them (and says why it
  // cannot); the file itself without following a link either.
  const size_t slash = rel.rfind('/');
  absl::StatusOr<UniqueFd> dir =
      OpenDirBelow(base, slash == std::string_view::npos ? "" : rel.substr(0, slash), display);
  if (!dir.ok()) return dir.status();
  const std::string name(slash == std::string_view::npos ? rel : rel.substr(slash + 1));
  UniqueFd fd(openat(dir->get(), name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(
          PathForMessage(display), " is not read: it is a symbolic link, which is never followed"));
    }
    return ErrnoStatus(errno, "open", display);
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat", display);
  if (S_ISDIR(st.st_mode)) return ErrnoStatus(EISDIR, "read", display);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(PathForMessage(display), " is not read: it is not a regular file"));
  }
  std::string out;
  out.resize(max_bytes);
  size_t got = 0;
  while (got < max_bytes) {
    ssize_t n = read(fd.get(), out.data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read", display);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsSafeRelativePath(std::string_view rel) {
  if (rel.empty() || rel.front() == '/') return false;
  if (rel.find('\0') != std::string_view::npos) return false;
  for (absl::string_view part : absl::StrSplit(Av(rel), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

std::string DirName(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

std::string Rebase(std::string_view path, std::string_view from, std::string_view root) {
  if (path == from) return std::string(root);
  if (path.size() > from.size() && path.substr(0, from.size()) == from &&
      path[from.size()] == '/') {
    return absl::StrCat(Av(root), Av(path.substr(from.size())));
  }
  return std::string(path);
}

std::string StableHashHex(std::string_view data) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace kiln::local::internal
