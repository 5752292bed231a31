// The log stream of a container run (log_stream.h).
#include "local/log_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::local::internal {

void LineSplitter::Add(std::string_view chunk, std::vector<std::string>& lines) {
  buf_.append(chunk);
  size_t start = 0;
  while (true) {
    size_t nl = buf_.find('\n', start);
    if (nl == std::string::npos) break;
    Emit(std::string_view(buf_).substr(start, nl - start), lines);
    start = nl + 1;
  }
  buf_.erase(0, start);
  while (buf_.size() >= kMaxLineBytes) {
    Emit(std::string_view(buf_).substr(0, kMaxLineBytes), lines);
    buf_.erase(0, kMaxLineBytes);
  }
}

void LineSplitter::Flush(std::vector<std::string>& lines) {
  if (!buf_.empty()) Emit(buf_, lines);
  buf_.clear();
}

void LineSplitter::Emit(std::string_view line, std::vector<std::string>& lines) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  lines.emplace_back(line);
}

void RunLog::Name(std::string name) {
  absl::MutexLock lock(&mu_);
  name_ = std::move(name);
}

bool RunLog::QueueUnlessNamed(std::string_view text) {
  absl::MutexLock lock(&mu_);
  if (!name_.empty()) return false;
  queued_.emplace_back(text);
  return true;
}

std::vector<std::string> RunLog::TakeQueued() {
  absl::MutexLock lock(&mu_);
  return std::exchange(queued_, {});
}

absl::Status RunLog::Adopt(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "find the log stream", path);
  absl::MutexLock lock(&mu_);
  name_ = path;
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> RunLog::Open(std::string& path) {
  absl::MutexLock lock(&mu_);
  if (name_.empty()) return absl::InternalError("a log stream opened before it has a name");
  if (!path_.empty()) {
    path = path_;
    UniqueFd fd(open(path_.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (fd.valid() && fstat(fd.get(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
      return fd;
    }
    if (!fd.valid() && errno != ENOENT) return ErrnoStatus(errno, "open", path_);
  }
  path = name_;
  absl::Status s = MakeDirs(DirName(name_));
  if (!s.ok()) return s;
  for (int n = 2;; ++n) {
    UniqueFd fd(open(path.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
                               0644));
    if (!fd.valid()) {
      if (errno != EEXIST) return ErrnoStatus(errno, "create", path);
      path = absl::StrCat(name_, "-", n);  // another run's
      continue;
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat", path);
    path_ = path;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    return fd;
  }
}

std::string LogStream::Open() {
  absl::StatusOr<UniqueFd> fd = run_.Open(path_);
  absl::Status s = fd.status();
  if (s.ok()) {
    fd_ = *std::move(fd);
    struct stat st;
    if (fstat(fd_.get(), &st) != 0) {
      s = ErrnoStatus(errno, "stat", path_);
      fd_.reset();
    } else {
      // (A note added after the run: never cut below what is there.)
      size_ = line_end_ = st.st_size;
      index_.Open(path_, /*fresh=*/size_ == 0);
    }
  }
  if (s.ok()) {
    state_ = State::kOpen;
    return "";
  }
  state_ = State::kBroken;
  return absl::StrCat(kBrokenPrefix, s.message(),
                      "; this container's output reaches the job's observers only");
}

std::string LogStream::Resume(std::string& partial) {
  partial.clear();
  std::string broke = Open();
  if (!broke.empty() || size_ == 0) return broke;
  // The tail, for the last newline.
  UniqueFd in(open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  const off_t from = std::max<off_t>(0, size_ - static_cast<off_t>(kMaxLineBytes));
  std::string tail(static_cast<size_t>(size_ - from), '\0');
  const ssize_t n = in.valid() ? pread(in.get(), tail.data(), tail.size(), from) : -1;
  if (n != static_cast<ssize_t>(tail.size())) return "";  // (taken as whole lines)
  const size_t nl = tail.rfind('\n');
  const size_t start = nl == std::string::npos ? 0 : nl + 1;
  line_end_ = from + static_cast<off_t>(start);
  partial = tail.substr(start);
  return "";
}

std::string LogStream::AppendOutput(std::string_view data) {
  if (state_ != State::kOpen || data.empty()) return "";
  const off_t line_end = line_end_;
  int err = 0;
  if (!WriteAll(data, err)) return Break(err);
  if (line_end_ != line_end || size_ - line_end_ >= static_cast<off_t>(kMaxLineBytes)) {
    index_.Mark(size_);
  }
  return "";
}

std::string LogStream::AppendPlatformLine(std::string_view text) {
  if (state_ != State::kOpen) return "";
  const std::string line = absl::StrCat(AtLineStart() ? "" : "\n", "[kiln] ",
                                        Av(text), "\n");
  int err = 0;
  if (!WriteAll(line, err)) return Break(err);
  index_.Mark(size_);
  return "";
}

std::string LogStream::Close() {
  if (state_ != State::kOpen) return "";
  const int err = fd_.Close();
  if (err == 0) {
    state_ = State::kClosed;
    index_.Mark(size_, /*closed=*/true);
    index_.Close();
    return "";
  }
  state_ = State::kBroken;
  return absl::StrCat(kBrokenPrefix, "close '", path_, "': ", std::strerror(err),
                      "; it may lack some of this container's output, which reached the "
                      "job's observers");
}

bool LogStream::WriteAll(std::string_view data, int& err) {
  while (!data.empty()) {
    const ssize_t w = write(fd_.get(), data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : EIO;  // (0 from a regular file: never loop on it)
      return false;
    }
    const std::string_view done = data.substr(0, static_cast<size_t>(w));
    const size_t nl = done.rfind('\n');
    if (nl != std::string_view::npos) line_end_ = size_ + static_cast<off_t>(nl) + 1;
    size_ += w;
    data.remove_prefix(static_cast<size_t>(w));
  }
  return true;
}

std::string LogStream::Break(int err) {
  state_ = State::kBroken;
  const std::string reason = std::strerror(err);
  // The file ends on a whole line: what a failed write left of one goes.
  if (!AtLineStart() && ftruncate(fd_.get(), line_end_) == 0) size_ = line_end_;
  // Said in the file too, whole or not at all.
  const off_t before = size_;
  const std::string note = absl::StrCat(
      AtLineStart() ? "" : "\n", "[kiln] the log stream stops here: write failed: ", reason,
      "; the rest of the output reached the job's observers only\n");
  int ignored = 0;
  if (!WriteAll(note, ignored) && size_ != before && ftruncate(fd_.get(), before) == 0) {
    size_ = before;
  }
  index_.Mark(size_, /*closed=*/true);
  index_.Close();
  fd_.reset();
  return absl::StrCat(kBrokenPrefix, "write '", path_, "': ", reason,
                      "; it ends with the last whole line that fit, and the rest of this "
                      "container's output reaches the job's observers only");
}

void NoteForRun(const std::shared_ptr<RunLog>& run, std::string_view text) {
  if (run == nullptr || run->QueueUnlessNamed(text)) return;
  LogStream stream(*run);
  if (stream.Open().empty()) stream.AppendPlatformLine(text);
  stream.Close();
}

std::string LeftoverText(std::string_view lead, const absl::Status& removal,
                         std::string_view then) {
  return absl::StrCat(Av(lead), ": ", removal.message(), Av(then));
}

}  // namespace kiln::local::internal
