// LocalClusterProvider: instances are directories, containers are process
// trees (see kiln/local/local.h for the contract it implements).
//
// Threads. Every ClusterProvider method runs on the loop thread and only
// starts work: Provision, PrepareImage, UploadArtifacts and the clean-up after
// Release run as tasks on threads of their own (TaskRunner); each container
// has a supervisor thread that prepares its run, starts it, reads its output,
// syncs its checkpoints, reaps it and reports its exit. Worker threads never
// touch the provider's state: they post to the loop, and the posted callbacks
// check that the provider is alive (a weak token) and that the cluster and
// run they belong to are still current before calling anyone.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/internal/json_value.h"
#include "kiln/checkpoint_sync.h"
#include "kiln/local/local.h"
#include "local/internal/archive.h"
#include "local/internal/container_config.h"
#include "local/internal/fs.h"
#include "local/internal/layout.h"
#include "local/internal/process_keeper.h"
#include "local/internal/seccomp_filter.h"
#include "local/internal/spawn.h"
#include "local/internal/task_runner.h"

namespace kiln::local {
namespace {

using internal::BuildContainerConfig;
using internal::ContainerConfig;
using internal::ContainerConfigInput;
using ::kiln::internal::PathForMessage;

constexpr size_t kMaxFailureBytes = 1024;
constexpr size_t kMaxLineBytes = 64 * 1024;
constexpr char kContainerBase[] = "/opt/ml";
constexpr char kContainerProgram[] = "/opt/program";
constexpr char kDefaultCheckpointPath[] = "/opt/ml/checkpoints";
// The instance's scratch directory, below its directory (TMPDIR; /tmp under bwrap).
constexpr char kInstanceTmp[] = "tmp";
// The /opt/ml tree of an instance.
constexpr const char* kMlTree[] = {"input/config",        "input/data",  "model", "output/data",
                                   "output/intermediate", "checkpoints", "code"};
constexpr char kDefaultHostPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Held (weakly) by every posted callback: gone once the provider is.
struct Alive {};

// Ends a network-namespace holder when the last owner lets go.
struct NetnsGuard {
  internal::NetnsHolder holder;
  ~NetnsGuard() { internal::StopNetnsHolder(holder); }
};

// One container run on one instance, shared by the loop thread (signals) and
// its supervisor thread.
struct ContainerProc {
  ~ContainerProc() {
    if (thread.joinable()) thread.join();
  }
  absl::Mutex mu;
  pid_t pid ABSL_GUARDED_BY(mu) = -1;  // our child (entrypoint or bwrap) until reaped
  // `pid` is the process keeper (internal/process_keeper.h), which kills the
  // container when sent its end signal.
  bool kept ABSL_GUARDED_BY(mu) = false;
  bool reaped ABSL_GUARDED_BY(mu) = false;
  bool cancelled ABSL_GUARDED_BY(mu) = false;  // released or lost: no sync, no events
  int pending_signal ABSL_GUARDED_BY(mu) = 0;  // asked for before the process existed
  // bwrap: the sandbox's first process (its PID namespace's init).
  int sandbox_pidfd ABSL_GUARDED_BY(mu) = -1;
  pid_t sandbox_pid ABSL_GUARDED_BY(mu) = -1;
  std::string sandbox_ns ABSL_GUARDED_BY(mu);
  absl::Notification finished;  // the supervisor is done with the instance's files
  std::thread thread;
};

std::string ReadLink(const std::string& path) {
  char buf[256];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  return n <= 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

// Sends `sig` to every process of the PID namespace `ns` but its init.
void SignalNamespace(const std::string& ns, pid_t init, int sig) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (struct dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == init || pid <= 1) continue;
    if (ReadLink(absl::StrCat("/proc/", pid, "/ns/pid")) == ns) kill(pid, sig);
  }
  closedir(proc);
}

void SignalLocked(ContainerProc& p, int sig) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
  if (p.reaped) return;
  if (p.pid <= 0) {
    if (sig == SIGKILL || p.pending_signal == 0) p.pending_signal = sig;
    return;
  }
  if (p.sandbox_pidfd >= 0) {
    if (sig == SIGKILL) {
      internal::PidfdSendSignal(p.sandbox_pidfd, SIGKILL);
      kill(-p.pid, SIGKILL);
    } else {
      SignalNamespace(p.sandbox_ns, p.sandbox_pid, sig);
    }
    return;
  }
  if (sig == SIGKILL && p.kept) {
    // The keeper kills the entrypoint, then every process left below it,
    // those that left the group too, then itself: a SIGKILL to the group
    // would kill the keeper first and miss those. (SIGCONT: in case the
    // group was stopped.)
    kill(p.pid, internal::KeeperEndSignal());
    kill(p.pid, SIGCONT);
    return;
  }
  kill(-p.pid, sig);
}

void KillProc(ContainerProc& p, bool cancel) {
  absl::MutexLock lock(&p.mu);
  if (cancel) p.cancelled = true;
  SignalLocked(p, SIGKILL);
}

// Cuts `text` to at most `max` bytes without splitting a UTF-8 sequence.
std::string TrimUtf8(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text;
}

// The log line for a checkpoint sync that failed: its error, which names the
// sync ("checkpoint sync: upload ..."; said once, not again in front of it),
// then what it uploaded and deleted all the same (a failed file does not stop
// the others). `final`: the sync after the container's exit, which the line
// says first ("final checkpoint sync: ...").
std::string CheckpointSyncFailure(bool final, const absl::Status& status,
                                  const CheckpointSyncStats& done) {
  return absl::StrCat(final ? "final " : "", status.message(),
                      " (done all the same: ", done.uploaded, " uploaded (", done.bytes_uploaded,
                      " bytes), ", done.deleted, " deleted)");
}

// Whether the container path `path` is /opt/ml or below it.
bool IsUnderContainerBase(std::string_view path) {
  const std::string_view base = kContainerBase;
  return path == base || (path.size() > base.size() && path.substr(0, base.size()) == base &&
                          path[base.size()] == '/');
}

std::string StripFileScheme(std::string_view uri) {
  if (uri.substr(0, 7) == "file://") return std::string(uri.substr(7));
  return std::string(uri);
}

std::string JoinUri(std::string_view base, std::string_view tail) {
  return absl::StrCat(absl::StripSuffix(internal::Av(base), "/"), "/", internal::Av(tail));
}

// ---------------------------------------------------------------------------
// Images

struct ImageSource {
  std::string path;  // absolute, on the host
  bool is_dir = false;
  std::string key;  // cache key
};

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
    return internal::ErrnoStatus(errno, "find image", path);
  }
  struct stat st;
  if (stat(real, &st) != 0) return internal::ErrnoStatus(errno, "stat image", real);
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
  src.key = internal::StableHashHex(print);
  return src;
}

// Scratch a provider makes in the state directory, the upload archives in
// <state_dir>/tmp and the half-unpacked images in <state_dir>/image-cache,
// holds an exclusive flock while in use, which the kernel drops however the
// process ends: scratch nobody holds is what a process that is gone left
// behind (ClaimStaleScratch deletes it), and it holds across PID namespaces
// sharing a state directory, as a pid in the name would not.

