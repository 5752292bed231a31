// The process keeper (process_keeper.h): the main process of a container on
// the process runtime. It starts the entrypoint, waits for it, exits with its
// status, and kills the container's process group if the process that
// started it dies first.
//
// Only libc, and only what is async-signal-safe where it matters: it is built
// as a static executable and embedded in kiln_local.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "local/internal/process_keeper.h"

namespace {

using kiln::local::internal::kKeeperErrorFd;
using kiln::local::internal::kKeeperExecFailed;
using kiln::local::internal::kKeeperUsage;

// The parent is gone: the container ends with it, this process included.
void ParentGone(int) { kill(0, SIGKILL); }

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
  if (argc < 3 || !ParsePid(argv[1], &parent)) return kKeeperUsage;
  prctl(PR_SET_NAME, "kiln-keeper");  // (ps would show "memfd:kiln-proc")
  const int gone = SIGRTMAX;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sigemptyset(&sa.sa_mask);
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    if (LeftAlone(sig)) continue;
    sa.sa_handler = sig == gone ? ParentGone : Survive;
    sigaction(sig, &sa, nullptr);  // (glibc's own real-time signals refuse: fine)
  }
  // The parent-death signal this process started with is SIGKILL (Spawn's);
  // from here on it is `gone`, caught. A parent that died before this line
  // is seen by getppid().
  prctl(PR_SET_PDEATHSIG, gone);
  if (getppid() != parent) ParentGone(gone);
  fcntl(kKeeperErrorFd, F_SETFD, FD_CLOEXEC);

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
    execv(argv[2], argv + 2);
    const int msg[2] = {kKeeperExecFailed, errno};
    ssize_t ignored = write(kKeeperErrorFd, msg, sizeof(msg));
    (void)ignored;
    _exit(127);
  }
  close(kKeeperErrorFd);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}
