// File helpers shared by the stores that keep objects or scratch copies in
// local files (file:// store, checkpoint sync, the S3 store's downloads).
// Internal: not installed.
#ifndef KILN_LIB_CORE_INTERNAL_FILES_H_
#define KILN_LIB_CORE_INTERNAL_FILES_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kiln::internal {

// Temporary files are named `.kiln-tmp-<random>` beside their target; stores
// never list them as objects.
inline constexpr std::string_view kTempPrefix = ".kiln-tmp-";

// Returns true if the file name (one path segment) is a temporary file's.
inline bool IsTempName(std::string_view name) {
  return name.substr(0, kTempPrefix.size()) == kTempPrefix;
}

// An error for `err` (an errno value) whose message is `what` plus strerror:
// ENOSPC and EDQUOT give ResourceExhausted, ENOENT NotFound, EACCES/EPERM
// PermissionDenied (absl::ErrnoToStatus's mapping).
absl::Status ErrnoError(int err, std::string_view what);

// mkdir -p: creates `dir` and its missing parents (mode 0777 before umask).
// OK when it exists already as a directory, or when `dir` is empty. Errors:
// as ErrnoError for the first component that cannot be made (ENOTDIR when a
// component exists and is not a directory), naming that component.
absl::Status MakeDirs(const std::string& dir);

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_FILES_H_
