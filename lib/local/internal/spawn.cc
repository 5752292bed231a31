#include "local/internal/spawn.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "local/internal/fs.h"
#include "local/internal/process_keeper.h"

// The keeper's executable, embedded (process_keeper_blob.cc).
extern "C" const unsigned char kiln_process_keeper_start[];
extern "C" const unsigned char kiln_process_keeper_end[];

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

enum Stage {
  kStageSetns = 1,
  kStageDup = 2,
  kStageChdir = 3,
  kStageExec = 4,
  kStageUserns = 5,
  kStagePropagation = 6,
  kStageKeeper = 7,  // the keeper itself could not be executed
  kStageCredentials = 8,
  // kStageReadOnly + i: readonly_paths[i]
  kStageReadOnly = 100,
};

static_assert(kStageExec == kKeeperExecFailed);

// What a child needs to set up its own mount namespace, all prepared before
// it starts (the child may only make async-signal-safe calls).
struct MountNsArgs {
  bool user_namespace = false;  // write the maps below first
  const char* uid_map = nullptr;
  const char* gid_map = nullptr;
  const char* const* readonly_paths = nullptr;  // null-terminated
};

// Writes `text` to the file `path`. Async-signal-safe. 0 or an errno.
int WriteProcFile(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const size_t len = strlen(text);
  const ssize_t n = write(fd, text, len);
  const int err = n == static_cast<ssize_t>(len) ? 0 : (n < 0 ? errno : EIO);
  close(fd);
  return err;
}

// In a child made with CLONE_NEWNS (and CLONE_NEWUSER when
// a.user_namespace): maps its ids, stops mount events from leaving the
// namespace, and binds each path on itself read-only (sub-mounts included).
// Async-signal-safe. Returns 0, or an errno with the failed stage in *stage.
int SetUpMountNamespace(const MountNsArgs& a, int* stage) {
  if (a.user_namespace) {
    *stage = kStageUserns;
    int err = WriteProcFile("/proc/self/setgroups", "deny");
    if (err == 0) err = WriteProcFile("/proc/self/uid_map", a.uid_map);
    if (err == 0) err = WriteProcFile("/proc/self/gid_map", a.gid_map);
    if (err != 0) return err;
  }
  // Mounts made here stay here; the host's mounts and unmounts still reach
  // this namespace (a FUSE view unmounted by Kiln goes from here too).
  *stage = kStagePropagation;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return errno;
  for (int i = 0; a.readonly_paths[i] != nullptr; ++i) {
    *stage = kStageReadOnly + i;
    const char* path = a.readonly_paths[i];
    if (mount(path, path, nullptr, MS_BIND | MS_REC, nullptr) != 0) return errno;
    struct mount_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
      if (errno != ENOSYS) return errno;
      // Before Linux 5.12: the bind itself only (sub-mounts keep their flags).
      if (mount(nullptr, path, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
        return errno;
      }
    }
  }
  return 0;
}