// True if `fd` is still the entry at `path` (not deleted or replaced).
bool StillAt(int fd, const std::string& path) {
  struct stat held, named;
  return fstat(fd, &held) == 0 && lstat(path.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

// Makes the file (or, with `dir`, the directory) `path`, which must not
// exist, and takes its lock. Errors: as ErrnoStatus, naming `path`.
absl::StatusOr<internal::UniqueFd> MakeLockedScratch(const std::string& path, bool dir) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    internal::UniqueFd fd;
    if (dir) {
      if (mkdir(path.c_str(), 0755) != 0) return internal::ErrnoStatus(errno, "create", path);
      fd.reset(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    } else {
      fd.reset(open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    }
    if (!fd.valid()) {
      if (errno == ENOENT) continue;  // deleted at once by a clean-up: again
      return internal::ErrnoStatus(errno, "create", path);
    }
    while (flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return internal::ErrnoStatus(errno, "lock", path);
    }
    // A clean-up may have taken it for a dead process's before the lock: again.
    if (StillAt(fd.get(), path)) return fd;
  }
  return absl::InternalError(absl::StrCat("could not create '", path, "': deleted repeatedly"));
}

// Scratch of a process that is gone, claimed (its lock taken): to delete
// before the lock goes.
struct StaleScratch {
  std::string path;
  internal::UniqueFd lock;
};

// Claims the scratch in <state_dir>/tmp and <state_dir>/image-cache whose
// lock no process holds (see MakeLockedScratch).
std::vector<StaleScratch> ClaimStaleScratch(const std::string& state_dir) {
  std::vector<StaleScratch> stale;
  const std::pair<std::string, std::string> places[] = {
      {absl::StrCat(state_dir, "/tmp"), "upload-"},
      {absl::StrCat(state_dir, "/image-cache"), ".tmp-"},
  };
  for (const auto& [dir, marker] : places) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (struct dirent* e = readdir(d)) {
      if (!absl::StrContains(e->d_name, marker)) continue;
      const std::string path = absl::StrCat(dir, "/", e->d_name);
      internal::UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (!fd.valid() || flock(fd.get(), LOCK_EX | LOCK_NB) != 0 || !StillAt(fd.get(), path)) {
        continue;  // in use, or gone
      }
      stale.push_back(StaleScratch{path, std::move(fd)});
    }
    closedir(d);
  }
  return stale;
}

// Makes `target` hold the unpacked image (atomically: a directory appears
// complete or not at all). A no-op when it exists. The image is unpacked into
// a scratch copy beside `target`, which is deleted when it is not renamed
// into place: `left` says why it could not all be deleted (OK when nothing is
// left), whether the unpack succeeded or not (see UnpackLeftover).
absl::Status Materialize(const ImageSource& src, const std::string& target, absl::Status& left) {
  left = absl::OkStatus();
  if (internal::IsDirectory(target)) return absl::OkStatus();
  const std::string tmp = absl::StrCat(target, ".tmp-", getpid(), "-", gettid());
  // (A copy of this name is one an earlier unpack on this thread left, and
  // said it left.)
  absl::Status s = internal::RemoveTree(tmp);
  if (!s.ok()) return s;
  absl::StatusOr<internal::UniqueFd> lock = MakeLockedScratch(tmp, /*dir=*/true);
  if (!lock.ok()) s = lock.status();
  if (s.ok()) {
    s = src.is_dir ? internal::CopyTree(src.path, tmp) : internal::ExtractArchive(src.path, tmp);
  }
  if (s.ok() && rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;  // (before IsDirectory's stat sets it)
    // Someone else finished first (shared cache): theirs is as good.
    if (!internal::IsDirectory(target)) s = internal::ErrnoStatus(err, "rename", target);
  }
  // (What cannot be deleted is found again: below an instance, with its
  // cluster; in the shared cache, by the next provider's ClaimStaleScratch.)
  left = internal::RemoveTree(tmp);
  return s;
}

// ---------------------------------------------------------------------------
// Output lines

class LineSplitter {
 public:
  // Appends `chunk`; complete lines (and over-long partial ones) go to `lines`.
  void Add(std::string_view chunk, std::vector<std::string>& lines) {
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
  void Flush(std::vector<std::string>& lines) {
    if (!buf_.empty()) Emit(buf_, lines);
    buf_.clear();
  }

 private:
  static void Emit(std::string_view line, std::vector<std::string>& lines) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.emplace_back(line);
  }
  std::string buf_;
};

// Where the log stream of one container run goes:
// <log_dir>/<job>/algo-<k>-<epoch>, or, when a run of the same job on the
// same host that started in the same second holds that name (a rerun, the
// job's next attempt, a provider in another process sharing the log
// directory), the first free of "<name>-2", "<name>-3", ... The first Open
// makes the file with O_EXCL: the kernel, not the clock, keeps two runs from
// ever sharing a stream, so what is said about a run (NoteForRun) reaches its
// stream and no other. The stream gets its name when the run starts; what is
// said about the run before (while PrepareImage prepares the instance for it)
// is kept until then, for the stream's first lines.
//
// Thread-safe.
class RunLog {
 public:
  // Gives the stream its name (StartContainers).
  void Name(std::string name) {
    absl::MutexLock lock(&mu_);
    name_ = std::move(name);
  }

  // Keeps `text` for the stream while it has no name, and returns true; false
  // once it has one (the caller writes `text` then).
  bool QueueUnlessNamed(std::string_view text) {
    absl::MutexLock lock(&mu_);
    if (!name_.empty()) return false;
    queued_.emplace_back(text);
    return true;
  }

  // The texts QueueUnlessNamed kept, which the caller now writes.
  std::vector<std::string> TakeQueued() {
    absl::MutexLock lock(&mu_);
    return std::exchange(queued_, {});
  }

  // Opens the stream for appending: the first time, a file made under a name
  // no other stream has (its directory made when missing); afterwards, that
  // file again, or, when it was deleted or replaced meanwhile, one made anew
  // the same way (never a file another run may have made under its name).
  // Sets `path` to the file's name (on error, the one that failed).
  // Errors: as ErrnoStatus, naming the directory or the file.
  // REQUIRES: Name was called.
  absl::StatusOr<internal::UniqueFd> Open(std::string& path) {
    absl::MutexLock lock(&mu_);
    if (name_.empty()) return absl::InternalError("a log stream opened before it has a name");
    if (!path_.empty()) {
      path = path_;
      internal::UniqueFd fd(open(path_.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
      struct stat st;
      if (fd.valid() && fstat(fd.get(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
        return fd;
      }
      if (!fd.valid() && errno != ENOENT) return internal::ErrnoStatus(errno, "open", path_);
    }
    path = name_;
    absl::Status s = internal::MakeDirs(internal::DirName(name_));
    if (!s.ok()) return s;
    for (int n = 2;; ++n) {
      internal::UniqueFd fd(open(path.c_str(),
                                 O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
                                 0644));
      if (!fd.valid()) {
        if (errno != EEXIST) return internal::ErrnoStatus(errno, "create", path);
        path = absl::StrCat(name_, "-", n);  // another run's
        continue;
      }
      struct stat st;
      if (fstat(fd.get(), &st) != 0) return internal::ErrnoStatus(errno, "stat", path);
      path_ = path;
      dev_ = st.st_dev;
      ino_ = st.st_ino;
      return fd;
    }
  }

 private:
  absl::Mutex mu_;
  std::string name_ ABSL_GUARDED_BY(mu_);  // "" until Name
  std::vector<std::string> queued_ ABSL_GUARDED_BY(mu_);
  std::string path_ ABSL_GUARDED_BY(mu_);  // the file made, "" until then
  dev_t dev_ ABSL_GUARDED_BY(mu_) = 0;     // ... and which file it is
  ino_t ino_ ABSL_GUARDED_BY(mu_) = 0;
};

// The log stream of one container run (RunLog): the container's output as it
// comes, and Kiln's own "[kiln] " lines.
//
// Every write is completed, or the stream breaks: on the first failure (a full
// disk) the file is cut back to the end of its last whole line, a "[kiln] "
// line saying why is added when it fits (the cut may have freed the room),
// and nothing more is written to it. So the file never holds a cut line, nor
// one joined to a later one, as writing on after a short write would give
// (the disk may have room again by the next chunk). The caller shows observers
// the line the breaking call returns: the stream says so once, where it can
// be read. A stream that cannot be opened is broken from the start, and one
// whose close() fails (a deferred write error) is broken at the end.
//
// Supervisor thread only (thread-compatible).
class LogStream {
 public:
  // What every line that reports a broken stream to observers starts with.
  static constexpr char kBrokenPrefix[] = "[kiln] the log stream cannot be written: ";

  // `run` must outlive the stream.
  explicit LogStream(RunLog& run) : run_(run) {}

  // Opens the run's stream for appending (RunLog::Open). Returns the line for
  // observers when it cannot (naming what and why), else "".
  std::string Open() {
    absl::StatusOr<internal::UniqueFd> fd = run_.Open(path_);
    absl::Status s = fd.status();
    if (s.ok()) {
      fd_ = *std::move(fd);
      struct stat st;
      if (fstat(fd_.get(), &st) != 0) {
        s = internal::ErrnoStatus(errno, "stat", path_);
        fd_.reset();
      } else {
        // (A note added after the run: never cut below what is there.)
        size_ = line_end_ = st.st_size;
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

  // Appends container output. Returns the line for observers when this call
  // broke the stream, else "".
  std::string AppendOutput(std::string_view data) {
    if (state_ != State::kOpen || data.empty()) return "";
    int err = 0;
    return WriteAll(data, err) ? "" : Break(err);
  }

  // Appends "[kiln] <text>" on a line of its own. Returns the line for
  // observers when this call broke the stream, else "".
  std::string AppendPlatformLine(std::string_view text) {
    if (state_ != State::kOpen) return "";
    const std::string line = absl::StrCat(AtLineStart() ? "" : "\n", "[kiln] ",
                                          internal::Av(text), "\n");
    int err = 0;
    return WriteAll(line, err) ? "" : Break(err);
  }

  // Whether the stream was opened and then broke, or could not be opened.
  bool broken() const { return state_ == State::kBroken; }

  // Closes the file. Returns the line for observers when close() fails (where
  // some file systems, NFS or FUSE ones, report a write that failed after it
  // returned), else "". The stream is then broken like a failed write breaks
  // it, except that the file can no longer be put right.
  std::string Close() {
    if (state_ != State::kOpen) return "";
    const int err = fd_.Close();
    if (err == 0) {
      state_ = State::kClosed;
      return "";
    }
    state_ = State::kBroken;
    return absl::StrCat(kBrokenPrefix, "close '", path_, "': ", std::strerror(err),
                        "; it may lack some of this container's output, which reached the "
                        "job's observers");
  }

 private:
  enum class State { kNotOpen, kOpen, kBroken, kClosed };

  bool AtLineStart() const { return size_ == line_end_; }

  // Writes all of `data`, keeping size_ and line_end_ up to date with what
  // reached the file. False (with `err`) when a write fails.
  bool WriteAll(std::string_view data, int& err) {
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

  std::string Break(int err) {
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
    fd_.reset();
    return absl::StrCat(kBrokenPrefix, "write '", path_, "': ", reason,
                        "; it ends with the last whole line that fit, and the rest of this "
                        "container's output reaches the job's observers only");
  }

  RunLog& run_;
  std::string path_;  // the file (set by Open)
  internal::UniqueFd fd_;
  State state_ = State::kNotOpen;
  off_t size_ = 0;      // bytes in the file (only this stream appends to it)
  off_t line_end_ = 0;  // size_ just after the last newline written
};

// ---------------------------------------------------------------------------
// The provider

class LocalClusterProvider;

// Everything one supervisor needs, copied out of the loop thread's state.
struct LaunchSpec {
  std::string cluster_id;
  uint64_t run = 0;
  size_t index = 0;
  std::string host;
  std::string instance_dir;  // trusted: nothing below it is followed through a link
  std::string ml_dir;
  std::string tmp_dir;
  std::shared_ptr<RunLog> log;
  ContainerConfig config;
  std::vector<std::string> argv;  // argv[0] still to be found on PATH
  std::string cwd;
  bool bwrap = false;
  int netns_fd = -1;
  // The container user, when it is not this process's own.
  std::optional<internal::Credentials> run_as;
  // bwrap: the seccomp filter (BPF), shared by every run.
  std::shared_ptr<const std::string> seccomp;
  // process runtime: what the container sees read-only (the image, the
  // FastFile sources).
  std::vector<std::string> readonly_paths;
  // Directories made fresh before the run, below instance_dir.
  std::vector<std::string> fresh_dirs;
  // Checkpoints.
  ObjectStore* checkpoint_store = nullptr;
  std::string checkpoint_uri;
  std::string checkpoint_dir;  // host path, below instance_dir
  absl::Duration sync_interval;
  absl::Duration drain_timeout;
  // The instance's earlier runs, which must be done with its files first.
  std::vector<std::shared_ptr<ContainerProc>> wait_for;
};

// bwrap: the data channel's FastFile views are symbolic links
// input/data/<channel> -> the source folder (local_data_channel.cc). Inside
// the sandbox each becomes a read-only bind mount of that folder at
// /opt/ml/input/data/<channel> (the link is replaced by the empty directory
// the mount needs): reads go to the source, writes fail with EROFS, and the
// folder is visible even where the sandbox hides the host's path (/tmp).
absl::Status MountFastFileViews(LaunchSpec& spec) {
  std::vector<std::string> binds;
  for (const std::string& ch : spec.config.channels) {
    const std::string path = absl::StrCat(spec.ml_dir, "/input/data/", ch);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) continue;
    char target[PATH_MAX];
    ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) return internal::ErrnoStatus(errno, "readlink", path);
    target[n] = '\0';
    if (unlink(path.c_str()) != 0) return internal::ErrnoStatus(errno, "unlink", path);
    absl::Status s = internal::MakeDirs(path);
    if (!s.ok()) return s;
    binds.insert(binds.end(),
                 {"--ro-bind", target, absl::StrCat(kContainerBase, "/input/data/", ch)});
  }
  if (binds.empty()) return absl::OkStatus();
  // After the tree's own bind (mounts apply in order).
  auto at = std::find(spec.argv.begin(), spec.argv.end(), "--unshare-pid");
  spec.argv.insert(at, binds.begin(), binds.end());
  return absl::OkStatus();
}

// process: the FastFile views are the same links; the container keeps them
// and gets a mount namespace of its own in which each link's target (the
// source folder, or the FUSE view of an s3:// prefix) is bind-mounted on
// itself read-only, so writes through the link, or through the folder's own
// path, fail with EROFS, while the host and other containers are untouched.
// Where this process can make no mount namespace (neither root nor
// unprivileged user namespaces) the links stay writable views, as documented
// in kiln/local/local.h.
absl::Status CollectReadOnlyViews(LaunchSpec& spec) {
  for (const std::string& ch : spec.config.channels) {
    const std::string path = absl::StrCat(spec.ml_dir, "/input/data/", ch);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) continue;
    char target[PATH_MAX];
    if (realpath(path.c_str(), target) == nullptr) {
      return internal::ErrnoStatus(errno, "resolve the FastFile view", path);
    }
    if (std::find(spec.readonly_paths.begin(), spec.readonly_paths.end(), target) ==
        spec.readonly_paths.end()) {
      spec.readonly_paths.push_back(target);
    }
  }
  if (!spec.readonly_paths.empty() &&
      internal::GetMountNamespaceSupport() == internal::MountNamespaceSupport::kNone) {
    spec.readonly_paths.clear();
  }
  return absl::OkStatus();
}

// Gives the container user what a run may write: the /opt/ml tree's
// directories, model, output, code and checkpoints, the entries of
// input/data (FIFOs, channel folders) and input/config, and the scratch
// space. (The channels' files stay the host's: read-only to the container.)
absl::Status GiveTreeToContainer(const LaunchSpec& spec) {
  const internal::Credentials& c = *spec.run_as;
  const std::pair<std::string, int> parts[] = {
      {"ml", 0},          {"ml/model", -1},     {"ml/output", -1},     {"ml/code", -1},
      {"ml/checkpoints", -1}, {"ml/input", 0},  {"ml/input/data", 1},  {"ml/input/config", 1},
      {kInstanceTmp, -1},
  };
  for (const auto& [rel, depth] : parts) {
    absl::Status s = internal::ChownBelow(spec.instance_dir, rel, c.uid, c.gid, depth);
    if (!s.ok()) return s;
  }
  if (!spec.checkpoint_dir.empty()) {
    const std::string rel = spec.checkpoint_dir.substr(spec.instance_dir.size() + 1);
    return internal::ChownBelow(spec.instance_dir, rel, c.uid, c.gid, -1);
  }
  return absl::OkStatus();
}

// bwrap: bubblewrap's own process gets an empty environment, and its
// options, among them the container's variables as --setenv pairs and the
// seccomp filter's descriptor (5), come from a memory file (descriptor 4);
// only the command stays on its command line (bubblewrap reads no command
// from that file). Nothing of the job reaches bubblewrap itself, neither a
// variable its loader would honour (LD_PRELOAD) nor a secret in its
// /proc/<pid>/cmdline. `fds` gets the descriptors to hand over, after the
// info pipe's (3).
absl::Status PrepareBwrapCommand(const LaunchSpec& spec, std::vector<std::string>& argv,
                                 std::vector<std::string>& env,
                                 std::vector<internal::UniqueFd>& fds) {
  auto command = std::find(argv.begin() + 1, argv.end(), "--");
  std::vector<std::string> options(argv.begin() + 1, command);
  for (const auto& [k, v] : spec.config.env) options.insert(options.end(), {"--setenv", k, v});
  if (spec.seccomp != nullptr) options.insert(options.end(), {"--seccomp", "5"});
  std::string text;
  for (const std::string& a : options) {
    if (a.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("a container variable holds a NUL byte");
    }
    text.append(a);
    text.push_back('\0');
  }
  absl::StatusOr<internal::UniqueFd> args = internal::MemoryFile("kiln-bwrap-args", text);
  if (!args.ok()) return args.status();
  fds.push_back(*std::move(args));
  if (spec.seccomp != nullptr) {
    absl::StatusOr<internal::UniqueFd> filter = internal::MemoryFile("kiln-seccomp", *spec.seccomp);
    if (!filter.ok()) return filter.status();
    fds.push_back(*std::move(filter));
  }
  std::vector<std::string> short_argv = {argv[0], "--args", "4"};
  short_argv.insert(short_argv.end(), command, argv.end());
  argv = std::move(short_argv);
  env.clear();
  return absl::OkStatus();
}

struct StartState {
  absl::Mutex mu;
  int remaining ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  ClusterProvider::DoneCallback started;
};

// An instance's tree being made fresh ahead of its next job (Recycle).
struct Scrub {
  absl::Notification done;  // the fresh tree is in place (or `status` says why not)
  absl::Status status;      // set before `done`
  absl::Notification trash_gone;  // the old tree is deleted too
};

// Makes an instance's /opt/ml tree and scratch space anew (nothing of an
// earlier job survives; the image cache stays). The old ones are renamed
// aside, into `trash` (paths inside the instance directory), so that the
// caller can delete them after the fresh tree is in use: a rename is O(1),
// deleting a job's files is not.
absl::Status FreshInstanceTree(const std::string& dir, const std::string& ml_dir,
                               const std::string& tmp_dir, std::vector<std::string>& trash) {
  static std::atomic<uint64_t> next_trash{0};
  for (const std::string& old : {ml_dir, tmp_dir, absl::StrCat(dir, "/checkpoints-local")}) {
    const std::string aside = absl::StrCat(dir, "/trash-", getpid(), "-", ++next_trash);
    if (rename(old.c_str(), aside.c_str()) == 0) {
      trash.push_back(aside);
    } else if (errno != ENOENT) {
      // Not movable (e.g. another file system): delete it in place.
      absl::Status s = internal::RemoveTree(old);
      if (!s.ok()) return s;
    }
  }
  absl::Status status = internal::MakeDirs(tmp_dir);
  for (const char* sub : kMlTree) {
    if (status.ok()) status = internal::MakeDirs(absl::StrCat(ml_dir, "/", sub));
  }
  return status;
}

// Adds "[kiln] <text>" to the log stream of a container run: what the
// provider learns about the run outside it (that files could not all be
// deleted), said where the rest of its story is. For a run that has started,
// now; for the run an instance is being prepared for, as the first lines of
// its stream (RunLog). Nothing when `run` is null (no run yet). Best effort:
// the line is whole or absent (LogStream), and there is no one left to tell
// when it cannot be written.
void NoteForRun(const std::shared_ptr<RunLog>& run, std::string_view text) {
  if (run == nullptr || run->QueueUnlessNamed(text)) return;
  LogStream stream(*run);
  if (stream.Open().empty()) stream.AppendPlatformLine(text);
  stream.Close();
}

// Who tries again to delete what a clean-up left: in an instance's directory,
// the cluster's release (Dispose); elsewhere, or at the release, the next
// provider made on the state directory (the cluster's kept lock file, or the
// scratch's name, leads it there).
constexpr char kLeftForDispose[] = "; what is left is deleted with the cluster";
constexpr char kLeftForNextProvider[] =
    "; a provider made later on this state directory tries again";

// What a clean-up left, as NoteForRun says it: "<lead>: <why><then>", where
// `removal` (the failed deletion's status) names the path and the reason.
std::string LeftoverText(std::string_view lead, const absl::Status& removal,
                         std::string_view then) {
  return absl::StrCat(internal::Av(lead), ": ", removal.message(), internal::Av(then));
}

// Deletes what FreshInstanceTree put aside, the files of the run `run`, and
// says in its log stream what could not be deleted (the first removal that
// failed; the others are tried all the same).
void EmptyTrash(const std::shared_ptr<RunLog>& run, std::vector<std::string>& trash) {
  absl::Status status;
  for (const std::string& t : trash) status.Update(internal::RemoveTree(t));
  trash.clear();
  if (!status.ok()) {
    NoteForRun(run, LeftoverText("the files of this run could not all be deleted", status,
                                 kLeftForDispose));
  }
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

struct LocalInstance {
  Instance info;
  std::string dir;
  std::string ml_dir;
  std::string tmp_dir;
  std::string image_root;   // set by PrepareImage
  std::string program_dir;  // set by PrepareImage
  std::shared_ptr<RunLog> last_log;  // the log stream of the latest run (set by StartContainers)
  // The log stream of the run PrepareImage prepares the instance for, until
  // StartContainers names it and makes it last_log.
  std::shared_ptr<RunLog> next_log;
  bool lost = false;
  TimerHandle loss_timer;
  std::shared_ptr<ContainerProc> current;
  std::vector<std::shared_ptr<ContainerProc>> retired;
  // Set by Recycle, taken by the next PrepareImage; Dispose waits for it.
  std::shared_ptr<Scrub> scrub;
  // PrepareImage made the tree fresh and no container has run on it since.
  bool tree_fresh = false;
};

// Marks a cluster's directory as in use while it lives: an exclusive flock on
// <state_dir>/locks/<cluster-id>.lock, which the kernel drops when this
// process dies, however it dies. A provider made later on the same state
// directory deletes the clusters whose lock nobody holds (ClaimStaleClusters):
// what a crashed process left behind. (flock, unlike a pid in the name, also
// holds across PID namespaces sharing a state directory.)
class ClusterLock {
 public:
  // Takes the lock at `path` (ClusterLockPath), waiting while a provider
  // deletes a stale cluster of the same name. Errors: as ErrnoStatus, when
  // the lock file cannot be made or locked.
  static absl::StatusOr<std::unique_ptr<ClusterLock>> Take(const std::string& path) {
    while (true) {
      const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return internal::ErrnoStatus(errno, "create the lock file", path);
      while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        close(fd);
        return internal::ErrnoStatus(err, "lock", path);
      }
      if (StillLinked(fd, path)) return std::unique_ptr<ClusterLock>(new ClusterLock(path, fd));
      close(fd);  // deleted meanwhile, with the stale cluster it stood for: again
    }
  }

  // Takes the lock at `path` if its file exists and no one holds it (its
  // cluster is stale); null otherwise.
  static std::unique_ptr<ClusterLock> TryTake(const std::string& path) {
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !StillLinked(fd, path)) {
      close(fd);  // in use (or just deleted)
      return nullptr;
    }
    return std::unique_ptr<ClusterLock>(new ClusterLock(path, fd));
  }

  // Deletes the lock file (unless KeepFile was called), then lets the lock go.
  // (A file that cannot be deleted only makes the next provider made on the
  // state directory find the cluster stale, find its directory gone, and try
  // again.)
  ~ClusterLock() {
    if (!keep_file_) unlink(path_.c_str());
    close(fd_);
  }

  // Leaves the file when the lock goes: for a cluster whose directory could
  // not all be deleted, which a provider made later then finds stale and
  // tries again (ClaimStaleClusters; without the file it never would).
  void KeepFile() { keep_file_ = true; }

  ClusterLock(const ClusterLock&) = delete;
  ClusterLock& operator=(const ClusterLock&) = delete;

 private:
  // True if `fd` is still the file at `path` (not deleted or replaced).
  static bool StillLinked(int fd, const std::string& path) {
    struct stat held, named;
    return fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 &&
           held.st_dev == named.st_dev && held.st_ino == named.st_ino;
  }

  ClusterLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_;
  bool keep_file_ = false;
};

// A stale cluster (see ClusterLock), claimed: its directory is to be deleted
// before its lock goes.
struct StaleCluster {
  std::string dir;
  std::unique_ptr<ClusterLock> lock;
};

// Claims the clusters whose lock (in <state_dir>/locks) no process holds.
// Cluster directories without a lock file are left alone.
std::vector<StaleCluster> ClaimStaleClusters(const std::string& state_dir) {
  std::vector<StaleCluster> stale;
  const std::string locks = internal::LocksDir(state_dir);
  DIR* d = opendir(locks.c_str());
  if (d == nullptr) return stale;
  while (struct dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    constexpr std::string_view kSuffix = ".lock";
    if (name.size() <= kSuffix.size() || name[0] == '.' ||
        name.substr(name.size() - kSuffix.size()) != kSuffix) {
      continue;
    }
    const std::string_view id = name.substr(0, name.size() - kSuffix.size());
    std::unique_ptr<ClusterLock> lock =
        ClusterLock::TryTake(internal::ClusterLockPath(state_dir, id));
    if (lock == nullptr) continue;
    stale.push_back(StaleCluster{internal::ClusterDir(state_dir, id), std::move(lock)});
  }
  closedir(d);
  return stale;
}

struct LocalCluster {
  std::unique_ptr<ClusterLock> lock;  // (destroyed last)
  Cluster cluster;
  std::string dir;
  std::vector<LocalInstance> instances;
  ContainerEvents* events = nullptr;
  uint64_t run = 0;
  std::shared_ptr<NetnsGuard> netns;  // bwrap with a per-cluster network namespace
  bool host_network = false;          // bwrap without one: names via /etc/hosts only
  std::string hosts_file;
};

// A cluster's directory while Provision makes it, with the lock that makes it
// ours. Unless the lock is handed over with the cluster, the directory is
// deleted while the lock is held, then the lock goes, its file kept when the
// directory could not all be deleted (as Dispose keeps it), so that a
// provider made later on the state directory tries again. Without the lock
// nothing is deleted: a cluster of the same name, made in another PID
// namespace sharing the state directory, may own the directory.
struct ProvisionedDirs {
  std::string dir;
  std::unique_ptr<ClusterLock> lock;  // null: not taken, or handed over
  ~ProvisionedDirs() {
    if (lock == nullptr) return;
    if (!internal::RemoveTree(dir).ok()) lock->KeepFile();
    lock.reset();  // (deletes the lock file unless kept, then unlocks)
  }
};

// How containers are started, settled when the provider is made.
struct RuntimeSetup {
  std::string bwrap_program;  // bwrap: the program's path
  // The container user, when it is not this process's own.
  std::optional<internal::Credentials> run_as;
  // bwrap: the seccomp filter handed to every sandbox.
  std::shared_ptr<const std::string> seccomp;
};

// bubblewrap's options for who the container is: in a user namespace of its
// own, root inside with no power over the host and no nested namespace,
// unless the sandbox is started by root itself (LocalOptions::container_user
// root), which keeps root but drops every capability.
std::vector<std::string> BwrapIdentityArgs(const std::optional<internal::Credentials>& run_as) {
  if (run_as.has_value() || geteuid() != 0) {
    return {"--unshare-user", "--disable-userns", "--uid", "0", "--gid", "0"};
  }
  return {"--cap-drop", "ALL"};
}

class LocalClusterProvider final : public ClusterProvider {
 public:
  LocalClusterProvider(EventLoop& loop, LocalOptions options, RuntimeSetup runtime)
      : loop_(loop),
        options_(std::move(options)),
        bwrap_program_(std::move(runtime.bwrap_program)),
        run_as_(runtime.run_as),
        seccomp_(std::move(runtime.seccomp)) {
    if (options_.log_dir.empty()) options_.log_dir = absl::StrCat(options_.state_dir, "/logs");
    const char* path = std::getenv("PATH");
    host_path_ = path != nullptr && *path != '\0' ? path : kDefaultHostPath;
    const char* home = std::getenv("HOME");
    home_ = home != nullptr ? home : "/root";
    cpu_count_ = options_.cpu_count > 0 ? options_.cpu_count
                                        : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    if (cpu_count_ <= 0) cpu_count_ = 1;
    // What a crashed process left in the state directory goes, in the
    // background (a job's files can take a while to delete).
    std::vector<StaleCluster> stale = ClaimStaleClusters(options_.state_dir);
    std::vector<StaleScratch> scratch = ClaimStaleScratch(options_.state_dir);
    if (!stale.empty() || !scratch.empty()) {
      tasks_.Run([stale = std::move(stale), scratch = std::move(scratch)]() mutable {
        // What cannot be deleted stays for the next provider made here to
        // try again: a cluster keeps its lock file for that, and scratch is
        // found by its name.
        for (StaleCluster& c : stale) {
          if (!internal::RemoveTree(c.dir).ok()) c.lock->KeepFile();
          c.lock.reset();  // (deletes the lock file unless kept, then unlocks)
        }
        for (StaleScratch& t : scratch) {
          internal::RemoveTree(t.path).IgnoreError();
          t.lock.reset();
        }
      });
    }
  }

  ~LocalClusterProvider() override {
    alive_.reset();
    for (auto& [id, cluster] : clusters_) Dispose(std::move(cluster));
    clusters_.clear();
    tasks_.JoinAll();
  }

  void Provision(const ClusterSpec& spec, ClusterCallback done) override;
  void PrepareImage(const Cluster& cluster, std::string_view image, DoneCallback done) override;
  void StartContainers(const JobContext& job, ContainerEvents& events,
                       DoneCallback started) override;
  void Signal(const Cluster& cluster, int signal) override;
  void UploadArtifacts(const JobContext& job, ArtifactsCallback done) override;
  void SetListener(ClusterListener* listener) override { listener_ = listener; }
  absl::Status InjectInterruption(std::string_view instance_id, InterruptionKind kind,
                                  absl::Duration notice) override;
  void Recycle(const Cluster& cluster) override;
  void Release(const Cluster& cluster) override;

  // --- Called by posted callbacks (loop thread, provider alive).
  void DeliverLines(const std::string& cluster_id, uint64_t run, size_t index,
                    const std::vector<std::string>& lines);
  void DeliverExit(const std::string& cluster_id, uint64_t run, size_t index,
                   const ContainerExit& exit);
  bool IsCurrentRun(const std::string& cluster_id, uint64_t run) {
    LocalCluster* c = Find(cluster_id);
    return c != nullptr && c->run == run;
  }

 private:
  LocalCluster* Find(const std::string& id) {
    auto it = clusters_.find(id);
    return it == clusters_.end() ? nullptr : it->second.get();
  }

  // Runs `fn` on the loop later (never inline), if the provider is alive then.
  template <typename Fn>
  void PostIfAlive(Fn fn) {
    loop_.Post([alive = std::weak_ptr<Alive>(alive_), fn = std::move(fn)]() mutable {
      if (alive.lock()) fn();
    });
  }

  // Stops everything of a cluster taken out of clusters_ and cleans up after
  // it on a task: kills now, waits and removes files later.
  void Dispose(std::unique_ptr<LocalCluster> cluster);

  void LoseInstance(const std::string& cluster_id, size_t index);

  static void Supervise(EventLoop* loop, std::weak_ptr<Alive> alive,
                        LocalClusterProvider* provider, LaunchSpec spec,
                        std::shared_ptr<StartState> start, ContainerProc* proc,
                        EventLoop::WorkGuard guard);

  EventLoop& loop_;
  LocalOptions options_;
  std::string bwrap_program_;
  std::optional<internal::Credentials> run_as_;
  std::shared_ptr<const std::string> seccomp_;
  std::string host_path_;
  std::string home_;
  int cpu_count_ = 1;
  ClusterListener* listener_ = nullptr;
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();
  std::map<std::string, std::unique_ptr<LocalCluster>> clusters_;
  int64_t instances_in_use_ = 0;
  bool netns_unavailable_ = false;  // learned from a failed attempt
  absl::Mutex image_mu_;            // serializes shared-cache unpacks
  internal::TaskRunner tasks_;      // last: joined first on destruction
};

void LocalClusterProvider::Provision(const ClusterSpec& spec, ClusterCallback done) {
  int64_t count = 0;
  for (const InstanceGroupSpec& g : spec.groups) count += std::max(0, g.count);
  if (count == 0) {
    PostIfAlive([done = std::move(done), job = spec.job_name]() mutable {
      done(absl::InvalidArgumentError(absl::StrCat("job '", job, "' asks for no instances")));
    });
    return;
  }
  if (options_.max_instances > 0 && instances_in_use_ + count > options_.max_instances) {
    PostIfAlive([done = std::move(done), job = spec.job_name, count,
                 in_use = instances_in_use_, max = options_.max_instances]() mutable {
      done(absl::ResourceExhaustedError(
          absl::StrCat("job '", job, "' needs ", count, " local instances; ", in_use, " of ", max,
                       " are in use")));
    });
    return;
  }
  instances_in_use_ += count;
  auto cluster = std::make_unique<LocalCluster>();
  // Numbered per process, not per provider: providers of one process may share a state
  // directory, where a second "cluster-<pid>-1" would wait for the first one's lock.
  static std::atomic<uint64_t> next_cluster{0};
  cluster->cluster.id = absl::StrCat("cluster-", getpid(), "-", next_cluster.fetch_add(1) + 1);
  cluster->cluster.spot = spec.spot;
  cluster->dir = internal::ClusterDir(options_.state_dir, cluster->cluster.id);
  int host = 0;
  for (const InstanceGroupSpec& g : spec.groups) {
    for (int i = 0; i < g.count; ++i) {
      ++host;
      LocalInstance inst;
      inst.info.host_name = absl::StrCat("algo-", host);
      inst.info.id = internal::InstanceId(cluster->cluster.id, inst.info.host_name);
      inst.info.group_name = g.name;
      inst.info.instance_type = g.instance_type;
      inst.dir = internal::InstanceDir(options_.state_dir, inst.info.id);
      inst.ml_dir = internal::MlDir(inst.dir);
      inst.tmp_dir = absl::StrCat(inst.dir, "/", kInstanceTmp);
      cluster->cluster.instances.push_back(inst.info);
      cluster->instances.push_back(std::move(inst));
    }
  }
  const bool want_netns = options_.runtime == LocalRuntime::kBwrap && !netns_unavailable_;
  const bool bwrap = options_.runtime == LocalRuntime::kBwrap;
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, cluster = std::move(cluster), done = std::move(done), want_netns, bwrap,
              guard, alive = std::weak_ptr<Alive>(alive_)]() mutable {
    auto dirs = std::make_unique<ProvisionedDirs>();
    dirs->dir = cluster->dir;
    absl::Status status;
    const std::string lock_path =
        internal::ClusterLockPath(options_.state_dir, cluster->cluster.id);
    if (absl::StatusOr<std::unique_ptr<ClusterLock>> lock = ClusterLock::Take(lock_path);
        lock.ok()) {
      dirs->lock = *std::move(lock);
    } else {
      status = lock.status();
    }
    if (status.ok()) status = internal::RemoveTree(cluster->dir);
    for (const LocalInstance& inst : cluster->instances) {
      for (const std::string& d : {absl::StrCat(inst.dir, "/image-cache"), inst.tmp_dir}) {
        if (status.ok()) status = internal::MakeDirs(d);
      }
      for (const char* sub : kMlTree) {
        if (status.ok()) status = internal::MakeDirs(absl::StrCat(inst.ml_dir, "/", sub));
      }
    }
    std::shared_ptr<NetnsGuard> netns;
    bool netns_denied = false;
    if (status.ok() && want_netns) {
      absl::StatusOr<internal::NetnsHolder> holder = internal::StartNetnsHolder();
      if (holder.ok()) {
        netns = std::make_shared<NetnsGuard>();
        netns->holder = *holder;
      } else {
        netns_denied = true;
      }
    }
    if (status.ok() && bwrap) {
      std::string hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
      for (size_t i = 0; i < cluster->instances.size(); ++i) {
        absl::StrAppend(&hosts, "127.0.1.", (i % 250) + 1, "\t",
                        cluster->instances[i].info.host_name, "\n");
      }
      cluster->hosts_file = absl::StrCat(cluster->dir, "/hosts");
      status = internal::WriteFileAtomic(cluster->hosts_file, hosts);
    }
    cluster->netns = std::move(netns);
    cluster->host_network = bwrap && cluster->netns == nullptr;
    // A failed attempt's files go now, off the loop thread and before the
    // caller hears of it.
    if (!status.ok()) dirs.reset();
    loop_.Post([this, alive, cluster = std::move(cluster), done = std::move(done), status,
                dirs = std::move(dirs), netns_denied]() mutable {
      if (!alive.lock()) return;  // the provider is gone: `dirs` cleans up
      if (netns_denied) netns_unavailable_ = true;
      if (!status.ok()) {
        instances_in_use_ -= static_cast<int64_t>(cluster->instances.size());
        // ResourceExhausted tells the engine that capacity is short and to
        // ask again later, keeping the job Pending: a full file system is
        // not that, and asking again would keep the job Pending for as long
        // as the disk stays full.
        const absl::StatusCode code = absl::IsResourceExhausted(status)
                                          ? absl::StatusCode::kFailedPrecondition
                                          : status.code();
        done(absl::Status(code, absl::StrCat("could not create local instances: ",
                                             status.message())));
        return;
      }
      cluster->lock = std::move(dirs->lock);
      Cluster result = cluster->cluster;
      clusters_[result.id] = std::move(cluster);
      done(std::move(result));
    });
    guard->Reset();
  });
}

void LocalClusterProvider::PrepareImage(const Cluster& cluster, std::string_view image,
                                        DoneCallback done) {
  LocalCluster* c = Find(cluster.id);
  if (c == nullptr) {
    PostIfAlive([done = std::move(done), id = cluster.id]() mutable {
      done(absl::FailedPreconditionError(absl::StrCat("unknown local cluster '", id, "'")));
    });
    return;
  }
  struct Work {
    std::string dir, ml_dir, tmp_dir;
    std::vector<std::shared_ptr<ContainerProc>> wait_for;
    std::shared_ptr<Scrub> scrub;  // the tree is being made fresh already
    std::vector<std::string> trash;  // the old tree, to delete once `done` has run
    std::shared_ptr<RunLog> last_log;  // where to say what of it cannot be deleted
    std::shared_ptr<RunLog> next_log;  // ... and what preparing the next run leaves
    std::string image_root, program_dir;
    absl::Status status;
  };
  auto work = std::make_shared<std::vector<Work>>();
  for (LocalInstance& inst : c->instances) {
    Work w;
    w.dir = inst.dir;
    w.ml_dir = inst.ml_dir;
    w.tmp_dir = inst.tmp_dir;
    w.last_log = inst.last_log;
    if (inst.next_log == nullptr) inst.next_log = std::make_shared<RunLog>();
    w.next_log = inst.next_log;
    if (inst.current) w.wait_for.push_back(inst.current);
    for (auto& r : inst.retired) w.wait_for.push_back(r);
    w.scrub = std::move(inst.scrub);
    inst.scrub.reset();
    work->push_back(std::move(w));
  }
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, work, image = std::string(image), id = cluster.id, done = std::move(done),
              guard, shared = options_.shared_image_cache,
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
    absl::StatusOr<ImageSource> src = ResolveImage(image);
    std::string shared_target;
    if (src.ok() && shared) {
      shared_target = absl::StrCat(options_.state_dir, "/image-cache/", src->key);
      absl::MutexLock lock(&image_mu_);
      absl::Status s = internal::MakeDirs(internal::DirName(shared_target));
      absl::Status left;
      if (s.ok()) s = Materialize(*src, shared_target, left);
      std::vector<std::shared_ptr<RunLog>> runs;
      for (const Work& w : *work) runs.push_back(w.next_log);
      s = UnpackLeftover(s, left, "the scratch copy of the image in the shared image cache could "
                         "not all be deleted", kLeftForNextProvider, runs);
      if (!s.ok()) src = s;
    }
    auto prepare = [&](Work& w) {
      // Nothing of an earlier job survives: the whole /opt/ml tree and the
      // scratch space are made anew; the image cache stays.
      for (auto& p : w.wait_for) p->finished.WaitForNotification();
      bool fresh = false;
      if (w.scrub != nullptr) {
        // Recycled: made fresh after the last job (and nothing ran since).
        w.scrub->done.WaitForNotification();
        fresh = w.scrub->status.ok();
      }
      if (!fresh) w.status = FreshInstanceTree(w.dir, w.ml_dir, w.tmp_dir, w.trash);
      if (!w.status.ok()) return;
      if (!src.ok()) {
        w.status = src.status();
        return;
      }
      const std::string cache = absl::StrCat(w.dir, "/image-cache");
      const std::string target = absl::StrCat(cache, "/", src->key);
      if (!internal::Exists(target)) {
        // An instance holds one image: drop the others. (What cannot be
        // deleted does not keep this job from running: Dispose tries again.)
        if (absl::Status s = internal::ResetDir(cache); !s.ok()) {
          NoteForRun(w.last_log, LeftoverText("the instance's earlier images could not all be "
                                              "deleted", s, kLeftForDispose));
        }
        if (shared) {
          if (symlink(shared_target.c_str(), target.c_str()) != 0) {
            w.status = internal::ErrnoStatus(errno, "link", target);
          }
        } else {
          absl::Status left;
          w.status = Materialize(*src, target, left);
          w.status = UnpackLeftover(w.status, left, "the scratch copy of the image in the "
                                    "instance's image cache could not all be deleted",
                                    kLeftForDispose, {w.next_log});
        }
        if (!w.status.ok()) return;
      }
      w.image_root = target;
      const std::string opt_program = absl::StrCat(target, "/opt/program");
      w.program_dir = internal::IsDirectory(opt_program) ? opt_program : target;
      const std::string code = absl::StrCat(target, "/opt/ml/code");
      if (internal::IsDirectory(code)) {
        w.status = internal::CopyTree(code, absl::StrCat(w.ml_dir, "/code"));
      }
    };
    std::vector<std::thread> threads;
    for (size_t i = 1; i < work->size(); ++i) threads.emplace_back(prepare, std::ref((*work)[i]));
    if (!work->empty()) prepare((*work)[0]);
    for (std::thread& t : threads) t.join();
    // (last_log, trash)
    std::vector<std::pair<std::shared_ptr<RunLog>, std::vector<std::string>>> trash;
    for (Work& w : *work) trash.emplace_back(w.last_log, std::move(w.trash));
    loop_.Post([this, alive, work, id, done = std::move(done)]() mutable {
      if (!alive.lock()) return;
      LocalCluster* c = Find(id);
      if (c == nullptr) return;  // released meanwhile: dropped
      absl::Status status;
      for (size_t i = 0; i < work->size() && i < c->instances.size(); ++i) {
        const Work& w = (*work)[i];
        if (!w.status.ok()) {
          if (status.ok()) {
            status = absl::Status(w.status.code(), absl::StrCat(c->instances[i].info.host_name,
                                                                ": ", w.status.message()));
          }
          continue;
        }
        c->instances[i].image_root = w.image_root;
        c->instances[i].program_dir = w.program_dir;
        c->instances[i].tree_fresh = true;
      }
      done(status);
    });
    // The earlier job's files, once the job in hand has its fresh tree.
    for (auto& [last_log, files] : trash) EmptyTrash(last_log, files);
    guard->Reset();
  });
}

void LocalClusterProvider::StartContainers(const JobContext& job, ContainerEvents& events,
                                           DoneCallback started) {
  auto fail = [&](absl::Status s) {
    PostIfAlive([started = std::move(started), s]() mutable { started(s); });
  };
  LocalCluster* c = Find(job.cluster.id);
  if (c == nullptr) {
    fail(absl::FailedPreconditionError(
        absl::StrCat("unknown local cluster '", job.cluster.id, "'")));
    return;
  }
  for (const LocalInstance& inst : c->instances) {
    if (inst.lost) {
      fail(absl::FailedPreconditionError(
          absl::StrCat("instance ", inst.info.host_name, " of cluster '", c->cluster.id,
                       "' was lost")));
      return;
    }
    if (inst.program_dir.empty()) {
      fail(absl::FailedPreconditionError(absl::StrCat(
          "instance ", inst.info.host_name, ": the training image was not prepared")));
      return;
    }
    if (job.request.algorithm_specification().container_entrypoint_size() == 0 &&
        access(absl::StrCat(inst.program_dir, "/train").c_str(), X_OK) != 0) {
      fail(absl::FailedPreconditionError(absl::StrCat(
          "the image has no executable train program (looked for ", inst.program_dir,
          "/train); give one, or set AlgorithmSpecification.ContainerEntrypoint")));
      return;
    }
  }
  const v1::CreateTrainingJobRequest& request = job.request;
  const bool bwrap = options_.runtime == LocalRuntime::kBwrap;
  // Checkpoints.
  ObjectStore* checkpoint_store = nullptr;
  std::string checkpoint_path;  // as the container sees it
  if (request.has_checkpoint_config()) {
    if (options_.object_stores == nullptr) {
      fail(absl::FailedPreconditionError(
          "CheckpointConfig needs LocalOptions.object_stores, and this provider has none"));
      return;
    }
    absl::StatusOr<ObjectStore*> store =
        options_.object_stores->For(request.checkpoint_config().s3_uri());
    if (!store.ok()) {
      fail(absl::Status(store.status().code(),
                        absl::StrCat("CheckpointConfig.S3Uri: ", store.status().message())));
      return;
    }
    checkpoint_store = *store;
    checkpoint_path = request.checkpoint_config().local_path();
    while (checkpoint_path.size() > 1 && checkpoint_path.back() == '/') checkpoint_path.pop_back();
    if (checkpoint_path.empty()) checkpoint_path = kDefaultCheckpointPath;
    if (checkpoint_path[0] != '/' ||
        !internal::IsSafeRelativePath(std::string_view(checkpoint_path).substr(1))) {
      fail(absl::InvalidArgumentError(
          absl::StrCat("CheckpointConfig.LocalPath '", PathForMessage(checkpoint_path),
                       "' must be an absolute path without '.', '..' or empty components")));
      return;
    }
    // The process runtime cannot show the container another directory at a
    // host path: the path itself would be used, shared by every instance and
    // every job, and never emptied (a later job would restore an earlier
    // one's checkpoints). Only /opt/ml, which it maps to the instance's tree.
    if (!bwrap && !IsUnderContainerBase(checkpoint_path)) {
      fail(absl::InvalidArgumentError(absl::StrCat(
          "CheckpointConfig.LocalPath '", PathForMessage(checkpoint_path),
          "' is outside /opt/ml: on the local backend's process runtime it must be under "
          "/opt/ml (the default is /opt/ml/checkpoints), which maps to each instance's own "
          "directory; the bwrap runtime maps any path")));
      return;
    }
  }
  const auto& spec = request.algorithm_specification();
  const bool isolated = request.enable_network_isolation();

  c->run++;
  c->events = &events;
  auto start = std::make_shared<StartState>();
  {
    absl::MutexLock lock(&start->mu);
    start->remaining = static_cast<int>(c->instances.size());
  }
  start->started = std::move(started);
  const std::string epoch = absl::StrCat(absl::ToUnixSeconds(absl::Now()));
  // The job's log directory name (the engine's job names are safe already).
  std::string log_job(job.job_name);
  std::replace(log_job.begin(), log_job.end(), '/', '_');
  if (!internal::IsSafeRelativePath(log_job)) {
    log_job = absl::StrCat("job-", internal::StableHashHex(log_job));
  }
  for (size_t i = 0; i < c->instances.size(); ++i) {
    LocalInstance& inst = c->instances[i];
    // Join earlier runs that have finished; keep the others for the new run
    // to wait for.
    if (inst.current) inst.retired.push_back(std::move(inst.current));
    inst.retired.erase(std::remove_if(inst.retired.begin(), inst.retired.end(),
                                      [](const std::shared_ptr<ContainerProc>& p) {
                                        if (!p->finished.HasBeenNotified()) return false;
                                        if (p->thread.joinable()) p->thread.join();
                                        return true;
                                      }),
                       inst.retired.end());
    LaunchSpec ls;
    ls.cluster_id = c->cluster.id;
    ls.run = c->run;
    ls.index = i;
    ls.host = inst.info.host_name;
    ls.instance_dir = inst.dir;
    ls.ml_dir = inst.ml_dir;
    ls.tmp_dir = inst.tmp_dir;
    ls.log = std::exchange(inst.next_log, nullptr);
    if (ls.log == nullptr) ls.log = std::make_shared<RunLog>();
    ls.log->Name(
        absl::StrCat(options_.log_dir, "/", log_job, "/", inst.info.host_name, "-", epoch));
    ls.bwrap = bwrap;
    ls.run_as = run_as_;
    if (bwrap) {
      ls.seccomp = seccomp_;
    } else {
      // The image, read-only to the container (with the FastFile sources
      // CollectReadOnlyViews adds): a job cannot change what the instance's
      // next job runs.
      char real[PATH_MAX];
      if (realpath(inst.image_root.c_str(), real) != nullptr) ls.readonly_paths.push_back(real);
    }
    ls.sync_interval = options_.checkpoint_sync_interval;
    ls.drain_timeout = options_.output_drain_timeout;
    ls.wait_for = inst.retired;
    ContainerConfigInput in;
    in.request = &request;
    in.job_name = std::string(job.job_name);
    in.job_arn = std::string(job.job_arn);
    in.cluster = &c->cluster;
    in.instance = &inst.info;
    in.base_dir = bwrap ? kContainerBase : inst.ml_dir;
    in.program_dir = bwrap ? kContainerProgram : inst.program_dir;
    in.tmp_dir = bwrap ? "/tmp" : inst.tmp_dir;
    in.cpu_count = cpu_count_;
    in.network_interface_name = options_.network_interface_name;
    in.host_path = host_path_;
    // (The container user of the process runtime gets a home it may write:
    // the instance's scratch space.)
    in.home = run_as_.has_value() && !bwrap ? inst.tmp_dir : home_;
    ls.config = BuildContainerConfig(in);
    // The command line, as the container sees it.
    std::vector<std::string> command;
    if (spec.container_entrypoint_size() > 0) {
      command.assign(spec.container_entrypoint().begin(), spec.container_entrypoint().end());
    } else {
      command.push_back(absl::StrCat(kContainerProgram, "/train"));
    }
    command.insert(command.end(), spec.container_arguments().begin(),
                   spec.container_arguments().end());
    // Directories a run must find empty: already so when PrepareImage made the
    // tree and nothing ran since (the engine's way), else emptied now.
    // (Paths below the instance's directory: a run may have planted links
    // there, which are replaced, never followed.)
    if (!inst.tree_fresh) {
      ls.fresh_dirs = {"ml/model", "ml/output", "ml/output/data", "ml/output/intermediate",
                       kInstanceTmp};
    }
    std::string checkpoint_host;
    if (checkpoint_store != nullptr) {
      // Below /opt/ml: that place in the instance's tree; elsewhere (bwrap
      // only) a directory of the instance mounted there.
      const std::string checkpoint_rel =
          IsUnderContainerBase(checkpoint_path)
              ? absl::StrCat("ml", internal::Av(std::string_view(checkpoint_path).substr(
                                       std::string_view(kContainerBase).size())))
              : "checkpoints-local";
      checkpoint_host = absl::StrCat(inst.dir, "/", checkpoint_rel);
      ls.checkpoint_store = checkpoint_store;
      ls.checkpoint_uri = request.checkpoint_config().s3_uri();
      ls.checkpoint_dir = checkpoint_host;
      // (A fresh tree has /opt/ml/checkpoints, empty, and nothing else of this.)
      if (!inst.tree_fresh || checkpoint_rel != "ml/checkpoints") {
        ls.fresh_dirs.push_back(checkpoint_rel);
      }
    } else if (!inst.tree_fresh) {
      ls.fresh_dirs.push_back("ml/checkpoints");
    }
    inst.tree_fresh = false;
    if (bwrap) {
      std::vector<std::string>& a = ls.argv;
      // /tmp is the instance's scratch directory on disk (emptied between
      // runs, like the rest of the tree), not memory.
      a = {bwrap_program_};
      const std::vector<std::string> identity = BwrapIdentityArgs(run_as_);
      a.insert(a.end(), identity.begin(), identity.end());
      a.insert(a.end(), {"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind",
                         inst.tmp_dir, "/tmp"});
      // Hide Kiln's own files (other instances, logs, caches); what is below
      // the host's /tmp is hidden already.
      for (const std::string& hide : {options_.state_dir, options_.log_dir}) {
        if (!absl::StartsWith(hide, "/tmp/") &&
            (hide == options_.state_dir || !absl::StartsWith(hide, options_.state_dir + "/"))) {
          a.insert(a.end(), {"--tmpfs", hide});
        }
      }
      a.insert(a.end(), {"--tmpfs", "/opt", "--bind", inst.ml_dir, kContainerBase, "--ro-bind",
                         inst.program_dir, kContainerProgram});
      if (!c->hosts_file.empty()) a.insert(a.end(), {"--ro-bind", c->hosts_file, "/etc/hosts"});
      if (checkpoint_store != nullptr && !IsUnderContainerBase(checkpoint_path)) {
        a.insert(a.end(), {"--bind", checkpoint_host, checkpoint_path});
      }
      a.insert(a.end(), {"--unshare-pid", "--unshare-ipc", "--unshare-uts"});
      if (c->netns != nullptr) {
        ls.netns_fd = c->netns->holder.ns_fd;
      } else if (isolated) {
        a.push_back("--unshare-net");
      }
      a.insert(a.end(), {"--hostname", inst.info.host_name, "--die-with-parent", "--new-session",
                         "--info-fd", "3", "--chdir", kContainerBase, "--"});
      a.insert(a.end(), command.begin(), command.end());
      ls.cwd = inst.ml_dir;
    } else {
      // The container paths, on this host.
      for (std::string& arg : command) {
        arg = internal::Rebase(arg, kContainerBase, inst.ml_dir);
        arg = internal::Rebase(arg, kContainerProgram, inst.program_dir);
      }
      ls.argv = std::move(command);
      ls.cwd = inst.ml_dir;
    }
    auto proc = std::make_shared<ContainerProc>();
    ContainerProc* raw = proc.get();
    inst.current = proc;
    inst.last_log = ls.log;
    raw->thread = std::thread(&LocalClusterProvider::Supervise, &loop_,
                              std::weak_ptr<Alive>(alive_), this, std::move(ls), start, raw,
                              loop_.AcquireWork());
  }
}

void LocalClusterProvider::Supervise(EventLoop* loop, std::weak_ptr<Alive> alive,
                                     LocalClusterProvider* provider, LaunchSpec spec,
                                     std::shared_ptr<StartState> start, ContainerProc* proc,
                                     EventLoop::WorkGuard guard) {
  const std::string cluster_id = spec.cluster_id;
  const uint64_t run = spec.run;
  const size_t index = spec.index;
  auto post = [&](auto fn) {
    loop->Post([alive, fn = std::move(fn)]() mutable {
      if (alive.lock()) fn();
    });
  };
  auto report_start = [&](absl::Status s) {
    bool last = false;
    absl::Status result;
    {
      absl::MutexLock lock(&start->mu);
      if (!s.ok() && start->status.ok()) {
        start->status = absl::Status(s.code(), absl::StrCat(spec.host, ": ", s.message()));
      }
      last = --start->remaining == 0;
      result = start->status;
    }
    if (!last) return;
    post([provider, cluster_id, run, start, result]() mutable {
      if (provider->IsCurrentRun(cluster_id, run) && start->started) {
        std::exchange(start->started, nullptr)(result);
      }
    });
  };
  auto finish = [&] {
    proc->finished.Notify();
    guard.Reset();
  };
  // Lines for observers, posted in batches.
  std::vector<std::string> lines;
  auto post_lines = [&] {
    if (lines.empty()) return;
    post([provider, cluster_id, run, index, batch = std::move(lines)] {
      provider->DeliverLines(cluster_id, run, index, batch);
    });
    lines.clear();
  };
  LogStream log(*spec.log);
  auto log_platform = [&](std::string_view text) {
    // A line of Kiln's own: in the log stream only, while it can be written.
    // Once it cannot, observers get it instead: nothing Kiln says is lost.
    // (Before the stream is opened, a start failure says it all.)
    if (!log.broken()) {
      std::string broke = log.AppendPlatformLine(text);
      if (broke.empty()) return;
      lines.push_back(std::move(broke));
    }
    lines.push_back(absl::StrCat("[kiln] ", internal::Av(text)));
    post_lines();
  };

  for (auto& p : spec.wait_for) p->finished.WaitForNotification();
  spec.wait_for.clear();

  // A fresh run: model, output, scratch (and checkpoints) empty; the config
  // files written.
  absl::Status status;
  for (const std::string& d : spec.fresh_dirs) {
    if (status.ok()) status = internal::ResetDirBelow(spec.instance_dir, d);
  }
  // (Made anew too: an earlier run may have planted a link on the way.)
  const std::string config_dir = absl::StrCat(spec.ml_dir, "/input/config");
  if (status.ok()) status = internal::ResetDirBelow(spec.instance_dir, "ml/input/config");
  if (status.ok()) status = internal::WriteConfigFiles(spec.config, config_dir);
  for (const std::string& ch : spec.config.channels) {
    if (status.ok()) status = internal::MakeDirs(absl::StrCat(spec.ml_dir, "/input/data/", ch));
  }
  if (status.ok()) status = spec.bwrap ? MountFastFileViews(spec) : CollectReadOnlyViews(spec);
  std::unique_ptr<CheckpointSync> sync;
  if (status.ok() && spec.checkpoint_store != nullptr) {
    sync = std::make_unique<CheckpointSync>(*spec.checkpoint_store, spec.checkpoint_uri,
                                            spec.checkpoint_dir, spec.instance_dir);
    // Its errors say "checkpoint restore" and name the object or folder.
    status = sync->Restore();
  }
  if (status.ok() && spec.run_as.has_value()) status = GiveTreeToContainer(spec);
  std::string program;
  if (status.ok()) {
    auto path_it = spec.config.env.find("PATH");
    absl::StatusOr<std::string> found = internal::FindProgram(
        spec.argv[0], path_it == spec.config.env.end() ? "" : path_it->second);
    if (found.ok()) {
      program = *found;
      spec.argv[0] = program;
    } else {
      status = found.status();
    }
  }
  {
    absl::MutexLock lock(&proc->mu);
    if (status.ok() && proc->cancelled) status = absl::AbortedError("the cluster was released");
  }
  if (status.ok()) {
    // A log stream that cannot be written does not fail the job (as it does
    // not mid-run): observers are told, and get every line.
    std::string broke = log.Open();
    if (!broke.empty()) {
      lines.push_back(std::move(broke));
      post_lines();
    }
  }
  // What preparing the instance for this run left (NoteForRun): the stream's
  // first lines, or observers' when the run ends before it has a stream.
  for (const std::string& note : spec.log->TakeQueued()) {
    if (status.ok()) {
      log_platform(note);
    } else {
      lines.push_back(absl::StrCat("[kiln] ", note));
    }
  }
  post_lines();
  int out[2] = {-1, -1};
  int info[2] = {-1, -1};
  if (status.ok() && pipe2(out, O_CLOEXEC) != 0) {
    status = internal::ErrnoStatus(errno, "pipe", "output");
  }
  if (status.ok() && spec.bwrap && pipe2(info, O_CLOEXEC) != 0) {
    status = internal::ErrnoStatus(errno, "pipe", "bwrap info");
  }
  auto close_fd = [](int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  };
  auto close_all = [&] {
    close_fd(out[0]);
    close_fd(out[1]);
    close_fd(info[0]);
    close_fd(info[1]);
    std::string broke = log.Close();
    if (!broke.empty()) {
      lines.push_back(std::move(broke));
      post_lines();
    }
  };
  pid_t pid = -1;
  bool kept = false;
  if (status.ok()) {
    internal::SpawnSpec ss;
    ss.argv = spec.argv;
    for (const auto& [k, v] : spec.config.env) ss.env.push_back(absl::StrCat(k, "=", v));
    ss.cwd = spec.cwd;
    ss.output_fd = out[1];
    ss.netns_fd = spec.netns_fd;
    ss.run_as = spec.run_as;
    ss.readonly_paths = spec.readonly_paths;
    // bwrap ends its sandbox with this process (--die-with-parent and a PID
    // namespace); the process runtime has the keeper do it.
    ss.keeper = !spec.bwrap;
    std::vector<internal::UniqueFd> bwrap_fds;
    absl::StatusOr<pid_t> spawned = absl::UnknownError("not started");
    if (spec.bwrap) {
      ss.fds.push_back(info[1]);
      absl::Status prepared = PrepareBwrapCommand(spec, ss.argv, ss.env, bwrap_fds);
      for (const internal::UniqueFd& fd : bwrap_fds) ss.fds.push_back(fd.get());
      spawned = prepared.ok() ? internal::Spawn(ss) : absl::StatusOr<pid_t>(prepared);
    } else {
      spawned = internal::Spawn(ss);
    }
    bwrap_fds.clear();
    close_fd(out[1]);
    close_fd(info[1]);
    if (spawned.ok()) {
      pid = *spawned;
      // (A spawn that ran the program directly marked the keeper unusable
      // first.)
      kept = ss.keeper && !internal::KeeperUnusable();
      if (ss.keeper && !kept) {
        log_platform(
            "the process keeper cannot run here (a memory file cannot be executed): the "
            "container's processes would outlive a crash of the process running Kiln");
      }
    } else {
      status = spawned.status();
    }
  }
  if (!status.ok()) {
    log_platform(absl::StrCat("could not start the container: ", status.message()));
    close_all();
    report_start(status);
    finish();
    return;
  }
  const int pidfd = internal::PidfdOpen(pid);
  {
    absl::MutexLock lock(&proc->mu);
    proc->pid = pid;
    proc->kept = kept;
  }
  LineSplitter splitter;
  auto handle_output = [&](std::string_view chunk) {
    // (Observers learn that the stream broke before the lines it lacks.)
    std::string broke = log.AppendOutput(chunk);
    if (!broke.empty()) lines.push_back(std::move(broke));
    splitter.Add(chunk, lines);
  };
  char buf[1 << 16];
  // bwrap: wait until the sandbox is set up (it reports its init's pid).
  bool sandbox_up = !spec.bwrap;
  if (spec.bwrap) {
    // One JSON object; read until it parses (or the pipe closes).
    std::string info_text;
    absl::StatusOr<kiln::internal::JsonValue> doc = absl::NotFoundError("no sandbox information");
    while (true) {
      ssize_t n = read(info[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      info_text.append(buf, static_cast<size_t>(n));
      doc = kiln::internal::ParseJsonValue(info_text);
      if (doc.ok()) break;
    }
    close_fd(info[0]);
    const kiln::internal::JsonValue* child = doc.ok() ? doc->Find("child-pid") : nullptr;
    absl::StatusOr<int64_t> child_pid =
        child != nullptr ? child->AsInt64() : absl::StatusOr<int64_t>(absl::NotFoundError(""));
    if (child_pid.ok()) {
      const pid_t sandbox = static_cast<pid_t>(*child_pid);
      const int sandbox_fd = internal::PidfdOpen(sandbox);
      const std::string ns = ReadLink(absl::StrCat("/proc/", sandbox, "/ns/pid"));
      absl::MutexLock lock(&proc->mu);
      proc->sandbox_pid = sandbox;
      proc->sandbox_pidfd = sandbox_fd;
      proc->sandbox_ns = ns;
      sandbox_up = sandbox_fd >= 0 && !ns.empty();
    }
  }
  {
    absl::MutexLock lock(&proc->mu);
    if (proc->cancelled) SignalLocked(*proc, SIGKILL);
    if (proc->pending_signal != 0) SignalLocked(*proc, std::exchange(proc->pending_signal, 0));
  }

  // Reads output until the main process exits, syncing checkpoints meanwhile.
  auto read_until_exit = [&] {
    bool out_open = true;
    absl::Time next_sync = sync ? absl::Now() + spec.sync_interval : absl::InfiniteFuture();
    while (true) {
      int timeout = -1;
      if (sync) {
        timeout = static_cast<int>(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(next_sync - absl::Now()) + 1));
      }
      if (pidfd < 0) {
        // No pidfd (an old kernel): look for the exit now and then.
        siginfo_t info;
        info.si_pid = 0;
        if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == pid) {
          break;
        }
        timeout = timeout < 0 ? 50 : std::min(timeout, 50);
      }
      struct pollfd fds[2] = {{pidfd, POLLIN, 0}, {out[0], POLLIN, 0}};
      const int r = poll(fds, out_open ? 2 : 1, timeout);
      if (r < 0 && errno != EINTR) break;
      if (out_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ssize_t n = read(out[0], buf, sizeof(buf));
        if (n > 0) {
          handle_output(std::string_view(buf, static_cast<size_t>(n)));
          post_lines();
        } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          out_open = false;
        }
      }
      if (pidfd >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) break;
      if (sync && absl::Now() >= next_sync) {
        CheckpointSyncStats done;
        absl::Status s = sync->SyncOnce(&done);
        if (!s.ok()) log_platform(CheckpointSyncFailure(/*final=*/false, s, done));
        next_sync = absl::Now() + spec.sync_interval;
      }
    }
  };
  struct rusage usage;
  std::memset(&usage, 0, sizeof(usage));
  auto reap = [&]() -> int {
    int wstatus = 0;
    absl::MutexLock lock(&proc->mu);
    // What the main process left behind ends with it, as in a container.
    kill(-pid, SIGKILL);
    if (proc->sandbox_pidfd >= 0) internal::PidfdSendSignal(proc->sandbox_pidfd, SIGKILL);
    while (wait4(pid, &wstatus, 0, &usage) < 0 && errno == EINTR) {
    }
    proc->reaped = true;
    if (proc->sandbox_pidfd >= 0) close(proc->sandbox_pidfd);
    proc->sandbox_pidfd = -1;
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return 1;
  };
  auto drain = [&] {
    const absl::Time deadline = absl::Now() + spec.drain_timeout;
    while (out[0] >= 0) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) break;
      struct pollfd fd = {out[0], POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(left)) <= 0) break;
      ssize_t n = read(out[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      handle_output(std::string_view(buf, static_cast<size_t>(n)));
    }
    splitter.Flush(lines);
  };

  if (!sandbox_up) {
    // bubblewrap could not set the sandbox up: its message is in the output.
    // The output is anything a program printed (escape sequences, bytes that
    // are not UTF-8, pages of it): shown escaped and cut, as input is.
    const int code = reap();
    drain();
    std::string output;
    for (const std::string& l : lines) absl::StrAppend(&output, output.empty() ? "" : "; ", l);
    lines.clear();
    const std::string text = kiln::internal::TextForMessage(output, kMaxFailureBytes);
    log_platform(absl::StrCat("bubblewrap failed (exit ", code, "): ", text));
    if (pidfd >= 0) close(pidfd);
    close_all();
    report_start(absl::InternalError(absl::StrCat("bubblewrap could not start the container (exit ",
                                                  code, "): ", text)));
    finish();
    return;
  }
  report_start(absl::OkStatus());
  read_until_exit();
  ContainerExit exit;
  exit.exit_code = reap();
  if (pidfd >= 0) close(pidfd);
  drain();
  post_lines();
  // Resource use of the container's process tree (what it waited for), in
  // the log stream.
  log_platform(absl::StrFormat(
      "%s exited with %d: cpu %.3f s user, %.3f s system; max resident set %d KiB", spec.host,
      exit.exit_code, usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
      usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6, usage.ru_maxrss));
  absl::StatusOr<std::string> failure =
      internal::ReadFilePrefixBelow(spec.instance_dir, "ml/output/failure",
                                    absl::StrCat(spec.host, ":/opt/ml/output/failure"),
                                    kMaxFailureBytes + 4);
  if (failure.ok()) {
    exit.failure_text = TrimUtf8(*std::move(failure), kMaxFailureBytes);
  } else if (!absl::IsNotFound(failure.status())) {
    // There, but not read: the FailureReason says why rather than reading as
    // if the container had written none.
    exit.failure_error = std::string(failure.status().message());
  }
  bool cancelled;
  {
    absl::MutexLock lock(&proc->mu);
    cancelled = proc->cancelled;
  }
  if (sync && !cancelled) {
    CheckpointSyncStats done;
    absl::Status s = sync->SyncOnce(&done);
    if (!s.ok()) log_platform(CheckpointSyncFailure(/*final=*/true, s, done));
  }
  close_all();
  if (!cancelled) {
    post([provider, cluster_id, run, index, exit] {
      provider->DeliverExit(cluster_id, run, index, exit);
    });
  }
  finish();
}

