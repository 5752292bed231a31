#include "kiln/plugin/files.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kiln {

absl::Status ErrnoError(int err, std::string_view what) {
  return absl::ErrnoToStatus(err, absl::string_view(what.data(), what.size()));
}

namespace {

// What a file that is not regular is, for a message.
const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// (Debian's Abseil's string_view is not std::string_view.)
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status NotRegular(mode_t mode, std::string_view kind) {
  return absl::InvalidArgumentError(absl::StrCat(FileTypeName(mode), ", not a regular file; ",
                                                 Absl(kind), " must be a regular file"));
}

// "at most 8 MiB (8388608 bytes)", or "at most 1000 bytes".
std::string Limit(std::string_view kind, int64_t max_bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (max_bytes >= kMiB && max_bytes % kMiB == 0) {
    return absl::StrCat(Absl(kind), " may hold at most ", max_bytes / kMiB, " MiB (", max_bytes,
                        " bytes)");
  }
  return absl::StrCat(Absl(kind), " may hold at most ", max_bytes, " bytes");
}

// strerror's text alone, with ErrnoError's code.
absl::Status ErrnoReason(int err) {
  char buffer[128];
  return absl::Status(absl::ErrnoToStatusCode(err), ::strerror_r(err, buffer, sizeof buffer));
}

}  // namespace

absl::StatusOr<std::string> ReadUserFile(const std::string& path, int64_t max_bytes,
                                         std::string_view kind) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then
  // refuses it); O_NOCTTY: a terminal named by mistake must not become ours.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) {
    const int err = errno;
    // A socket cannot be opened (ENXIO): say what it is rather than
    // "No such device or address".
    struct stat st;
    if (err == ENXIO && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return NotRegular(st.st_mode, kind);
    }
    return ErrnoReason(err);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoReason(errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(st.st_mode, kind);
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(st.st_size, " bytes; ", Limit(kind, max_bytes)));
  }
  // Up to one byte past the limit, to tell a file that grew past it.
  const size_t cap = static_cast<size_t>(max_bytes) + 1;
  std::string data;
  data.resize(std::min(static_cast<size_t>(st.st_size) + 1, cap));
  size_t used = 0;
  for (;;) {
    if (used == data.size()) {
      if (used == cap) break;
      data.resize(std::min(std::max<size_t>(data.size() * 2, 4096), cap));
    }
    const ssize_t n = ::read(fd.get(), data.data() + used, data.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoReason(errno);
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > static_cast<size_t>(max_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", max_bytes, " bytes; ", Limit(kind, max_bytes)));
  }
  data.resize(used);
  return data;
}

absl::Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (dir.empty() || ::stat(dir.c_str(), &st) == 0) {
    if (dir.empty() || S_ISDIR(st.st_mode)) return absl::OkStatus();
    return ErrnoError(ENOTDIR, absl::StrCat("create directory '", PathForMessage(dir), "'"));
  }
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    if (dir[pos - 1] == '/') continue;
    const std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0777) == 0) continue;
    int err = errno;
    if (err == EEXIST && ::stat(part.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    if (err == EEXIST) err = ENOTDIR;
    return ErrnoError(err, absl::StrCat("create directory '", PathForMessage(part), "'"));
  }
  return absl::OkStatus();
}

}  // namespace kiln
