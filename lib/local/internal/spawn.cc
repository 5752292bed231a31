#include "local/internal/spawn.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {
namespace {

// In a forked child: reports `err` through `fd` and exits. Async-signal-safe.
[[noreturn]] void ChildFail(int fd, int stage, int err) {
  int msg[2] = {stage, err};
  ssize_t ignored = write(fd, msg, sizeof(msg));
  (void)ignored;
  _exit(127);
}

// Moves `fd` to a descriptor >= 100 (so dup2 into 0..3 cannot clobber it).
// Async-signal-safe.
int MoveHigh(int fd) { return fd < 0 ? -1 : fcntl(fd, F_DUPFD, 100); }

void ResetSignals() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &sa, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

enum Stage { kStageSetns = 1, kStageDup = 2, kStageChdir = 3, kStageExec = 4 };

// What the child needs, all prepared before it starts.
struct ChildArgs {
  const SpawnSpec* spec;
  char* const* argv;
  char* const* envp;
  int err_fd;  // the error pipe's write end
  pid_t parent;
};

// The child's body, up to execve. It shares the parent's memory (CLONE_VM)
// while the parent waits (CLONE_VFORK): only async-signal-safe calls, and no
// writes to anything but its own stack (and errno).
int ChildMain(void* p) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(p);
  const SpawnSpec& spec = *a.spec;
  const int err_fd = MoveHigh(a.err_fd);
  if (err_fd >= 0) fcntl(err_fd, F_SETFD, FD_CLOEXEC);
  setsid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != a.parent) _exit(127);
  ResetSignals();
  if (spec.netns_fd >= 0 && setns(spec.netns_fd, CLONE_NEWNET) != 0) {
    ChildFail(err_fd, kStageSetns, errno);
  }
  const int out = MoveHigh(spec.output_fd);
  const int info = MoveHigh(spec.info_fd);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (out < 0 || null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
    ChildFail(err_fd, kStageDup, errno);
  }
  if (info >= 0 && dup2(info, 3) < 0) ChildFail(err_fd, kStageDup, errno);
  // Nothing of this process but 0..3 reaches the program.
  const unsigned first = info >= 0 ? 4 : 3;
  if (close_range(first, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = static_cast<int>(first); fd < 1024; ++fd) {
      if (fd != err_fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) ChildFail(err_fd, kStageChdir, errno);
  execve(a.argv[0], a.argv, a.envp);
  ChildFail(err_fd, kStageExec, errno);
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty command line");
  // Everything the child needs is prepared first: it runs in this process's
  // memory until execve, with only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "create pipe", "spawn");
  ChildArgs args{&spec, argv.data(), envp.data(), err_pipe[1], getpid()};
  // As posix_spawn does: the child borrows this process's memory until it
  // execs (CLONE_VM | CLONE_VFORK), so that starting a container does not
  // copy the page tables of a large host process. Signals stay blocked until
  // the child has reset their handlers, so none runs a parent handler on the
  // child's stack.
  constexpr size_t kChildStack = 64 * 1024;
  std::unique_ptr<char[]> stack(new char[kChildStack]);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = clone(ChildMain, stack.get() + kChildStack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                          &args);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    close(err_pipe[0]);
    close(err_pipe[1]);
    return ErrnoStatus(clone_errno, "start a process for", spec.argv[0]);
  }
  close(err_pipe[1]);
  int msg[2] = {0, 0};
  ssize_t n;
  do {
    n = read(err_pipe[0], msg, sizeof(msg));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  if (n <= 0) return pid;  // exec succeeded (the pipe closed on exec)
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  switch (msg[0]) {
    case kStageSetns:
      return ErrnoStatus(msg[1], "join the cluster's network namespace for", spec.argv[0]);
    case kStageChdir:
      return ErrnoStatus(msg[1], "change to the working directory", spec.cwd);
    case kStageExec:
      return ErrnoStatus(msg[1], "execute", spec.argv[0]);
    default:
      return ErrnoStatus(msg[1], "set up the process for", spec.argv[0]);
  }
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path_env) {
  if (name.empty()) return absl::InvalidArgumentError("empty program name");
  if (name.find('/') != std::string::npos) return name;
  for (absl::string_view dir : absl::StrSplit(path_env, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return absl::NotFoundError(absl::StrCat("program '", name, "' not found on PATH ", path_env));
}

absl::StatusOr<NetnsHolder> StartNetnsHolder() {
  int keep[2];
  int status_pipe[2];
  if (pipe2(keep, O_CLOEXEC) != 0) return ErrnoStatus(errno, "create pipe", "netns");
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(keep[0]);
    close(keep[1]);
    return ErrnoStatus(err, "create pipe", "netns");
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {keep[0], keep[1], status_pipe[0], status_pipe[1]}) close(fd);
    return ErrnoStatus(err, "fork", "netns holder");
  }
  if (pid == 0) {
    // Keep only the keep-alive read end (3) and the status write end (4).
    const int k = MoveHigh(keep[0]);
    const int s = MoveHigh(status_pipe[1]);
    const int null_fd = open("/dev/null", O_RDWR);
    if (k < 0 || s < 0 || null_fd < 0) _exit(1);
    dup2(null_fd, 0);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    dup2(k, 3);
    dup2(s, 4);
    close_range(5, ~0U, 0);
    setsid();
    ResetSignals();
    int err = 0;
    if (unshare(CLONE_NEWNET) != 0) {
      err = errno;
    } else {
      const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      struct ifreq ifr;
      std::memset(&ifr, 0, sizeof(ifr));
      std::memcpy(ifr.ifr_name, "lo", 3);
      if (sock < 0 || ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) {
        err = errno;
      } else {
        ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
        if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) err = errno;
      }
      if (sock >= 0) close(sock);
    }
    ssize_t ignored = write(4, &err, sizeof(err));
    (void)ignored;
    close(4);
    if (err != 0) _exit(1);
    char c;
    while (read(3, &c, 1) != 0) {
      // EINTR or stray data: keep waiting for EOF.
    }
    _exit(0);
  }
  close(keep[0]);
  close(status_pipe[1]);
  int err = -1;
  ssize_t n;
  do {
    n = read(status_pipe[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close(status_pipe[0]);
  NetnsHolder holder;
  holder.pid = pid;
  holder.keepalive_fd = keep[1];
  if (n != sizeof(err) || err != 0) {
    StopNetnsHolder(holder);
    if (n == sizeof(err) && (err == EPERM || err == EACCES)) {
      return absl::PermissionDeniedError("not allowed to create a network namespace");
    }
    return ErrnoStatus(n == sizeof(err) ? err : EIO, "create", "network namespace");
  }
  const std::string ns_path = absl::StrCat("/proc/", pid, "/ns/net");
  holder.ns_fd = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (holder.ns_fd < 0) {
    const int e = errno;
    StopNetnsHolder(holder);
    return ErrnoStatus(e, "open", ns_path);
  }
  return holder;
}

void StopNetnsHolder(NetnsHolder& holder) {
  if (holder.ns_fd >= 0) close(holder.ns_fd);
  if (holder.keepalive_fd >= 0) close(holder.keepalive_fd);
  if (holder.pid > 0) {
    kill(holder.pid, SIGKILL);
    int status;
    while (waitpid(holder.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  holder = NetnsHolder();
}

}  // namespace kiln::local::internal