void LocalClusterProvider::DeliverLines(const std::string& cluster_id, uint64_t run, size_t index,
                                        const std::vector<std::string>& lines) {
  LocalCluster* c = Find(cluster_id);
  if (c == nullptr || c->run != run || c->events == nullptr || index >= c->instances.size()) return;
  const LocalInstance& inst = c->instances[index];
  if (inst.lost) return;
  for (const std::string& line : lines) {
    // The observer may release the cluster; stop then.
    c = Find(cluster_id);
    if (c == nullptr || c->run != run || c->instances[index].lost) return;
    c->events->OnLogLine(c->instances[index].info, line);
  }
}

void LocalClusterProvider::DeliverExit(const std::string& cluster_id, uint64_t run, size_t index,
                                       const ContainerExit& exit) {
  LocalCluster* c = Find(cluster_id);
  if (c == nullptr || c->run != run || c->events == nullptr || index >= c->instances.size()) return;
  if (c->instances[index].lost) return;
  c->events->OnExit(c->instances[index].info, exit);
}

void LocalClusterProvider::Signal(const Cluster& cluster, int signal) {
  LocalCluster* c = Find(cluster.id);
  if (c == nullptr) return;
  for (LocalInstance& inst : c->instances) {
    if (inst.current == nullptr) continue;
    absl::MutexLock lock(&inst.current->mu);
    SignalLocked(*inst.current, signal);
  }
}

