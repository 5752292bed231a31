#include "core/internal/files.h"

#include <errno.h>
#include <sys/stat.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kiln::internal {

absl::Status ErrnoError(int err, std::string_view what) {
  return absl::ErrnoToStatus(err, absl::string_view(what.data(), what.size()));
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

}  // namespace kiln::internal
