// FuseView: a read-only FUSE file system showing a fixed list of objects as
// a directory tree, whose bytes are read from an ObjectStore (ReadRange) when
// they are first read: the local backend's FastFile view of sources that are
// not local (s3://). Mounting costs O(objects) (a tree built from the
// listing); no object byte is read until a process reads it.
//
// Reads go through a cache of aligned blocks (block_size bytes, at most
// cache_blocks of them, least recently used first out): a 4 KiB read fetches
// its whole block once, and concurrent reads of a block wait for one fetch.
// Every change is refused: the mount is read-only (EROFS), files are 0444 and
// directories 0555. A failed fetch is EIO for that read.
//
// The FUSE connection is served by a few threads of the view's own; Unmount (or
// destruction) stops them, closes the FUSE connection (processes that still
// have files open get ENOTCONN from then on) and detaches the mount (lazy:
// it never waits for them). Mounting needs the right to mount FUSE file
// systems directly (root, or CAP_SYS_ADMIN) and /dev/fuse.
//
// Internal to kiln::local: never installed. Thread-safe.
#ifndef KILN_LIB_LOCAL_INTERNAL_FUSE_VIEW_H_
#define KILN_LIB_LOCAL_INTERNAL_FUSE_VIEW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/object_store.h"

namespace kiln::local::internal {

struct FuseViewFile {
  std::string rel;   // path in the view ('/'-separated, safe: IsSafeRelativePath)
  std::string uri;   // the object
  int64_t size = 0;  // its size (the listing's)
};

struct FuseViewOptions {
  int64_t block_size = int64_t{1} << 20;  // bytes fetched per ReadRange
  int64_t cache_blocks = 32;              // blocks kept (per view)
  int threads = 4;                        // threads serving the FUSE connection
};

struct FuseViewStats {
  int64_t ranges_read = 0;  // ReadRange calls made
  int64_t bytes_read = 0;   // bytes they returned
};

class FuseView {
 public:
  // Mounts the view of `files` at `mount_point` (an existing empty
  // directory) and starts serving it. `store` is borrowed and must outlive
  // the view. Errors: InvalidArgument naming the object for a path that is
  // unsafe, or that is both a file and a directory (keys "a" and "a/b"), or
  // that is listed twice; FailedPrecondition when the FUSE mount fails (no
  // /dev/fuse, no right to mount), naming the mount point.
  static absl::StatusOr<std::unique_ptr<FuseView>> Mount(ObjectStore& store,
                                                         std::string mount_point,
                                                         std::vector<FuseViewFile> files,
                                                         FuseViewOptions options = {});

  virtual ~FuseView() = default;

  // Stops serving and detaches the mount (see the file comment); waits for
  // the serving threads (a read in progress finishes first). Idempotent.
  virtual void Unmount() = 0;

  virtual const std::string& mount_point() const = 0;
  virtual FuseViewStats stats() const = 0;
};

struct StaleViewCleanup {
  int unmounted = 0;  // dead mounts detached
  int removed = 0;    // mount points removed (dead mounts and empty leftovers)
};

// Cleans up what crashed processes left in `dir` (a folder of mount points
// named "<pid>-<n>-<name>", as LocalDataChannel makes them): a mount whose
// server is gone (statfs fails with ENOTCONN, "Transport endpoint is not
// connected"; stat may still answer from cached attributes) is detached lazily (umount2 MNT_DETACH when this process may,
// else `fusermount3 -u -z`) and its mount point removed, whatever PID its name
// gives (this process's too: a crashed process may have had the same PID); an
// empty mount point of a process that no longer exists is removed. Live
// mounts, and empty mount points of live processes (this one's included), are
// left alone. Best effort: a
// leftover that cannot be removed stays (the next cleanup tries again); a
// missing `dir` is nothing to do. Blocks for the unmounts (and the
// fusermount3 runs, if any). Thread-safe.
StaleViewCleanup CleanStaleViews(const std::string& dir);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_FUSE_VIEW_H_
