// The image cache (image_cache.h).
#include "local/image_cache.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "local/internal/archive.h"
#include "local/internal/fs.h"
#include "local/state_dir.h"

namespace kiln::local::internal {
namespace {

using ::kiln::PathForMessage;

std::string StripFileScheme(std::string_view uri) {
  if (uri.substr(0, 7) == "file://") return std::string(uri.substr(7));
  return std::string(uri);
}


// A fingerprint of a tree: every entry's path, type, size, mode and mtime.
void Fingerprint(const std::string& root, const std::string& rel, std::string& out) {
  const std::string dir = rel.empty() ? root : absl::StrCat(root, "/", rel);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string child = rel.empty() ? name : absl::StrCat(rel, "/", name);
    struct stat st;
    if (lstat(absl::StrCat(root, "/", child).c_str(), &st) != 0) continue;
    absl::StrAppend(&out, child, "\x01", st.st_mode, "\x01", st.st_size, "\x01",
                    st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "\n");
    if (S_ISDIR(st.st_mode)) Fingerprint(root, child, out);
  }
}

// Makes `target` hold the unpacked image (atomically: a directory appears
// complete or not at all). A no-op when it exists. The image is unpacked into
// a scratch copy beside `target`, which is deleted when it is not renamed
// into place: `left` says why it could not all be deleted (OK when nothing is
// left), whether the unpack succeeded or not (see UnpackLeftover).
absl::Status Materialize(const ImageSource& src, const std::string& target, absl::Status& left) {
  left = absl::OkStatus();
  if (IsDirectory(target)) return absl::OkStatus();
  const std::string tmp = absl::StrCat(target, ".tmp-", getpid(), "-", gettid());
  // (A copy of this name is one an earlier unpack on this thread left, and
  // said it left.)
  absl::Status s = RemoveTree(tmp);
  if (!s.ok()) return s;
  absl::StatusOr<UniqueFd> lock = MakeLockedScratch(tmp, /*dir=*/true);
  if (!lock.ok()) s = lock.status();
  if (s.ok()) {
    s = src.is_dir ? CopyTree(src.path, tmp) : ExtractArchive(src.path, tmp);
  }
  if (s.ok() && rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;  // (before IsDirectory's stat sets it)
    // Someone else finished first (shared cache): theirs is as good.
    if (!IsDirectory(target)) s = ErrnoStatus(err, "rename", target);
  }
  // (What cannot be deleted is found again: below an instance, with its
  // cluster; in the shared cache, by the next provider's StaleFiles.)
  left = RemoveTree(tmp);
  return s;
}


// Returns the status of an unpack (Materialize) that left a scratch copy it
// could not delete (`left`; OK: nothing is left), described by `lead` and
// `then`: said in the log stream of each run the unpack prepares (`runs`)
// and, when the unpack failed (`unpacked`), in its error too, as that job may
// never run.
absl::Status UnpackLeftover(const absl::Status& unpacked, const absl::Status& left,
                            std::string_view lead, std::string_view then,
                            const std::vector<std::shared_ptr<RunLog>>& runs) {
  if (left.ok()) return unpacked;
  const std::string text = LeftoverText(lead, left, then);
  for (const std::shared_ptr<RunLog>& run : runs) NoteForRun(run, text);
  if (unpacked.ok()) return unpacked;
  return absl::Status(unpacked.code(), absl::StrCat(unpacked.message(), "; ", text));
}


}  // namespace

absl::StatusOr<ImageSource> ResolveImage(std::string_view image) {
  if (image.empty()) {
    return absl::InvalidArgumentError(
        "the local backend needs AlgorithmSpecification.TrainingImage: a directory or a tarball");
  }
  const std::string path = StripFileScheme(image);
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "image '", PathForMessage(image),
        "' is not a local image: give an absolute path or file:// URI of a directory or of a "
        ".tar/.tar.gz tarball"));
  }
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) {
    return ErrnoStatus(errno, "find image", path);
  }
  struct stat st;
  if (stat(real, &st) != 0) return ErrnoStatus(errno, "stat image", real);
  ImageSource src;
  src.path = real;
  std::string print;
  if (S_ISDIR(st.st_mode)) {
    src.is_dir = true;
    print = absl::StrCat("dir\n", real, "\n");
    Fingerprint(real, "", print);
  } else if (S_ISREG(st.st_mode)) {
    print = absl::StrCat("file\n", real, "\n", st.st_size, "\n", st.st_mtim.tv_sec, ".",
                         st.st_mtim.tv_nsec);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("image '", PathForMessage(image), "' is neither a directory nor a tarball"));
  }
  src.key = StableHashHex(print);
  return src;
}


absl::StatusOr<ImageSource> ImageCache::Resolve(std::string_view image,
                                                const std::vector<std::shared_ptr<RunLog>>& runs) {
  absl::StatusOr<ImageSource> src = ResolveImage(image);
  if (!src.ok() || !shared_) return src;
  const std::string target = absl::StrCat(state_dir_, "/image-cache/", src->key);
  absl::MutexLock lock(&mu_);
  absl::Status s = MakeDirs(DirName(target));
  absl::Status left;
  if (s.ok()) s = Materialize(*src, target, left);
  s = UnpackLeftover(s, left, "the scratch copy of the image in the shared image cache could "
                     "not all be deleted", kLeftForNextProvider, runs);
  if (!s.ok()) return s;
  return src;
}

absl::StatusOr<InstalledImage> ImageCache::Install(const ImageSource& src,
                                                   const std::string& instance_dir,
                                                   const std::shared_ptr<RunLog>& last_log,
                                                   const std::shared_ptr<RunLog>& next_log) {
  const std::string cache = absl::StrCat(instance_dir, "/image-cache");
  const std::string target = absl::StrCat(cache, "/", src.key);
  if (!Exists(target)) {
    // An instance holds one image: drop the others. (What cannot be
    // deleted does not keep this job from running: the release tries again.)
    if (absl::Status s = ResetDir(cache); !s.ok()) {
      NoteForRun(last_log, LeftoverText("the instance's earlier images could not all be "
                                        "deleted", s, kLeftForDispose));
    }
    absl::Status status;
    if (shared_) {
      const std::string shared_target = absl::StrCat(state_dir_, "/image-cache/", src.key);
      if (symlink(shared_target.c_str(), target.c_str()) != 0) {
        status = ErrnoStatus(errno, "link", target);
      }
    } else {
      absl::Status left;
      status = Materialize(src, target, left);
      status = UnpackLeftover(status, left, "the scratch copy of the image in the "
                              "instance's image cache could not all be deleted",
                              kLeftForDispose, {next_log});
    }
    if (!status.ok()) return status;
  }
  InstalledImage installed;
  installed.root = target;
  const std::string opt_program = absl::StrCat(target, "/opt/program");
  installed.program_dir = IsDirectory(opt_program) ? opt_program : target;
  return installed;
}

}  // namespace kiln::local::internal
