#include "agent/state_files.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace kiln::agent::internal {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents,
                                 mode_t mode) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", ErrnoText(errno)));
  auto fail = [&](const std::string& what) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", ErrnoText(err)));
  };
  if (fchmod(fd, mode) != 0) return fail("set the mode of");
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) return fail("sync");
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ErrnoText(err)));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ErrnoText(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", ErrnoText(err)));
  }
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("cannot read ", path, ": ", ErrnoText(err)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0 || errno == EEXIST) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cannot create the directory ", path, ": ", ErrnoText(errno)));
}

}  // namespace kiln::agent::internal
