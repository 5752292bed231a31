// What every container runtime shares: signals to a run's processes
// (container_runtime.h).
#include "local/container_runtime.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "local/internal/process_keeper.h"

namespace kiln::local::internal {
namespace {

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

}  // namespace

std::string PidNamespaceOf(pid_t pid) { return ReadLink(absl::StrCat("/proc/", pid, "/ns/pid")); }

void SignalLocked(ContainerProc& p, int sig) {
  if (p.reaped) return;
  if (p.pid <= 0) {
    if (sig == SIGKILL || p.pending_signal == 0) p.pending_signal = sig;
    return;
  }
  if (p.sandbox_pidfd >= 0) {
    if (sig == SIGKILL) {
      PidfdSendSignal(p.sandbox_pidfd, SIGKILL);
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
    kill(p.pid, KeeperEndSignal());
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

SpawnSpec SpawnSpecFor(const RunSpec& spec, int output_fd) {
  SpawnSpec ss;
  ss.argv = spec.argv;
  for (const auto& [k, v] : spec.config.env) ss.env.push_back(absl::StrCat(k, "=", v));
  ss.cwd = spec.cwd;
  ss.output_fd = output_fd;
  ss.netns_fd = spec.netns_fd;
  ss.run_as = spec.run_as;
  ss.readonly_paths = spec.readonly_paths;
  return ss;
}

}  // namespace kiln::local::internal
