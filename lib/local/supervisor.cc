// The supervisor of one container run (supervisor.h), in steps.
#include "local/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/checkpoint_sync.h"
#include "kiln/plugin/files.h"
#include "local/internal/fs.h"
#include "local/internal/process_keeper.h"
#include "local/internal/spawn.h"
#include "local/run_record.h"

namespace kiln::local::internal {
namespace {

constexpr size_t kMaxFailureBytes = 1024;

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

class Supervisor {
 public:
  Supervisor(const ContainerRuntime& runtime, const ViewRegistry& views, RunSpec spec,
             ContainerProc& proc, RunReporter& reporter)
      : runtime_(runtime),
        views_(views),
        spec_(std::move(spec)),
        proc_(proc),
        reporter_(reporter),
        log_(*spec_.log) {}

  void Run() {
    if (spec_.adopted.has_value()) {
      Adopt();
    } else if (!Start()) {
      return;
    }
    ReadUntilExit();
    ContainerExit exit;
    exit.exit_code = Reap();
    CloseFd(pidfd_);
    Drain();
    PostLines();
    // Resource use of the container's process tree (what it waited for), in
    // the log stream.
    log_platform(absl::StrFormat(
        "%s exited with %d: cpu %.3f s user, %.3f s system; max resident set %d KiB", spec_.host,
        exit.exit_code, usage_.ru_utime.tv_sec + usage_.ru_utime.tv_usec / 1e6,
        usage_.ru_stime.tv_sec + usage_.ru_stime.tv_usec / 1e6, usage_.ru_maxrss));
    ReadFailureFile(exit);
    bool cancelled;
    {
      absl::MutexLock lock(&proc_.mu);
      cancelled = proc_.cancelled;
    }
    if (sync_ && !cancelled) {
      CheckpointSyncStats done;
      absl::Status s = sync_->SyncOnce(&done);
      if (!s.ok()) log_platform(CheckpointSyncFailure(/*final=*/true, s, done));
    }
    CloseAll();
    if (!cancelled) reporter_.OnExit(std::move(exit));
  }

 private:
  // Steps 1 to 5: the run started, and reported (OnStarted). False when it
  // could not start (reported too).
  bool Start() {
    WaitForEarlierRuns();
    absl::Status status = PrepareInstance();
    if (status.ok()) status = FindProgram();
    if (status.ok()) status = CheckNotCancelled();
    OpenLog(status);
    if (status.ok()) status = StartContainer();
    if (!status.ok()) {
      log_platform(absl::StrCat("could not start the container: ", status.message()));
      CloseAll();
      reporter_.OnStarted(status);
      return false;
    }
    DeliverPendingSignals();
    if (!started_.up) {
      ReportSandboxFailure();
      return false;
    }
    reporter_.OnStarted(absl::OkStatus());
    return true;
  }

