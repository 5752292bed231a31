// The registry of read-only views (view_registry.h).
#include "local/view_registry.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "local/internal/fs.h"
#include "local/internal/layout.h"

namespace kiln::local::internal {
namespace {

// The target of the symbolic link `path`; "" when it is not one.
std::string LinkTarget(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return "";
  char target[PATH_MAX];
  const ssize_t n = readlink(path.c_str(), target, sizeof(target));
  if (n <= 0 || static_cast<size_t>(n) == sizeof(target)) return "";
  return std::string(target, static_cast<size_t>(n));
}

// Makes `path` a symbolic link to `target`, replacing what is there.
absl::Status Link(const std::string& target, const std::string& path) {
  absl::Status s = RemoveTree(path);
  if (s.ok() && symlink(target.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus(errno, "symlink", path);
  }
  return s;
}

}  // namespace

absl::Status ViewRegistry::Publish(const std::string& instance_dir, std::string_view channel,
                                   const std::string& folder) const {
  // Registered first: a view is never shown without being registered (the
  // runtime would take it for a plain link).
  const std::string views = absl::StrCat(instance_dir, "/", kViewsDir);
  absl::Status s = MakeDirs(views);
  if (s.ok()) s = Link(folder, absl::StrCat(views, "/", Av(channel)));
  if (s.ok()) s = Link(folder, absl::StrCat(MlDir(instance_dir), "/input/data/", Av(channel)));
  return s;
}

std::vector<std::string> ViewRegistry::ViewsOf(const std::string& instance_dir,
                                               const std::vector<std::string>& channels) const {
  std::vector<std::string> views;
  for (const std::string& ch : channels) {
    const std::string registered = LinkTarget(absl::StrCat(instance_dir, "/", kViewsDir, "/", ch));
    if (registered.empty()) continue;
    const std::string path = absl::StrCat(MlDir(instance_dir), "/input/data/", ch);
    if (LinkTarget(path) == registered) views.push_back(path);
  }
  return views;
}

}  // namespace kiln::local::internal
