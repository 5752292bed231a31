// Tar archives for the local backend (libarchive): unpacking image tarballs
// and packing model/output artifacts. Errors show paths, entry names and
// libarchive's text (which quotes them) escaped and cut, as PathForMessage
// shows a path: callers pass paths raw.
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_INTERNAL_ARCHIVE_H_
#define KILN_LIB_LOCAL_INTERNAL_ARCHIVE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::local::internal {

// Unpacks the archive at `archive_path` (tar in any compression libarchive
// reads) into `dest_dir` (created when missing). The archive is untrusted:
// entries that are absolute, contain "..", or would write through a symbolic
// link, and hard links to anything outside `dest_dir`, are refused; device
// nodes, FIFOs and sockets are left out; what is unpacked belongs to this
// process's user and keeps its read, write and execute bits only (no
// set-user-ID, set-group-ID or sticky bit). Errors: InvalidArgument for an unreadable or unsafe
// archive (naming the entry); file-system errors as ErrnoStatus gives them,
// among them a file that cannot be written in full (ResourceExhausted for a
// full disk, naming the file), which libarchive alone would leave cut short.
// On error, what was unpacked so far stays in `dest_dir`.
absl::Status ExtractArchive(const std::string& archive_path, const std::string& dest_dir);

// A tree of artifacts: the directory `rel` below `base`, which a container
// could write to. `base` (the instance's directory) is trusted; below it no
// symbolic link is followed (see OpenDirBelow in fs.h).
struct TreeRoot {
  std::string base;
  std::string rel;      // "ml/model"; empty: `base` itself. REQUIRES: a safe relative path
  std::string display;  // names the tree in messages: "algo-1:/opt/ml/model"
};

// An entry of a tree that is neither a regular file, a directory nor a
// symbolic link (a FIFO, a socket, a device node), which no archive or upload
// takes: `root` is the index of its tree, `display` names it as its tree's
// display does ("algo-1:/opt/ml/model/queue").
struct LeftOut {
  size_t root = 0;
  std::string display;
};

// Writes to `out_fd` (an open, empty file; `out_name` names it in messages)
// a tar archive, gzip-compressed when `gzip`, of the trees below `roots`,
// merged: paths are relative to their root, and a file present below several
// roots is taken from the last of them. Entries are sorted by path, so equal
// trees give equal archives (times aside). Regular files, directories, and
// symbolic links as links (anything else is left out, and named in
// `*left_out` when given): a link is stored, never followed, and so is
// nothing on the way to a tree (the file descriptors are walked down from
// `base`, never a path resolved again). A root that does not exist (nor a
// directory on the way) is an empty tree. An entry removed or replaced while
// the archive is written is left out. Errors: FailedPrecondition naming the
// root's `display` when the root, or a directory on the way to it, is a
// symbolic link or not a directory (a container replaced it); file-system
// errors as ErrnoStatus, a failed write of the archive too (naming
// `out_name`: ResourceExhausted for a full disk); Internal for libarchive's.
// `out_fd` stays open.
absl::Status WriteTar(const std::vector<TreeRoot>& roots, int out_fd, const std::string& out_name,
                      bool gzip, std::vector<LeftOut>* left_out = nullptr);

// Calls `fn` for every regular file of the trees below `roots`, merged as
// WriteTar merges them, in path order: `rel` is its path below its root,
// `fd` the file open for reading (valid during the call only), `size` its
// size when it was opened. Symbolic links and what is not a regular file are
// skipped, never followed; directories give no call; what is neither a file,
// a directory nor a link is named in `*left_out` when given. The first error
// of `fn` stops the walk and is returned. Errors otherwise as WriteTar's.
absl::Status ForEachMergedFile(
    const std::vector<TreeRoot>& roots,
    absl::FunctionRef<absl::Status(const std::string& rel, int fd, int64_t size)> fn,
    std::vector<LeftOut>* left_out = nullptr);

// What an archive holds, read back (for tests and checks).
struct ArchiveContents {
  std::map<std::string, std::string> files;  // path -> contents of regular files
  std::vector<std::string> directories;      // paths of directory entries, in order
  std::map<std::string, std::string> symlinks;  // path -> target of symbolic links
  std::vector<std::string> filters;          // compression filters, e.g. {"gzip"}; none: {}
};

// Reads the archive at `archive_path` back. Errors: InvalidArgument when it is
// not a readable archive.
absl::StatusOr<ArchiveContents> ReadArchive(const std::string& archive_path);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_ARCHIVE_H_
