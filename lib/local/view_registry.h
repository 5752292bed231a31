// ViewRegistry: the handshake between the local data channel and the local
// runtime about read-only views (FastFile channels).
//
// A FastFile channel's directory /opt/ml/input/data/<channel> is a symbolic
// link to a folder on this host: the source folder (file://) or the FUSE view
// of an s3:// listing. The data channel publishes each such view here; the
// runtime makes exactly the published views read-only to the container (a
// read-only bind mount under bwrap, a read-only mount namespace under the
// process runtime), and treats any other link in input/data as what it is,
// a link. The registry is kept in the instance's directory, outside the
// container's tree:
//   <state_dir>/instances/<cluster-id>/<host>/views/<channel>  -> the folder
// so the channel and the runtime need to share only the state directory,
// not an object or a process, and it is made fresh with the instance's tree
// before every job (instance_tree.h).
//
// Internal to kiln::local: never installed. Thread-safe (no state in memory).
#ifndef KILN_LIB_LOCAL_VIEW_REGISTRY_H_
#define KILN_LIB_LOCAL_VIEW_REGISTRY_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace kiln::local::internal {

// The folder of an instance's registered views, below its directory.
inline constexpr char kViewsDir[] = "views";

class ViewRegistry {
 public:
  ViewRegistry() = default;

  // The data channel: shows `folder` (an absolute path of a directory on
  // this host) as the channel directory `channel` of the instance at
  // `instance_dir`: makes ml/input/data/<channel> a symbolic link to it
  // (replacing what is there) and registers the view. Errors: the file
  // system's, naming the path.
  absl::Status Publish(const std::string& instance_dir, std::string_view channel,
                       const std::string& folder) const;

  // The runtime: the host paths of the channel directories, among
  // `channels` of the instance at `instance_dir`, that are published views
  // and are still the link that was published.
  std::vector<std::string> ViewsOf(const std::string& instance_dir,
                                   const std::vector<std::string>& channels) const;
};

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_VIEW_REGISTRY_H_