  // A run an earlier process started (RunSpec::adopted): its output and
  // keeper taken over, its log stream gone on with where that process left
  // it, its checkpoints synced on.
  void Adopt() {
    RunSpec::Adopted& a = *spec_.adopted;
    pidfd_ = std::exchange(a.keeper_pidfd, -1);
    out_ = std::exchange(a.output, -1);
    {
      absl::MutexLock lock(&proc_.mu);
      started_.pid = proc_.pid;
    }
    exit_record_.reset(open(absl::StrCat(spec_.run_dir, "/", kExitRecordFile).c_str(),
                            O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    std::string partial;
    std::string broke = log_.Resume(partial);
    if (!broke.empty()) lines_.push_back(std::move(broke));
    // The start of a line whose rest is still in the pipe: observers get it
    // whole, once.
    std::vector<std::string> none;
    splitter_.Add(partial, none);
    if (partial.empty()) {
      log_platform(absl::StrCat(spec_.host, ": taken back by process ", getpid(),
                                " after the process that started it ended"));
    }
    PostLines();
    if (spec_.checkpoint_store != nullptr) {
      sync_ = std::make_unique<CheckpointSync>(*spec_.checkpoint_store, spec_.checkpoint_uri,
                                               spec_.checkpoint_dir, spec_.paths.dir);
    }
  }

  static void CloseFd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }

  // Lines for observers, reported in batches.
  void PostLines() {
    if (lines_.empty()) return;
    reporter_.OnLines(std::exchange(lines_, {}));
  }

  // A line of Kiln's own: in the log stream only, while it can be written.
  // Once it cannot, observers get it instead: nothing Kiln says is lost.
  // (Before the stream is opened, a start failure says it all.)
  void log_platform(std::string_view text) {
    if (!log_.broken()) {
      std::string broke = log_.AppendPlatformLine(text);
      if (broke.empty()) return;
      lines_.push_back(std::move(broke));
    }
    lines_.push_back(absl::StrCat("[kiln] ", Av(text)));
    PostLines();
  }

  // Step 1: the instance's earlier runs are done with its files.
  void WaitForEarlierRuns() {
    for (auto& p : spec_.wait_for) p->finished.WaitForNotification();
    spec_.wait_for.clear();
  }

  // Step 2: a fresh run (model, output, scratch and checkpoints empty; the
  // config files written), the channels' views read-only, the checkpoints
  // restored, the tree the container user's.
  absl::Status PrepareInstance() {
    absl::Status status = PrepareRunTree(spec_.paths, spec_.fresh_dirs, spec_.config);
    if (status.ok()) {
      status = runtime_.AttachViews(spec_, views_.ViewsOf(spec_.paths.dir, spec_.config.channels));
    }
    if (status.ok() && spec_.checkpoint_store != nullptr) {
      sync_ = std::make_unique<CheckpointSync>(*spec_.checkpoint_store, spec_.checkpoint_uri,
                                               spec_.checkpoint_dir, spec_.paths.dir);
      // Its errors say "checkpoint restore" and name the object or folder.
      status = sync_->Restore();
    }
    if (status.ok() && spec_.run_as.has_value()) {
      status = GiveTreeToContainer(spec_.paths.dir, spec_.checkpoint_dir, *spec_.run_as);
    }
    return status;
  }

  // Step 3: argv[0] found on the container's PATH.
  absl::Status FindProgram() {
    auto path_it = spec_.config.env.find("PATH");
    absl::StatusOr<std::string> found = internal::FindProgram(
        spec_.argv[0], path_it == spec_.config.env.end() ? "" : path_it->second);
    if (!found.ok()) return found.status();
    spec_.argv[0] = *std::move(found);
    return absl::OkStatus();
  }

  absl::Status CheckNotCancelled() {
    absl::MutexLock lock(&proc_.mu);
    if (proc_.cancelled) return absl::AbortedError("the cluster was released");
    return absl::OkStatus();
  }

  // Step 4: the log stream opened (when the run goes ahead), with what
  // preparing the instance for this run left (NoteForRun) as its first
  // lines, or observers' when the run ends before it has a stream.
  void OpenLog(const absl::Status& status) {
    if (status.ok()) {
      // A log stream that cannot be written does not fail the job (as it
      // does not mid-run): observers are told, and get every line.
      std::string broke = log_.Open();
      if (!broke.empty()) {
        lines_.push_back(std::move(broke));
        PostLines();
      }
    }
    for (const std::string& note : spec_.log->TakeQueued()) {
      if (status.ok()) {
        log_platform(note);
      } else {
        lines_.push_back(absl::StrCat("[kiln] ", note));
      }
    }
    PostLines();
  }

  // Step 5: the container started by the runtime, its output to a pipe.
  absl::Status StartContainer() {
    int out[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe", "output");
    out_ = out[0];
    std::vector<UniqueFd> keeper_files;
    if (spec_.lease_ms > 0) {
      absl::Status s = PrepareLease(keeper_files);
      if (!s.ok()) {
        keeper_files.clear();
        log_platform(absl::StrCat("the container cannot outlive this process (it ends with it): ",
                                  s.message()));
      }
    }
    spec_.keeper_fds.clear();
    for (const UniqueFd& fd : keeper_files) spec_.keeper_fds.push_back(fd.get());
    absl::StatusOr<Started> started =
        runtime_.Start(spec_, UniqueFd(out[1]), proc_,
                       [this](std::string_view text) { log_platform(text); });
    if (!started.ok()) return started.status();
    started_ = *started;
    pidfd_ = PidfdOpen(started_.pid);
    bool kept;
    {
      absl::MutexLock lock(&proc_.mu);
      kept = proc_.kept;
    }
    if (!keeper_files.empty() && kept) {
      absl::Status s = WriteRunRecord(
          spec_.run_dir, RunRecord{started_.pid, ProcessStartTime(started_.pid), log_.path()});
      if (!s.ok()) {
        log_platform(
            absl::StrCat("the container cannot be taken back by a later process: ", s.message()));
      }
    }
    return absl::OkStatus();
  }

  // The keeper's files for a run with a lease (RunSpec::keeper_fds): its
  // exit record and lease file in the run's directory, and a copy of the
  // output's read end. The pipe is made as large as the system lets it be:
  // the container's output waits there while no process reads it.
  absl::Status PrepareLease(std::vector<UniqueFd>& files) {
    if (absl::Status s = MakeDirs(spec_.run_dir); !s.ok()) return s;
    const std::string exit_path = absl::StrCat(spec_.run_dir, "/", kExitRecordFile);
    UniqueFd exit_fd(
        open(exit_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!exit_fd.valid()) return ErrnoStatus(errno, "create", exit_path);
    const std::string lease_path = absl::StrCat(spec_.run_dir, "/", kLeaseFile);
    UniqueFd lease_fd(open(lease_path.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!lease_fd.valid()) return ErrnoStatus(errno, "create", lease_path);
    UniqueFd out_copy(fcntl(out_, F_DUPFD_CLOEXEC, 0));
    if (!out_copy.valid()) return ErrnoStatus(errno, "copy", "the output pipe");
    fcntl(out_, F_SETPIPE_SZ, 1 << 20);
    files.push_back(std::move(exit_fd));
    files.push_back(std::move(out_copy));
    files.push_back(std::move(lease_fd));
    return absl::OkStatus();
  }

  // Signals asked for while the run was starting.
  void DeliverPendingSignals() {
    absl::MutexLock lock(&proc_.mu);
    if (proc_.cancelled) SignalLocked(proc_, SIGKILL);
    if (proc_.pending_signal != 0) SignalLocked(proc_, std::exchange(proc_.pending_signal, 0));
  }

  void HandleOutput(std::string_view chunk) {
    // (Observers learn that the stream broke before the lines it lacks.)
    std::string broke = log_.AppendOutput(chunk);
    if (!broke.empty()) lines_.push_back(std::move(broke));
    splitter_.Add(chunk, lines_);
  }

  // Step 6: output read until the main process exits, checkpoints synced
  // meanwhile.
  void ReadUntilExit() {
    const pid_t pid = started_.pid;
    bool out_open = true;
    absl::Time next_sync = sync_ ? absl::Now() + spec_.sync_interval : absl::InfiniteFuture();
    // With a lease, the keeper is told that a process holds the run, four
    // times per lease.
    const bool leased = spec_.lease_ms > 0 && !spec_.run_dir.empty();
    const std::string lease_path = absl::StrCat(spec_.run_dir, "/", kLeaseFile);
    const absl::Duration renew = absl::Milliseconds(std::max<int64_t>(spec_.lease_ms / 4, 50));
    absl::Time next_renew = leased ? absl::Now() : absl::InfiniteFuture();
    while (true) {
      if (absl::Now() >= next_renew) {
        utimensat(AT_FDCWD, lease_path.c_str(), nullptr, 0);
        next_renew = absl::Now() + renew;
      }
      const absl::Time wake = std::min(next_sync, next_renew);
      int timeout = -1;
      if (wake != absl::InfiniteFuture()) {
        timeout = static_cast<int>(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(wake - absl::Now()) + 1));
      }
      // (An adopted keeper's exit record is looked for now and then.)
      if (!out_open && exit_record_.valid()) timeout = timeout < 0 ? 100 : std::min(timeout, 100);
      if (pidfd_ < 0) {
        // No pidfd (an old kernel): look for the exit now and then.
        siginfo_t info;
        info.si_pid = 0;
        if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == pid) {
          break;
        }
        timeout = timeout < 0 ? 50 : std::min(timeout, 50);
      }
      struct pollfd fds[2] = {{pidfd_, POLLIN, 0}, {out_, POLLIN, 0}};
      const int r = poll(fds, out_open ? 2 : 1, timeout);
      if (r < 0 && errno != EINTR) break;
      if (out_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ssize_t n = read(out_, buf_, sizeof(buf_));
        if (n > 0) {
          HandleOutput(std::string_view(buf_, static_cast<size_t>(n)));
          PostLines();
        } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          out_open = false;
        }
      }
      if (pidfd_ >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) break;
      // A keeper whose parent is gone waits, once the entrypoint has ended,
      // for the process that took its output: all of it has been read.
      if (!out_open && exit_record_.valid() && ReadExitRecord(exit_record_.get()).has_value()) {
        PidfdSendSignal(pidfd_, KeeperReleaseSignal());
      }
      if (sync_ && absl::Now() >= next_sync) {
        CheckpointSyncStats done;
        absl::Status s = sync_->SyncOnce(&done);
        if (!s.ok()) log_platform(CheckpointSyncFailure(/*final=*/false, s, done));
        next_sync = absl::Now() + spec_.sync_interval;
      }
    }
  }

  // Step 7: the main process reaped, and what it left behind killed, as in a
  // container. Returns its exit code (128 + signal when a signal ended it).
  int Reap() {
    if (spec_.adopted.has_value()) return ReapAdopted();
    const pid_t pid = started_.pid;
    int wstatus = 0;
    absl::MutexLock lock(&proc_.mu);
    kill(-pid, SIGKILL);
    if (proc_.sandbox_pidfd >= 0) PidfdSendSignal(proc_.sandbox_pidfd, SIGKILL);
    while (wait4(pid, &wstatus, 0, &usage_) < 0 && errno == EINTR) {
    }
    proc_.reaped = true;
    if (proc_.sandbox_pidfd >= 0) close(proc_.sandbox_pidfd);
    proc_.sandbox_pidfd = -1;
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return 1;
  }

  // Step 7 for an adopted run: its keeper, not this process's child, is
  // gone; its exit record says how the entrypoint ended, and what it used.
  int ReapAdopted() {
    struct pollfd fd = {pidfd_, POLLIN, 0};
    while (poll(&fd, 1, -1) < 0 && errno == EINTR) {
    }
    {
      absl::MutexLock lock(&proc_.mu);
      proc_.reaped = true;
    }
    std::optional<ExitRecord> record;
    if (exit_record_.valid()) record = ReadExitRecord(exit_record_.get());
    if (!record.has_value()) {
      log_platform(absl::StrCat(spec_.host,
                                ": the container's keeper ended without saying how "
                                "the container ended; taken as killed"));
      return 128 + SIGKILL;
    }
    usage_.ru_utime.tv_sec = record->user_cpu_us / 1000000;
    usage_.ru_utime.tv_usec = record->user_cpu_us % 1000000;
    usage_.ru_stime.tv_sec = record->system_cpu_us / 1000000;
    usage_.ru_stime.tv_usec = record->system_cpu_us % 1000000;
    usage_.ru_maxrss = record->max_rss_kib;
    return record->exit_code;
  }

  // Step 8: the output still in the pipe, read for a while.
  void Drain() {
    const absl::Time deadline = absl::Now() + spec_.drain_timeout;
    while (out_ >= 0) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) break;
      struct pollfd fd = {out_, POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(left)) <= 0) break;
      ssize_t n = read(out_, buf_, sizeof(buf_));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      HandleOutput(std::string_view(buf_, static_cast<size_t>(n)));
    }
    splitter_.Flush(lines_);
  }

