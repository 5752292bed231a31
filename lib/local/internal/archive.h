// Tar archives for the local backend (libarchive): unpacking image tarballs
// and packing model/output artifacts.
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_INTERNAL_ARCHIVE_H_
#define KILN_LIB_LOCAL_INTERNAL_ARCHIVE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::local::internal {

// Unpacks the archive at `archive_path` (tar in any compression libarchive
// reads) into `dest_dir` (created when missing). Entries that are absolute,
// contain "..", or would write through a symbolic link are refused: the
// archive is untrusted. Errors: InvalidArgument for an unreadable or unsafe
// archive (naming the entry); file-system errors as ErrnoStatus gives them.
absl::Status ExtractArchive(const std::string& archive_path, const std::string& dest_dir);

// Writes a tar archive (gzip-compressed when `gzip`) of the trees below each
// of `roots`, merged: paths are relative to their root, and a file present
// below several roots is taken from the last of them. Roots that do not exist
// are skipped. Entries are sorted by path, so equal trees give equal archives
// (times aside).
absl::Status WriteTar(const std::vector<std::string>& roots, const std::string& out_path,
                      bool gzip);

// What an archive holds, read back (for tests and checks).
struct ArchiveContents {
  std::map<std::string, std::string> files;  // path -> contents of regular files
  std::vector<std::string> directories;      // paths of directory entries, in order
  std::vector<std::string> filters;          // compression filters, e.g. {"gzip"}; none: {}
};

// Reads the archive at `archive_path` back. Errors: InvalidArgument when it is
// not a readable archive.
absl::StatusOr<ArchiveContents> ReadArchive(const std::string& archive_path);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_ARCHIVE_H_
