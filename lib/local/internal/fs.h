// File-system helpers of the local backend: directories, whole-file reads and
// writes, tree copies and removals, path checks. Errors are absl::Status
// values naming the path and the system's reason.
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_INTERNAL_FS_H_
#define KILN_LIB_LOCAL_INTERNAL_FS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::local::internal {

// Debian's Abseil has its own string_view: the std one converted for absl calls.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A status for a failed system call on `path`, from errno `err`: NotFound for
// ENOENT, ResourceExhausted for ENOSPC/EDQUOT, PermissionDenied for
// EACCES/EPERM, Internal otherwise.
absl::Status ErrnoStatus(int err, std::string_view what, std::string_view path);

// Creates `path` and its missing parents (mode 0755). OK if it exists as a
// directory.
absl::Status MakeDirs(const std::string& path);

// Removes `path` and everything below it, never following symbolic links. OK
// if it does not exist.
absl::Status RemoveTree(const std::string& path);

// Makes `path` an empty directory (removing what was there).
absl::Status ResetDir(const std::string& path);

// Writes `data` to `path` through a temporary file renamed over it.
absl::Status WriteFileAtomic(const std::string& path, std::string_view data);

// Returns at most `max_bytes` from the start of the file; NotFound when it
// does not exist.
absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes);

// Copies the tree below `from` into `to` (created when missing): regular files
// with their permission bits, directories, symbolic links as links.
absl::Status CopyTree(const std::string& from, const std::string& to);

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