void LocalClusterProvider::UploadArtifacts(const JobContext& job, ArtifactsCallback done) {
  LocalCluster* c = Find(job.cluster.id);
  const auto& out = job.request.output_data_config();
  const std::string base =
      JoinUri(out.s3_output_path(), absl::StrCat(internal::Av(job.job_name), "/output"));
  // CompressionType NONE: the model's files as they are, below model/ (the
  // model's URI is that prefix); otherwise model.tar.gz. output.tar.gz is
  // gzip-compressed either way.
  const bool compress_model = absl::AsciiStrToUpper(out.compression_type()) != "NONE";
  const std::string model_uri = absl::StrCat(base, compress_model ? "/model.tar.gz" : "/model/");
  const std::string output_uri = absl::StrCat(base, "/output.tar.gz");
  absl::Status error;
  if (c == nullptr) {
    error = absl::FailedPreconditionError(
        absl::StrCat("unknown local cluster '", job.cluster.id, "'"));
  } else if (options_.object_stores == nullptr) {
    error = absl::FailedPreconditionError(
        "uploading artifacts needs LocalOptions.object_stores, and this provider has none");
  }
  if (!error.ok()) {
    PostIfAlive([done = std::move(done), error]() mutable { done(error); });
    return;
  }
  // The trees are read below each instance's directory, never through a
  // link the container planted (internal::TreeRoot).
  std::vector<internal::TreeRoot> model_roots, data_roots;
  std::vector<std::shared_ptr<RunLog>> logs;  // each instance's last run's, by root
  for (const LocalInstance& inst : c->instances) {
    logs.push_back(inst.last_log);
    const std::string& host = inst.info.host_name;
    model_roots.push_back({inst.dir, "ml/model", absl::StrCat(host, ":/opt/ml/model")});
    data_roots.push_back({inst.dir, "ml/output/data", absl::StrCat(host, ":/opt/ml/output/data")});
  }
  // (Numbered per process: providers of one process may share a state directory.)
  static std::atomic<uint64_t> next_upload{0};
  const std::string tmp_base = absl::StrCat(options_.state_dir, "/tmp/upload-", getpid(), "-",
                                            next_upload.fetch_add(1) + 1);
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, id = c->cluster.id, model_roots, data_roots, compress_model, tmp_base,
              model_uri, output_uri, logs, done = std::move(done), guard,
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
    // What the archives and the upload cannot take (FIFOs, sockets, device
    // nodes) is named in the instance's log stream rather than dropped
    // without a word.
    std::vector<internal::LeftOut> left_out;
    auto note_left_out = [&](std::string_view what) {
      std::map<size_t, std::vector<std::string>> by_root;
      for (internal::LeftOut& l : left_out) by_root[l.root].push_back(std::move(l.display));
      left_out.clear();
      for (auto& [root, names] : by_root) {
        if (root >= logs.size()) continue;
        const size_t shown = std::min<size_t>(names.size(), 10);
        NoteForRun(logs[root],
                   absl::StrCat(internal::Av(what), " leaves out what is not a file, directory or link: ",
                                PathForMessage(absl::StrJoin(names.begin(),
                                                             names.begin() + shown, ", ")),
                                names.size() > shown
                                    ? absl::StrCat(" and ", names.size() - shown, " more")
                                    : ""));
      }
    };
    auto upload_tar = [&](const std::vector<internal::TreeRoot>& roots, const std::string& uri,
                          const std::string& what) -> absl::Status {
      const std::string tmp = absl::StrCat(tmp_base, "-", what);
      absl::Status s = internal::MakeDirs(internal::DirName(tmp));
      // Locked while it exists: a provider made meanwhile on this state
      // directory leaves it alone (ClaimStaleScratch).
      absl::StatusOr<internal::UniqueFd> fd = internal::UniqueFd();
      if (s.ok()) fd = MakeLockedScratch(tmp, /*dir=*/false);
      if (!fd.ok()) s = fd.status();
      if (s.ok()) s = internal::WriteTar(roots, fd->get(), tmp, /*gzip=*/true, &left_out);
      note_left_out(absl::StrCat("the ", what, " archive"));
      if (s.ok()) {
        absl::StatusOr<ObjectStore*> store = options_.object_stores->For(uri);
        s = store.ok() ? (*store)->PutFromFile(uri, tmp) : store.status();
      }
      if (fd.ok()) unlink(tmp.c_str());  // (then the lock goes)
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat(PathForMessage(uri), ": ", s.message()));
      }
      return s;
    };
    auto upload_files = [&](const std::vector<internal::TreeRoot>& roots,
                            const std::string& prefix) -> absl::Status {
      absl::StatusOr<ObjectStore*> store = options_.object_stores->For(prefix);
      if (!store.ok()) {
        return absl::Status(store.status().code(),
                            absl::StrCat(PathForMessage(prefix), ": ", store.status().message()));
      }
      // Each file goes from the descriptor it was opened as (its /proc
      // name), never from a path a container could have changed since.
      absl::Status s = internal::ForEachMergedFile(
          roots,
          [&](const std::string& rel, int fd, int64_t) -> absl::Status {
            const std::string uri = absl::StrCat(prefix, rel);
            absl::Status s = (*store)->PutFromFile(uri, absl::StrCat("/proc/self/fd/", fd));
            if (!s.ok()) {
              return absl::Status(s.code(), absl::StrCat(PathForMessage(uri), ": ", s.message()));
            }
            return s;
          },
          &left_out);
      note_left_out("the model upload");
      return s;
    };
    absl::Status s = compress_model ? upload_tar(model_roots, model_uri, "model")
                                    : upload_files(model_roots, model_uri);
    if (s.ok()) s = upload_tar(data_roots, output_uri, "output");
    absl::StatusOr<ArtifactsResult> result =
        s.ok() ? absl::StatusOr<ArtifactsResult>(ArtifactsResult{model_uri}) : s;
    loop_.Post([this, alive, id, result = std::move(result), done = std::move(done)]() mutable {
      if (!alive.lock() || Find(id) == nullptr) return;
      done(std::move(result));
    });
    guard->Reset();
  });
}

