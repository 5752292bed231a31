// The process keeper (process_keeper.h): the main process of a container on
// the process runtime. It starts the entrypoint, reaps every process of the
// container that is orphaned, and, when the entrypoint ends or the process
// that started the keeper dies, kills every process of the container still
// there, then exits with the entrypoint's status.
//
// Only libc, and only what is async-signal-safe where it matters: it is built
// as a static executable and embedded in kiln_local.
#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "local/internal/process_keeper.h"

namespace {

using kiln::local::internal::KeeperEndSignal;
using kiln::local::internal::KeeperReleaseSignal;
using kiln::local::internal::kKeeperEnvFd;
using kiln::local::internal::kKeeperErrorFd;
using kiln::local::internal::kKeeperExecFailed;
using kiln::local::internal::kKeeperExitFd;
using kiln::local::internal::kKeeperLeaseFd;
using kiln::local::internal::kKeeperOutputFd;
using kiln::local::internal::kKeeperUsage;

// With a lease: the parent-death signal, caught (the parent is gone; the
// lease runs).
int OrphanSignal() { return SIGRTMAX - 2; }

// The entrypoint while it runs (0 before it is forked and once it has ended).
volatile sig_atomic_t entrypoint = 0;
// Set by the end signal: the container ends now.
volatile sig_atomic_t end_now = 0;
// With a lease: set when the parent is gone, and when a release comes.
volatile sig_atomic_t orphaned = 0;
volatile sig_atomic_t released = 0;

void Orphaned(int) { orphaned = 1; }
void Released(int) { released = 1; }

// The end signal (the parent is gone, or the provider kills the container):
// the entrypoint is killed now; main() then kills what else is left of the
// container (EndContainer), then the keeper itself.
void EndNow(int) {
  end_now = 1;
  if (entrypoint > 0) kill(entrypoint, SIGKILL);
}

// A signal sent to the container's group reaches the entrypoint; the keeper
// itself lives on, to report the entrypoint's end.
void Survive(int) {}

// Signals whose default action is not to end the process, or that only a
// fault of the keeper itself raises: left as they are.
bool LeftAlone(int sig) {
  switch (sig) {
    case SIGKILL:
    case SIGSTOP:
    case SIGCHLD:
    case SIGCONT:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
    case SIGWINCH:
    case SIGURG:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGTRAP:
    case SIGSYS:
    case SIGABRT:
      return true;
    default:
      return false;
  }
}

// Sends SIGKILL to each child of this process (zombies included); returns
// how many it found, or -1 if it cannot list them (no /proc, or one of
// another PID namespace, whose numbers kill() would misread). The kernel
// lists them in /proc/thread-self/children (the keeper has one thread);
// without that file (a kernel built without it), every /proc/<pid>/stat is
// read for its parent. A child's pid cannot be reused before the keeper
// reaps it, so the pid it kills is always its child's.
int KillChildren() {
  char self_text[32];
  const ssize_t len = readlink("/proc/self", self_text, sizeof(self_text) - 1);
  if (len <= 0) return -1;
  self_text[len] = '\0';
  const long self = std::strtol(self_text, nullptr, 10);
  if (self != getpid()) return -1;
  int killed = 0;
  if (const int fd = open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC); fd >= 0) {
    char buf[4096];
    long pid = -1;  // the number being read, -1 between numbers
    const auto kill_pid = [&] {
      if (pid < 0) return;
      kill(static_cast<pid_t>(pid), SIGKILL);
      ++killed;
      pid = -1;
    };
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = (pid < 0 ? 0 : pid * 10) + (buf[i] - '0');
        } else {
          kill_pid();
        }
      }
    }
    kill_pid();
    close(fd);
    return killed;
  }
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return -1;
  char path[64];
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char stat[512];
    const ssize_t n = read(fd, stat, sizeof(stat) - 1);
    close(fd);
    if (n <= 0) continue;
    stat[n] = '\0';
    // "pid (comm) state ppid ...": comm may hold anything, so the last ')'.
    const char* paren = std::strrchr(stat, ')');
    if (paren == nullptr) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(paren + 1, " %c %ld", &state, &ppid) == 2 && ppid == self) {
      kill(static_cast<pid_t>(pid), SIGKILL);
      ++killed;
    }
  }
  closedir(proc);
  return killed;
}

