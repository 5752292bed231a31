// File-system helpers of the local backend: directories, whole-file reads and
// writes, tree copies and removals, path checks. Errors are absl::Status
// values naming the path and the system's reason.
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_INTERNAL_FS_H_
#define KILN_LIB_LOCAL_INTERNAL_FS_H_

#include <cstdint>
#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/plugin/files.h"

namespace kiln::local::internal {

// Debian's Abseil has its own string_view: the std one converted for absl calls.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A status for a failed system call on `path`, from errno `err`: NotFound for
// ENOENT, ResourceExhausted for ENOSPC/EDQUOT, PermissionDenied for
// EACCES/EPERM, Internal otherwise. The message is "<what> '<path>': <reason>",
// `path` escaped and cut as PathForMessage shows it: pass it raw, never
// already escaped.
absl::Status ErrnoStatus(int err, std::string_view what, std::string_view path);

// Creates `path` and its missing parents (mode 0755). OK if it exists as a
// directory.
absl::Status MakeDirs(const std::string& path);

// Removes `path` and everything below it, never following symbolic links. OK
// if it does not exist.
absl::Status RemoveTree(const std::string& path);

// Makes `path` an empty directory (removing what was there).
absl::Status ResetDir(const std::string& path);

// Writes `data` to `path` through a temporary file renamed over it. Errors:
// as ErrnoStatus (ResourceExhausted on a full disk), naming `path`, never the
// temporary file, which is removed: nothing of a failed write is left.
absl::Status WriteFileAtomic(const std::string& path, std::string_view data);

// Returns at most `max_bytes` from the start of the file; NotFound when it
// does not exist.
absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes);

// Copies the tree below `from` into `to` (created when missing): regular files
// with their read, write and execute bits (never a set-user-ID, set-group-ID
// or sticky bit), directories, symbolic links as links. Anything else (device
// nodes, FIFOs, sockets) is left out. The copies belong to this process's user.
absl::Status CopyTree(const std::string& from, const std::string& to);

using ::kiln::UniqueFd;  // (kiln/plugin/files.h)

// Paths below a trusted directory, in trees a container can write to.
//
// A container can replace any directory of its /opt/ml tree by a symbolic
// link to anywhere on the host. `base` (an instance's directory) is trusted
// and opened as named; every component of `rel` below it is opened with
// O_NOFOLLOW, one at a time from the directory before it (no check-then-open),
// so nothing the container planted is followed. `display` names base/rel in
// messages (e.g. "algo-1:/opt/ml/model").
// REQUIRES (all three): `rel` is empty (base itself) or IsSafeRelativePath.

// Opens the directory base/rel for reading. Errors: NotFound when it, or a
// directory on the way, does not exist; FailedPrecondition, naming `display`
// and the component, when a component is a symbolic link or not a directory;
// otherwise as ErrnoStatus.
absl::StatusOr<UniqueFd> OpenDirBelow(const std::string& base, std::string_view rel,
                                      std::string_view display);

// Makes base/rel an empty directory: what is on the way and is not a
// directory (a planted link, a file) is removed and replaced by a directory,
// missing directories are made (mode 0755), and whatever was at base/rel is
// removed as RemoveTree removes it. Links are removed, never followed.
// Errors: as ErrnoStatus, naming the path.
absl::Status ResetDirBelow(const std::string& base, std::string_view rel);

// A memory file (memfd, close-on-exec) holding `data`, its offset at the
// start: for handing bytes to a child on a descriptor. `name` shows in
// /proc. Errors: as ErrnoStatus.
absl::StatusOr<UniqueFd> MemoryFile(const char* name, std::string_view data);

// The names in the directory open as `dir_fd`, without "." and "..", in the
// order the file system gives them; read through a descriptor of its own, so
// that `dir_fd` is left as it was. Errors: as ErrnoStatus, naming `display`.
absl::StatusOr<std::vector<std::string>> NamesAt(int dir_fd, std::string_view display);

// Gives the directory `rel` below `base` (an empty `rel`: `base` itself) to
// `uid`:`gid`, and with it the entries `depth` levels below it (0: none, 1:
// its own entries, -1: all). Nothing is followed through a symbolic link, the
// way down included (links themselves change owner). A `rel` that does not
// exist is not an error. Errors: as ErrnoStatus, naming the path.
absl::Status ChownBelow(const std::string& base, std::string_view rel, uid_t uid, gid_t gid,
                        int depth);

// OK when `uid`:`gid` (without supplementary groups) may search every
// directory from / down to `path` (an absolute path) by their mode bits.
// Errors: FailedPrecondition naming the first directory in the way, its mode
// and owner; as ErrnoStatus when one cannot be examined.
absl::Status CheckSearchable(const std::string& path, uid_t uid, gid_t gid);

// Returns at most `max_bytes` from the start of the regular file base/rel.
// Errors: NotFound only when it, or a directory on the way, does not exist;
// FailedPrecondition, naming `display`, when it or a component on the way is
// a symbolic link (nothing is read through a link), a component on the way
// is not a directory, or it is neither a regular file nor a directory;
// otherwise as ErrnoStatus naming `display` (a directory is EISDIR).
absl::StatusOr<std::string> ReadFilePrefixBelow(const std::string& base, std::string_view rel,
                                                std::string_view display, size_t max_bytes);

// Opens the entry `rel` below the directory open as `dir_fd` with `flags`
// (O_NOFOLLOW and O_CLOEXEC are added), every directory on the way opened
// with O_NOFOLLOW | O_DIRECTORY. Returns -1 with errno set on failure (ELOOP
// or ENOTDIR for a link on the way, ELOOP for a link at `rel`).
// REQUIRES: IsSafeRelativePath(rel).
int OpenAtNoFollow(int dir_fd, std::string_view rel, int flags);

// Whether `path` exists (as anything, links not followed).
bool Exists(const std::string& path);
bool IsDirectory(const std::string& path);

// Whether `rel` is a relative path that stays below the directory it is
// joined to: not empty, not absolute, no "." or ".." component, no NUL, no
// empty component ("a//b").
bool IsSafeRelativePath(std::string_view rel);

// The directory part of `path` ("a/b/c" -> "a/b"; "c" -> ".").
std::string DirName(std::string_view path);

// Path of `path` under `root` when `path` is `from` or below it: "/opt/ml",
// "/opt/ml/x" -> root, root + "/x". Returns `path` unchanged otherwise.
std::string Rebase(std::string_view path, std::string_view from, std::string_view root);

// A stable 64-bit FNV-1a hash, as 16 hex digits.
std::string StableHashHex(std::string_view data);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_FS_H_