absl::Status LocalClusterProvider::InjectInterruption(std::string_view instance_id,
                                                      InterruptionKind kind,
                                                      absl::Duration notice) {
  const size_t slash = instance_id.find('/');
  LocalCluster* c = slash == std::string_view::npos
                        ? nullptr
                        : Find(std::string(instance_id.substr(0, slash)));
  size_t index = 0;
  if (c != nullptr) {
    while (index < c->instances.size() && c->instances[index].info.id != instance_id) ++index;
  }
  if (c == nullptr || index == c->instances.size()) {
    return absl::NotFoundError(absl::StrCat("no local instance '", internal::Av(instance_id), "'"));
  }
  LocalInstance& inst = c->instances[index];
  if (inst.lost) {
    return absl::FailedPreconditionError(
        absl::StrCat("instance '", internal::Av(instance_id), "' is already lost"));
  }
  const std::string cluster_id = c->cluster.id;
  if (kind == InterruptionKind::kInstanceLoss) {
    LoseInstance(cluster_id, index);
    return absl::OkStatus();
  }
  if (inst.loss_timer.valid()) loop_.Cancel(inst.loss_timer);
  const absl::Time deadline = loop_.Now() + notice;
  PostIfAlive([this, cluster_id, index, deadline] {
    LocalCluster* c = Find(cluster_id);
    if (c == nullptr || listener_ == nullptr || c->instances[index].lost) return;
    listener_->OnInterruptionNotice(c->cluster, c->instances[index].info, deadline);
  });
  inst.loss_timer = loop_.ScheduleAfter(notice, [this, cluster_id, index,
                                                 alive = std::weak_ptr<Alive>(alive_)] {
    if (!alive.lock()) return;
    LocalCluster* c = Find(cluster_id);
    if (c == nullptr || c->instances[index].lost) return;
    c->instances[index].loss_timer = TimerHandle();
    LoseInstance(cluster_id, index);
  });
  return absl::OkStatus();
}