  // Step 9: /opt/ml/output/failure, read below the instance's directory.
  void ReadFailureFile(ContainerExit& exit) {
    absl::StatusOr<std::string> failure =
        ReadFilePrefixBelow(spec_.paths.dir, "ml/output/failure",
                            absl::StrCat(spec_.host, ":/opt/ml/output/failure"),
                            kMaxFailureBytes + 4);
    if (failure.ok()) {
      exit.failure_text = TrimUtf8(*std::move(failure), kMaxFailureBytes);
    } else if (!absl::IsNotFound(failure.status())) {
      // There, but not read: the FailureReason says why rather than reading
      // as if the container had written none.
      exit.failure_error = std::string(failure.status().message());
    }
  }

  // A run whose sandbox could not be set up (only bwrap reports one):
  // bubblewrap's message is in the output. The output is anything a program
  // printed (escape sequences, bytes that are not UTF-8, pages of it): shown
  // escaped and cut, as input is.
  void ReportSandboxFailure() {
    const int code = Reap();
    Drain();
    std::string output;
    for (const std::string& l : lines_) absl::StrAppend(&output, output.empty() ? "" : "; ", l);
    lines_.clear();
    const std::string text = ::kiln::TextForMessage(output, kMaxFailureBytes);
    log_platform(absl::StrCat("bubblewrap failed (exit ", code, "): ", text));
    CloseFd(pidfd_);
    CloseAll();
    reporter_.OnStarted(absl::InternalError(
        absl::StrCat("bubblewrap could not start the container (exit ", code, "): ", text)));
  }

  void CloseAll() {
    CloseFd(out_);
    std::string broke = log_.Close();
    if (!broke.empty()) {
      lines_.push_back(std::move(broke));
      PostLines();
    }
  }

  const ContainerRuntime& runtime_;
  const ViewRegistry& views_;
  RunSpec spec_;
  ContainerProc& proc_;
  RunReporter& reporter_;
  LogStream log_;
  std::vector<std::string> lines_;  // for observers, not yet reported
  LineSplitter splitter_;
  std::unique_ptr<CheckpointSync> sync_;
  int out_ = -1;  // the read end of the output pipe
  Started started_;
  int pidfd_ = -1;
  UniqueFd exit_record_;  // an adopted run's exit record (run_record.h)
  struct rusage usage_ = {};
  char buf_[1 << 16];
};

}  // namespace

void Supervise(const ContainerRuntime& runtime, const ViewRegistry& views, RunSpec spec,
               ContainerProc& proc, RunReporter& reporter) {
  {
    auto supervisor = std::make_unique<Supervisor>(runtime, views, std::move(spec), proc, reporter);
    supervisor->Run();
  }
  proc.finished.Notify();
}

}  // namespace kiln::local::internal
