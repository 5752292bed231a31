// The image cache of the local backend: resolving TrainingImage (a directory
// or a tarball on this host) to a content key, unpacking it once per key into
// an instance's cache (<instance>/image-cache/<key>) or, opt-in, into the
// host-wide cache (<state_dir>/image-cache/<key>) that instances link to.
//
// An unpack goes to a locked scratch copy beside its target (state_dir.h),
// renamed into place when complete: a cached image is whole or absent.
//
// Internal to kiln::local: never installed. Thread-safe.
#ifndef KILN_LIB_LOCAL_IMAGE_CACHE_H_
#define KILN_LIB_LOCAL_IMAGE_CACHE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "local/log_stream.h"

namespace kiln::local::internal {

// A training image found on this host.
struct ImageSource {
  std::string path;  // absolute, on the host
  bool is_dir = false;
  std::string key;  // cache key: the source's path, sizes and modification times
};

// Finds `image` (an absolute path or file:// URI of a directory or tarball).
// Errors: InvalidArgument when it is empty, not absolute, or neither a
// directory nor a regular file; NotFound (as ErrnoStatus) when it does not
// exist.
absl::StatusOr<ImageSource> ResolveImage(std::string_view image);

// An image as an instance runs it.
struct InstalledImage {
  std::string root;         // <instance>/image-cache/<key>
  std::string program_dir;  // root/opt/program when that exists, else root
};

class ImageCache {
 public:
  // `state_dir` is the provider's (real path); `shared`: unpack each image
  // once into <state_dir>/image-cache and give instances a link to it.
  ImageCache(std::string state_dir, bool shared)
      : state_dir_(std::move(state_dir)), shared_(shared) {}

  // Resolves `image` (ResolveImage) and, with the shared cache, unpacks it
  // there when it is not yet. A scratch copy that could not all be deleted is
  // said in the log stream of each of `runs` (and in the error when the
  // unpack failed). Errors: ResolveImage's, and the file system's naming the
  // path. Blocking.
  absl::StatusOr<ImageSource> Resolve(std::string_view image,
                                      const std::vector<std::shared_ptr<RunLog>>& runs);

  // Puts `src` (from Resolve) in the cache of the instance at `instance_dir`,
  // which holds one image: the others are deleted (what resists is said in
  // `last_log`, the instance's latest run). A scratch copy that could not all
  // be deleted is said in `next_log` (the run the image is for). Errors: the
  // file system's, naming the path. Blocking.
  absl::StatusOr<InstalledImage> Install(const ImageSource& src, const std::string& instance_dir,
                                         const std::shared_ptr<RunLog>& last_log,
                                         const std::shared_ptr<RunLog>& next_log);

 private:
  const std::string state_dir_;
  const bool shared_;
  absl::Mutex mu_;  // serializes shared-cache unpacks
};

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_IMAGE_CACHE_H_