void LocalClusterProvider::LoseInstance(const std::string& cluster_id, size_t index) {
  LocalCluster* c = Find(cluster_id);
  if (c == nullptr) return;
  LocalInstance& inst = c->instances[index];
  inst.lost = true;
  if (inst.current) KillProc(*inst.current, /*cancel=*/true);
  PostIfAlive([this, cluster_id, index] {
    LocalCluster* c = Find(cluster_id);
    if (c == nullptr || listener_ == nullptr) return;
    listener_->OnInstanceLost(c->cluster, c->instances[index].info);
  });
}

void LocalClusterProvider::Recycle(const Cluster& cluster) {
  LocalCluster* c = Find(cluster.id);
  if (c == nullptr) return;
  for (LocalInstance& inst : c->instances) {
    if (inst.scrub != nullptr || inst.lost) continue;
    auto scrub = std::make_shared<Scrub>();
    inst.scrub = scrub;
    std::vector<std::shared_ptr<ContainerProc>> wait_for = inst.retired;
    if (inst.current) wait_for.push_back(inst.current);
    // The job's files go now rather than when the next job starts. No work
    // guard: nothing is posted back; PrepareImage and Dispose wait for it.
    tasks_.Run([scrub, wait_for = std::move(wait_for), dir = inst.dir, ml_dir = inst.ml_dir,
                tmp_dir = inst.tmp_dir, last_log = inst.last_log] {
      for (auto& p : wait_for) p->finished.WaitForNotification();
      std::vector<std::string> trash;
      scrub->status = FreshInstanceTree(dir, ml_dir, tmp_dir, trash);
      scrub->done.Notify();
      EmptyTrash(last_log, trash);
      scrub->trash_gone.Notify();
    });
  }
}