// Kills every process of the container but the keeper, whatever process
// group it moved to (setsid included): the keeper is their subreaper, so each one whose
// parent is killed becomes the keeper's child, to be killed in turn. Returns
// true once the keeper has no child left, all reaped; false at once if it
// cannot list its children.
bool EndContainer() {
  for (;;) {
    const int found = KillChildren();
    if (found < 0) return false;
    // One death at a time: it may hand the keeper new orphans to kill. With
    // none found, a child may still have been handed over since the listing:
    // look again shortly rather than wait for a child nobody killed.
    const pid_t r = waitpid(-1, nullptr, found > 0 ? 0 : WNOHANG);
    if (r < 0 && errno == ECHILD) return true;
    if (r == 0) {
      const timespec pause = {0, 1'000'000};
      nanosleep(&pause, nullptr);
    }
  }
}

// The entrypoint's environment, read from kKeeperEnvFd (which is closed):
// a null-terminated array of its "NAME=value" entries, or null when it
// cannot be read.
char** ReadEnvironment() {
  size_t size = 0, capacity = 4096;
  char* text = static_cast<char*>(std::malloc(capacity + 1));
  if (text == nullptr) return nullptr;
  for (;;) {
    if (size == capacity) {
      capacity *= 2;
      char* bigger = static_cast<char*>(std::realloc(text, capacity + 1));
      if (bigger == nullptr) return nullptr;
      text = bigger;
    }
    const ssize_t n = read(kKeeperEnvFd, text + size, capacity - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return nullptr;
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  close(kKeeperEnvFd);
  text[size] = '\0';
  size_t count = 0;
  for (size_t i = 0; i < size; ++i) count += text[i] == '\0';
  char** env = static_cast<char**>(std::calloc(count + 1, sizeof(char*)));
  if (env == nullptr) return nullptr;
  size_t k = 0;
  for (size_t start = 0; start < size && k < count; ++k) {
    env[k] = text + start;
    start += std::strlen(text + start) + 1;
  }
  env[k] = nullptr;
  return env;
}

bool ParseCount(const char* text, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0) return false;
  *out = v;
  return true;
}

// With a lease: whether it has run out (the parent gone, and neither its
// death nor the lease file's last change within `lease_ms`, or the lease file
// deleted). `orphaned_at`:
// when the keeper first saw its parent gone (0: not yet; set here).
bool LeaseRunOut(long lease_ms, time_t* orphaned_at) {
  if (!orphaned) return false;
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (*orphaned_at == 0) *orphaned_at = now.tv_sec;
  time_t last = *orphaned_at;
  struct stat st;
  if (fstat(kKeeperLeaseFd, &st) == 0) {
    // The lease file deleted: a provider made later found the run's cluster
    // unclaimable and deleted it. Nobody can take the run back: it ends now.
    if (st.st_nlink == 0) return true;
    if (st.st_mtim.tv_sec > last) last = st.st_mtim.tv_sec;
  }
  return (now.tv_sec - last) * 1000 > lease_ms;
}

// With a lease: the exit record (process_keeper.h), at offset 0 of
// kKeeperExitFd.
void WriteExitRecord(int code) {
  struct rusage ru;
  std::memset(&ru, 0, sizeof(ru));
  getrusage(RUSAGE_CHILDREN, &ru);
  char text[128];
  const int n = std::snprintf(
      text, sizeof(text), "%d %lld %lld %ld\n", code,
      static_cast<long long>(ru.ru_utime.tv_sec) * 1000000 + ru.ru_utime.tv_usec,
      static_cast<long long>(ru.ru_stime.tv_sec) * 1000000 + ru.ru_stime.tv_usec, ru.ru_maxrss);
  if (n > 0) {
    ssize_t ignored = pwrite(kKeeperExitFd, text, static_cast<size_t>(n), 0);
    (void)ignored;
  }
}

bool ParsePid(const char* text, pid_t* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v <= 0) return false;
  *out = static_cast<pid_t>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  pid_t parent = 0;
  long lease_ms = -1;
  if (argc < 4 || !ParsePid(argv[1], &parent) || !ParseCount(argv[2], &lease_ms)) {
    return kKeeperUsage;
  }
  prctl(PR_SET_NAME, "kiln-keeper");  // (ps would show "memfd:kiln-proc")
  // The container's orphans, wherever they moved, become the keeper's.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  const int end_signal = KeeperEndSignal();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sigemptyset(&sa.sa_mask);
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    if (LeftAlone(sig)) continue;
    sa.sa_handler = sig == end_signal                              ? EndNow
                    : lease_ms > 0 && sig == OrphanSignal()        ? Orphaned
                    : lease_ms > 0 && sig == KeeperReleaseSignal() ? Released
                                                                   : Survive;
    sigaction(sig, &sa, nullptr);  // (glibc's own real-time signals refuse: fine)
  }
  // The parent-death signal this process started with is SIGKILL (Spawn's);
  // from here on it is the end signal (with a lease, the orphan signal),
  // caught. A parent that died before this line is seen by getppid().
  prctl(PR_SET_PDEATHSIG, lease_ms > 0 ? OrphanSignal() : end_signal);
  if (getppid() != parent) return 128 + SIGKILL;  // nothing started yet
  fcntl(kKeeperErrorFd, F_SETFD, FD_CLOEXEC);
  if (lease_ms > 0) {
    if (fcntl(kKeeperExitFd, F_SETFD, FD_CLOEXEC) != 0 ||
        fcntl(kKeeperOutputFd, F_SETFD, FD_CLOEXEC) != 0 ||
        fcntl(kKeeperLeaseFd, F_SETFD, FD_CLOEXEC) != 0) {
      return kKeeperUsage;
    }
  }
  char** const env = ReadEnvironment();
  if (env == nullptr) {
    const int msg[2] = {kKeeperExecFailed, EIO};
    ssize_t ignored = write(kKeeperErrorFd, msg, sizeof(msg));
    (void)ignored;
    return 127;
  }

  const pid_t child = fork();
  if (child < 0) {
    const int msg[2] = {kKeeperExecFailed, errno};
    ssize_t ignored = write(kKeeperErrorFd, msg, sizeof(msg));
    (void)ignored;
    return 127;
  }
  if (child == 0) {
    // The entrypoint: execve resets the caught signals to their defaults;
    // the mask is empty (Spawn's, inherited).
    execve(argv[3], argv + 3, env);
    const int msg[2] = {kKeeperExecFailed, errno};
    ssize_t ignored = write(kKeeperErrorFd, msg, sizeof(msg));
    (void)ignored;
    _exit(127);
  }
  entrypoint = child;
  if (end_now) kill(child, SIGKILL);  // gone before `entrypoint` was set
  close(kKeeperErrorFd);
  // The output's write end is the container's, not the keeper's: the pipe
  // ends when the container's processes are gone.
  if (lease_ms > 0) {
    const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null_fd >= 0) {
      dup2(null_fd, 1);
      dup2(null_fd, 2);
      close(null_fd);
    }
  }
  time_t orphaned_at = 0;
  // Reaps every child, the entrypoint and the orphans handed over, until
  // the entrypoint ends (or the end signal kills it). Each is seen ended
  // first and reaped after: the entrypoint's pid stays its own (a zombie)
  // until `entrypoint` no longer names it for the signal handler.
  int status = 0;
  bool reaped = false;  // the entrypoint, into `status`
  for (;;) {
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    // (With a lease, an alarm every second wakes the wait to look at it.)
    if (lease_ms > 0) alarm(1);
    if (waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) < 0) {
      if (errno == EINTR) {
        if (LeaseRunOut(lease_ms, &orphaned_at)) EndNow(0);
        continue;
      }
      break;  // (cannot happen: the entrypoint is a child)
    }
    const pid_t ended = info.si_pid;
    if (ended == child) entrypoint = 0;
    int s = 0;
    while (waitpid(ended, &s, 0) < 0 && errno == EINTR) {
    }
    if (ended == child) {
      status = s;
      reaped = true;
      break;
    }
  }
  // What the entrypoint leaves behind ends with it, as in a container.
  // Without /proc, only the group can be killed: the provider does that
  // when the keeper has exited, and the keeper now if the parent is gone.
  const bool swept = EndContainer();
  if (end_now) kill(swept ? getpid() : 0, SIGKILL);
  int code = 127;
  if (reaped && WIFEXITED(status)) code = WEXITSTATUS(status);
  if (reaped && WIFSIGNALED(status)) code = 128 + WTERMSIG(status);
  if (lease_ms > 0) {
    alarm(0);
    released = 0;  // (a release counts once the record is there)
    WriteExitRecord(code);
    // The output still in the pipe stays with the keeper until a process
    // that took the run back has it, or the lease runs out.
    while (orphaned && !released && !LeaseRunOut(lease_ms, &orphaned_at)) {
      const timespec tick = {0, 100'000'000};
      nanosleep(&tick, nullptr);
    }
  }
  return code;
}