// What the child needs, all prepared before it starts.
struct ChildArgs {
  const SpawnSpec* spec;
  char* const* argv;
  char* const* envp;
  int err_fd;  // the error pipe's write end
  pid_t parent;
  const MountNsArgs* mount_ns;  // null: the parent's mount namespace
  // The keeper's memory file and command line, or -1 and null: the program
  // is executed directly.
  int keeper_fd;
  char* const* keeper_argv;
  int keeper_env_fd;  // the entrypoint's environment, for the keeper
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
  if (a.mount_ns != nullptr) {
    int stage = 0;
    const int err = SetUpMountNamespace(*a.mount_ns, &stage);
    if (err != 0) ChildFail(err_fd, stage, err);
  }
  if (spec.netns_fd >= 0 && setns(spec.netns_fd, CLONE_NEWNET) != 0) {
    ChildFail(err_fd, kStageSetns, errno);
  }
  if (spec.run_as.has_value()) {
    // Raw system calls: the C library's wrappers would change the
    // credentials of every thread of the process whose memory this child
    // borrows. The parent-death signal is cleared by a change of
    // credentials: set again.
    const Credentials& c = *spec.run_as;
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setresgid, c.gid, c.gid, c.gid) != 0 ||
        syscall(SYS_setresuid, c.uid, c.uid, c.uid) != 0) {
      ChildFail(err_fd, kStageCredentials, errno);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != a.parent) _exit(127);
  }
  const int out = MoveHigh(spec.output_fd);
  const int env_fd = a.keeper_argv != nullptr ? MoveHigh(a.keeper_env_fd) : -1;
  if (a.keeper_argv != nullptr && env_fd < 0) ChildFail(err_fd, kStageDup, errno);
  int moved[kMaxSpawnFds];
  // (The keeper's descriptors never reach a program run without it.)
  const size_t nfds = spec.keeper && a.keeper_argv == nullptr ? 0 : spec.fds.size();
  for (size_t i = 0; i < nfds; ++i) {
    moved[i] = MoveHigh(spec.fds[i]);
    if (moved[i] < 0) ChildFail(err_fd, kStageDup, errno);
  }
  const int null_fd = open("/dev/null", O_RDONLY);
  if (out < 0 || null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
    ChildFail(err_fd, kStageDup, errno);
  }
  // (The keeper's own come after its descriptors 3 and 4.)
  const int first_given = a.keeper_argv != nullptr ? kKeeperEnvFd + 1 : 3;
  for (size_t i = 0; i < nfds; ++i) {
    if (dup2(moved[i], static_cast<int>(first_given + i)) < 0) ChildFail(err_fd, kStageDup, errno);
  }
  // The keeper reports on descriptor 3 (dup2 leaves it open across execve).
  if (a.keeper_argv != nullptr && dup2(err_fd, kKeeperErrorFd) < 0) {
    ChildFail(err_fd, kStageDup, errno);
  }
  // ... and reads the entrypoint's environment from descriptor 4.
  if (a.keeper_argv != nullptr && dup2(env_fd, kKeeperEnvFd) < 0) {
    ChildFail(err_fd, kStageDup, errno);
  }
  // Nothing of this process but 0..2 and the descriptors given reaches the
  // program.
  const unsigned first = static_cast<unsigned>(first_given + nfds);
  if (close_range(first, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = static_cast<int>(first); fd < 1024; ++fd) {
      if (fd != err_fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) ChildFail(err_fd, kStageChdir, errno);
  if (a.keeper_argv != nullptr) {
    // The keeper's own environment is empty: the job's variables reach only
    // the entrypoint.
    char* const no_env[] = {nullptr};
    syscall(SYS_execveat, a.keeper_fd, "", a.keeper_argv, no_env, AT_EMPTY_PATH);
    ChildFail(err_fd, kStageKeeper, errno);
  }
  execve(a.argv[0], a.argv, a.envp);
  ChildFail(err_fd, kStageExec, errno);
}

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U  // Linux 6.3: executable even where memfd_noexec asks otherwise
#endif

// Makes the keeper's sealed memory file. -1 if it cannot be made.
int MakeKeeperFile() {
  int fd = memfd_create(kKeeperName, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) fd = memfd_create(kKeeperName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  // A spawned child puts its own descriptors at 0..4 before it executes the
  // keeper from this one: keep clear of them.
  if (fd <= kKeeperEnvFd) {
    const int high = fcntl(fd, F_DUPFD_CLOEXEC, kKeeperEnvFd + 1);
    close(fd);
    if (high < 0) return -1;
    fd = high;
  }
  const unsigned char* p = kiln_process_keeper_start;
  while (p < kiln_process_keeper_end) {
    const ssize_t n = write(fd, p, static_cast<size_t>(kiln_process_keeper_end - p));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    p += n;
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A memory file holding `env` ("NAME=value" entries, each ended by a NUL),
// read from its start: the keeper's descriptor kKeeperEnvFd.
absl::StatusOr<UniqueFd> EnvironmentFile(const std::vector<std::string>& env) {
  std::string text;
  for (const std::string& e : env) {
    text.append(e);
    text.push_back('\0');
  }
  return MemoryFile("kiln-keeper-env", text);
}

// Set once the keeper could not be executed here: later spawns run their
// programs directly.
std::atomic<bool> keeper_unusable{false};

// The keeper's memory file, made at the first call (thread-safe), kept open
// for the process's life; -1 where the keeper cannot run (then
// keeper_unusable is set, whether the file could not be made or executed).
int KeeperFile() {
  static const int fd = [] {
    const int made = MakeKeeperFile();
    if (made < 0) keeper_unusable.store(true, std::memory_order_relaxed);
    return made;
  }();
  return keeper_unusable.load(std::memory_order_relaxed) ? -1 : fd;
}

// The ids maps of a user namespace mapping only this process's ids to
// themselves ("<id> <id> 1").
struct IdMaps {
  std::string uid_map = absl::StrCat(geteuid(), " ", geteuid(), " 1");
  std::string gid_map = absl::StrCat(getegid(), " ", getegid(), " 1");
};

int CloneFlagsFor(MountNamespaceSupport support) {
  switch (support) {
    case MountNamespaceSupport::kPrivileged:
      return CLONE_NEWNS;
    case MountNamespaceSupport::kUserNamespace:
      return CLONE_NEWUSER | CLONE_NEWNS;
    case MountNamespaceSupport::kNone:
      break;
  }
  return 0;
}

// Runs `fn(arg)` in a child that borrows this process's memory until it
// execs or exits (CLONE_VM | CLONE_VFORK, plus `extra_flags`), with every
// signal blocked around the clone so that no parent handler runs on the
// child's stack before it resets them. Returns the child's pid, or -1 with
// the clone's errno in *clone_errno.
//
// Under ThreadSanitizer the child forks instead: a child in this process's
// memory would run the sanitizer's bookkeeping (its interceptors and the
// instrumented code above) on the parent thread's state, and TSan's view of
// the parent would no longer be true (it then reports accesses made under a
// held std::mutex as unguarded). TSan's fork interceptor makes the copy safe;
// the child enters its namespaces with unshare (it has one thread) and exits
// with 127 if it cannot.
pid_t CloneVfork(int (*fn)(void*), void* arg, int extra_flags, int* clone_errno) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
#if defined(KILN_SANITIZE_THREAD) || defined(__SANITIZE_THREAD__)
  const pid_t pid = fork();
  if (pid == 0) {
    if (extra_flags != 0 && unshare(extra_flags) != 0) _exit(127);
    _exit(fn(arg));
  }
#else
  constexpr size_t kStack = 64 * 1024;
  std::unique_ptr<char[]> stack(new char[kStack]);
  const pid_t pid = clone(fn, stack.get() + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD | extra_flags, arg);
#endif
  *clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return pid;
}

struct ProbeArgs {
  const MountNsArgs* mount_ns;
};

int ProbeMain(void* p) {
  const ProbeArgs& a = *static_cast<const ProbeArgs*>(p);
  int stage = 0;
  _exit(SetUpMountNamespace(*a.mount_ns, &stage) == 0 ? 0 : 1);
}

// Whether a child cloned with `support`'s flags can set up a read-only bind.
bool ProbeMountNamespace(MountNamespaceSupport support) {
  const IdMaps maps;
  const char* paths[] = {"/", nullptr};
  MountNsArgs ns{support == MountNamespaceSupport::kUserNamespace, maps.uid_map.c_str(),
                 maps.gid_map.c_str(), paths};
  ProbeArgs args{&ns};
  int clone_errno = 0;
  const pid_t pid = CloneVfork(ProbeMain, &args, CloneFlagsFor(support), &clone_errno);
  if (pid < 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

MountNamespaceSupport GetMountNamespaceSupport() {
  // What the probe found, for the effective uid it ran as (the answer
  // depends on the privileges): (euid << 8) | (support + 1), 0 before any
  // probe. Concurrent first calls may both probe: harmless.
  static std::atomic<uint64_t> cached{0};
  const uint64_t euid = geteuid();
  const uint64_t known = cached.load(std::memory_order_acquire);
  if (known != 0 && (known >> 8) == euid) {
    return static_cast<MountNamespaceSupport>((known & 0xff) - 1);
  }
  MountNamespaceSupport found = MountNamespaceSupport::kNone;
  for (MountNamespaceSupport s :
       {MountNamespaceSupport::kPrivileged, MountNamespaceSupport::kUserNamespace}) {
    if (ProbeMountNamespace(s)) {
      found = s;
      break;
    }
  }
  cached.store((euid << 8) | (static_cast<uint64_t>(found) + 1), std::memory_order_release);
  return found;
}

absl::StatusOr<pid_t> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty command line");
  if (spec.fds.size() > kMaxSpawnFds) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxSpawnFds, " descriptors can be given to a child"));
  }
  MountNamespaceSupport mount_ns = MountNamespaceSupport::kNone;
  if (!spec.readonly_paths.empty()) {
    mount_ns = GetMountNamespaceSupport();
    if (mount_ns == MountNamespaceSupport::kNone) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot give ", spec.argv[0], " read-only views: this process may create neither mount "
          "namespaces nor user namespaces"));
    }
    if (mount_ns == MountNamespaceSupport::kUserNamespace && spec.netns_fd >= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot give ", spec.argv[0], " both read-only views (through a user namespace) and the "
          "cluster's network namespace"));
    }
  }
  // Prepared only for a child that gets its own mount namespace: other
  // spawns pay nothing for it.
  std::optional<IdMaps> maps;
  std::vector<const char*> readonly;
  MountNsArgs ns;
  if (mount_ns != MountNamespaceSupport::kNone) {
    maps.emplace();
    for (const std::string& p : spec.readonly_paths) readonly.push_back(p.c_str());
    readonly.push_back(nullptr);
    ns = MountNsArgs{mount_ns == MountNamespaceSupport::kUserNamespace, maps->uid_map.c_str(),
                     maps->gid_map.c_str(), readonly.data()};
  }
  // Everything the child needs is prepared first: it runs in this process's
  // memory until execve, with only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int keeper_fd = spec.keeper ? KeeperFile() : -1;
  const std::string parent_pid = absl::StrCat(getpid());
  const std::string lease_ms = absl::StrCat(std::max<int64_t>(0, spec.keeper_lease_ms));
  std::vector<char*> keeper_argv;
  UniqueFd keeper_env;
  if (keeper_fd >= 0) {
    keeper_argv = {const_cast<char*>(kKeeperName), const_cast<char*>(parent_pid.c_str()),
                   const_cast<char*>(lease_ms.c_str())};
    keeper_argv.insert(keeper_argv.end(), argv.begin(), argv.end());  // (with its null)
    absl::StatusOr<UniqueFd> env = EnvironmentFile(spec.env);
    if (!env.ok()) return env.status();
    keeper_env = *std::move(env);
  }
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "create pipe", "spawn");
  ChildArgs args{&spec,
                 argv.data(),
                 envp.data(),
                 err_pipe[1],
                 getpid(),
                 mount_ns == MountNamespaceSupport::kNone ? nullptr : &ns,
                 keeper_fd,
                 keeper_fd >= 0 ? keeper_argv.data() : nullptr,
                 keeper_env.get()};
  // As posix_spawn does: the child borrows this process's memory until it
  // execs (CLONE_VM | CLONE_VFORK), so that starting a container does not
  // copy the page tables of a large host process. Signals stay blocked until
  // the child has reset their handlers, so none runs a parent handler on the
  // child's stack.
  int clone_errno = 0;
  const pid_t pid = CloneVfork(ChildMain, &args, CloneFlagsFor(mount_ns), &clone_errno);
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
    case kStageKeeper: {
      // Memory files cannot be executed here (a seccomp or LSM policy, say):
      // from now on, programs run without the keeper.
      keeper_unusable.store(true, std::memory_order_relaxed);
      SpawnSpec direct = spec;
      direct.keeper = false;
      return Spawn(direct);
    }
    case kStageSetns:
      return ErrnoStatus(msg[1], "join the cluster's network namespace for", spec.argv[0]);
    case kStageChdir:
      return ErrnoStatus(msg[1],
                         spec.run_as.has_value()
                             ? absl::StrCat("change, as user ", spec.run_as->uid,
                                            ", to the working directory")
                             : "change to the working directory",
                         spec.cwd);
    case kStageCredentials:
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot run ", spec.argv[0], " as user ", spec.run_as->uid, " group ",
          spec.run_as->gid, ": ", strerror(msg[1])));
    case kStageExec:
      return ErrnoStatus(msg[1], "execute", spec.argv[0]);
    case kStageUserns:
      return absl::FailedPreconditionError(absl::StrCat(
          "mapping the user namespace of ", spec.argv[0], " failed: ", strerror(msg[1])));
    case kStagePropagation:
      return absl::FailedPreconditionError(absl::StrCat(
          "making the mount namespace of ", spec.argv[0], " private failed: ", strerror(msg[1])));
    default:
      if (msg[0] >= kStageReadOnly &&
          static_cast<size_t>(msg[0] - kStageReadOnly) < spec.readonly_paths.size()) {
        return absl::FailedPreconditionError(
            absl::StrCat("making ", spec.readonly_paths[msg[0] - kStageReadOnly],
                         " read-only for ", spec.argv[0], " failed: ", strerror(msg[1])));
      }
      return ErrnoStatus(msg[1], "set up the process for", spec.argv[0]);
  }
}

bool KeeperUnusable() { return keeper_unusable.load(std::memory_order_relaxed); }

void SetKeeperUnusableForTesting(bool unusable) {
  keeper_unusable.store(unusable, std::memory_order_relaxed);
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