void LocalClusterProvider::Release(const Cluster& cluster) {
  auto it = clusters_.find(cluster.id);
  if (it == clusters_.end()) return;
  std::unique_ptr<LocalCluster> c = std::move(it->second);
  clusters_.erase(it);
  Dispose(std::move(c));
}

void LocalClusterProvider::Dispose(std::unique_ptr<LocalCluster> c) {
  instances_in_use_ -= static_cast<int64_t>(c->instances.size());
  for (LocalInstance& inst : c->instances) {
    if (inst.loss_timer.valid()) loop_.Cancel(inst.loss_timer);
    if (inst.current) KillProc(*inst.current, /*cancel=*/true);
    for (auto& p : inst.retired) KillProc(*p, /*cancel=*/true);
  }
  // Waiting for the supervisors and removing the files can take a moment:
  // not on the loop thread.
  tasks_.Run([c = std::move(c)]() mutable {
    for (LocalInstance& inst : c->instances) {
      if (inst.scrub != nullptr) inst.scrub->trash_gone.WaitForNotification();
      if (inst.current) inst.retired.push_back(std::move(inst.current));
      for (auto& p : inst.retired) {
        p->finished.WaitForNotification();
        if (p->thread.joinable()) p->thread.join();
      }
    }
    c->netns.reset();
    // What cannot be deleted (trash and images that already resisted
    // included) is said in each instance's last log stream, and stays for a
    // provider made later on the state directory to try again.
    bool left = false;
    for (const LocalInstance& inst : c->instances) {
      absl::Status s = internal::RemoveTree(inst.dir);
      if (s.ok()) continue;
      left = true;
      NoteForRun(inst.last_log, LeftoverText("the instance's files could not all be deleted "
                                             "when its cluster was released",
                                             s, kLeftForNextProvider));
    }
    if (!internal::RemoveTree(c->dir).ok()) left = true;
    if (left && c->lock != nullptr) c->lock->KeepFile();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterProvider>> NewLocalClusterProvider(EventLoop& loop,
                                                                         LocalOptions options) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("LocalOptions.state_dir is required");
  }
  absl::Status s = internal::MakeDirs(options.state_dir);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LocalOptions.state_dir '", options.state_dir, "': ", s.message()));
  }
  char real[PATH_MAX];
  if (realpath(options.state_dir.c_str(), real) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("LocalOptions.state_dir '", options.state_dir, "': ", std::strerror(errno)));
  }
  options.state_dir = real;
  for (const char* sub : {"/instances", "/locks", "/logs", "/tmp"}) {
    s = internal::MakeDirs(absl::StrCat(options.state_dir, sub));
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("LocalOptions.state_dir: ", s.message()));
    }
  }
  if (!options.log_dir.empty()) {
    s = internal::MakeDirs(options.log_dir);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("LocalOptions.log_dir: ", s.message()));
    }
    if (realpath(options.log_dir.c_str(), real) != nullptr) options.log_dir = real;
  }
  RuntimeSetup runtime;
  // Who the containers are: another user than this process's own needs root.
  const uid_t euid = geteuid();
  const gid_t egid = getegid();
  const ContainerUser user = options.container_user.value_or(
      euid == 0 ? ContainerUser{} : ContainerUser{static_cast<uint32_t>(euid),
                                                  static_cast<uint32_t>(egid)});
  if (user.uid != euid || user.gid != egid) {
    if (euid != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "LocalOptions.container_user %d:%d: only a provider running as root can run "
          "containers as another user than its own (%d:%d)",
          user.uid, user.gid, euid, egid));
    }
    runtime.run_as = internal::Credentials{static_cast<uid_t>(user.uid),
                                           static_cast<gid_t>(user.gid)};
    for (const auto& [field, dir] :
         {std::pair<const char*, const std::string&>{"state_dir", options.state_dir},
          {"log_dir", options.log_dir}}) {
      if (dir.empty()) continue;
      s = internal::CheckSearchable(dir, user.uid, user.gid);
      if (!s.ok()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "LocalOptions.%s '%s': the container user %d:%d cannot reach it: %s; make it "
            "searchable (chmod o+x), choose another directory, or set "
            "LocalOptions.container_user",
            field, PathForMessage(dir), user.uid, user.gid, s.message()));
      }
    }
  }
  if (options.runtime == LocalRuntime::kBwrap) {
    const char* path = std::getenv("PATH");
    absl::StatusOr<std::string> found =
        internal::FindProgram(options.bwrap_path, path != nullptr ? path : kDefaultHostPath);
    if (!found.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the bwrap runtime needs bubblewrap: ", found.status().message()));
    }
    runtime.bwrap_program = *found;
    absl::StatusOr<std::string> filter = internal::ContainerSeccompFilter();
    if (!filter.ok()) return absl::FailedPreconditionError(filter.status().message());
    runtime.seccomp = std::make_shared<const std::string>(*std::move(filter));
    // It must actually work here (user namespaces, mounts), as the
    // container user.
    internal::SpawnSpec probe;
    probe.argv = {runtime.bwrap_program};
    const std::vector<std::string> identity = BwrapIdentityArgs(runtime.run_as);
    probe.argv.insert(probe.argv.end(), identity.begin(), identity.end());
    probe.argv.insert(probe.argv.end(), {"--ro-bind", "/", "/", "true"});
    probe.run_as = runtime.run_as;
    int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    probe.output_fd = null_fd;
    absl::StatusOr<pid_t> pid = internal::Spawn(probe);
    close(null_fd);
    int wstatus = 0;
    if (pid.ok()) {
      while (waitpid(*pid, &wstatus, 0) < 0 && errno == EINTR) {
      }
    }
    if (!pid.ok() || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the bwrap runtime needs a working bubblewrap: '", absl::StrJoin(probe.argv, " "),
          "' failed", runtime.run_as.has_value() ? absl::StrCat(" as user ", user.uid) : "",
          pid.ok() ? "" : absl::StrCat(": ", pid.status().message())));
    }
  }
  return std::unique_ptr<ClusterProvider>(
      new LocalClusterProvider(loop, std::move(options), std::move(runtime)));
}

}  // namespace kiln::local
