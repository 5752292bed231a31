// Where the local backend keeps things under its state directory (see the
// layout in kiln/local/local.h). Shared by the provider and the data channel,
// which finds an instance's tree from its id.
//
// Internal to kiln::local: never installed. Thread-safe (pure functions).
#ifndef KILN_LIB_LOCAL_INTERNAL_LAYOUT_H_
#define KILN_LIB_LOCAL_INTERNAL_LAYOUT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {

inline std::string ClusterDir(std::string_view state_dir, std::string_view cluster_id) {
  return absl::StrCat(Av(state_dir), "/instances/", Av(cluster_id));
}

// The lock a provider holds on a cluster of its own while the cluster lives,
// and the folder of those locks (local_cluster_provider.cc, ClusterLock).
inline std::string LocksDir(std::string_view state_dir) {
  return absl::StrCat(Av(state_dir), "/locks");
}
inline std::string ClusterLockPath(std::string_view state_dir, std::string_view cluster_id) {
  return absl::StrCat(Av(state_dir), "/locks/", Av(cluster_id), ".lock");
}

// An instance id is "<cluster-id>/<host>".
inline std::string InstanceId(std::string_view cluster_id, std::string_view host) {
  return absl::StrCat(Av(cluster_id), "/", Av(host));
}

inline std::string InstanceDir(std::string_view state_dir, std::string_view instance_id) {
  return absl::StrCat(Av(state_dir), "/instances/", Av(instance_id));
}

// The instance's /opt/ml tree.
inline std::string MlDir(std::string_view instance_dir) { return absl::StrCat(Av(instance_dir), "/ml"); }

// The instance directory of `instance_id`, or InvalidArgument when the id is
// not one this backend issues (it must be two safe path components).
inline absl::StatusOr<std::string> InstanceDirOf(std::string_view state_dir,
                                                 std::string_view instance_id) {
  const size_t slash = instance_id.find('/');
  if (slash == std::string_view::npos || !IsSafeRelativePath(instance_id) ||
      instance_id.find('/', slash + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Av(instance_id), "' is not an instance of the local backend"));
  }
  return InstanceDir(state_dir, instance_id);
}

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_LAYOUT_H_
