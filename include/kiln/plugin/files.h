// File helpers shared by the stores that keep objects or scratch copies in
// local files (file:// store, checkpoint sync, the S3 store's downloads), by
// the local backend, and by whatever reads a file a user names (requests,
// scenarios, traces).
// Part of the plugin kit (docs/plugins.md). Thread-safe: no shared state
// (a UniqueFd is a value; it is thread-compatible).
#ifndef KILN_PLUGIN_FILES_H_
#define KILN_PLUGIN_FILES_H_

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kiln/plugin/json_value.h"

namespace kiln {

// Temporary files are named `.kiln-tmp-<random>` beside their target; stores
// never list them as objects.
inline constexpr std::string_view kTempPrefix = ".kiln-tmp-";

// Returns true if the file name (one path segment) is a temporary file's.
inline bool IsTempName(std::string_view name) {
  return name.substr(0, kTempPrefix.size()) == kTempPrefix;
}

// Owns a file descriptor: closes it on destruction. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: returns the descriptor (-1 if none) and holds none.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the descriptor held, if any, and holds `fd` instead.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Closes now and returns close()'s errno (0 when it succeeded or nothing was held): for
  // writes whose last error only close() reports.
  int Close() {
    const int fd = release();
    if (fd < 0) return 0;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

// An error for `err` (an errno value) whose message is `what` plus strerror:
// ENOSPC and EDQUOT give ResourceExhausted, ENOENT NotFound, EACCES/EPERM
// PermissionDenied (absl::ErrnoToStatus's mapping). A path in `what` is the
// caller's to show escaped (PathForMessage): paths hold object keys, which
// are input.
absl::Status ErrnoError(int err, std::string_view what);

// Calls `visit(name)` for each entry of the directory open as `d`, in
// readdir's order, but ".", ".." and temporary files; `name` views the
// entry's NUL-terminated d_name (so name.data() may go to an *at call) and is
// valid during the call only. The first error `visit` returns ends the
// listing and is returned; a readdir error is ErrnoError naming `dir`
// (escaped).
template <typename Visit>
absl::Status ForEachEntry(DIR* d, std::string_view dir, Visit visit) {
  for (;;) {
    errno = 0;
    const struct dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      const int err = errno;
      if (err == 0) return absl::OkStatus();
      return ErrnoError(err, absl::StrCat("list directory '", PathForMessage(dir), "'"));
    }
    const std::string_view name = entry->d_name;
    if (name == "." || name == ".." || IsTempName(name)) continue;
    absl::Status status = visit(name);
    if (!status.ok()) return status;
  }
}

// Reads the file at `path`, which a user named (a request, a scenario, a
// trace), whole, refusing what could make the read endless or exhaust
// memory: anything but a regular file (a directory, a FIFO, a device such as
// /dev/zero, a socket), and a file of more than `max_bytes` bytes, by its
// size or, for one that grows while read, at the first byte past the limit.
// A symbolic link to a regular file is followed. `kind` names such a file in
// the rule the message states ("a request file").
// Errors (the message says what is wrong, not which file: the caller names
// it as it shows paths): InvalidArgument for a file that is not regular
// ("a FIFO, not a regular file; a request file must be a regular file") or
// too large ("12582912 bytes; a request file may hold at most 8 MiB
// (8388608 bytes)"); for a file that cannot be opened or read, the code
// ErrnoError gives (NotFound, PermissionDenied, ...) with strerror's text
// ("No such file or directory").
// REQUIRES: max_bytes >= 0.
// Thread-safe.
absl::StatusOr<std::string> ReadUserFile(const std::string& path, int64_t max_bytes,
                                         std::string_view kind);

// mkdir -p: creates `dir` and its missing parents (mode 0777 before umask).
// OK when it exists already as a directory, or when `dir` is empty. Errors:
// as ErrnoError for the first component that cannot be made (ENOTDIR when a
// component exists and is not a directory), naming that component (escaped).
absl::Status MakeDirs(const std::string& dir);

}  // namespace kiln

#endif  // KILN_PLUGIN_FILES_H_
