// Starting the local backend's processes: a container's main process (the
// entrypoint itself, or bubblewrap), and the holder of a cluster's network
// namespace.
//
// Internal to kiln::local: never installed. Thread-safe: children are forked
// with every descriptor of this process closed in them, so concurrent spawns
// from several threads do not leak pipes into each other's children.
#ifndef KILN_LIB_LOCAL_INTERNAL_SPAWN_H_
#define KILN_LIB_LOCAL_INTERNAL_SPAWN_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::local::internal {

// A user and group on this host.
struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
};

inline constexpr size_t kMaxSpawnFds = 8;

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0]: the program's path (see FindProgram)
  std::vector<std::string> env;   // "NAME=value"
  std::string cwd;
  int output_fd = -1;  // becomes the child's stdout and stderr; stdin is /dev/null
  // fds[i] becomes the child's descriptor 3 + i (at most kMaxSpawnFds); no
  // other descriptor of this process reaches it. With `keeper`, they are the
  // keeper's, from descriptor 5 (process_keeper.h), and never the program's.
  std::vector<int> fds;
  int netns_fd = -1;  // when >= 0, the child joins this network namespace first
  // When set, the child drops to this user and group (no supplementary
  // groups) after joining its namespaces and before it changes directory and
  // executes the program. REQUIRES: this process may (root, or the ids are
  // its own).
  std::optional<Credentials> run_as;
  // Directories the child sees read-only: when not empty, the child gets a
  // mount namespace of its own (see MountNamespaceSupport) in which each of
  // them (a canonical absolute path) is bind-mounted on itself and made
  // read-only, with its sub-mounts; the host's mounts are untouched. Empty:
  // the child shares this process's mount namespace.
  std::vector<std::string> readonly_paths;
  // Runs the program under the process keeper (process_keeper.h): the
  // returned pid is the keeper's, which exits with the program's status (or
  // 128 + the signal that ended it), and which kills the child's whole
  // process group when the forking thread exits, or this process dies,
  // before the program ends. Where the keeper cannot run (memory files not
  // executable here), the program runs directly, as without it.
  bool keeper = false;
  // The keeper's lease in milliseconds (process_keeper.h): 0, the container
  // ends with this process; more, it outlives it for that long, and `fds`
  // are the keeper's exit record, output and lease file.
  int64_t keeper_lease_ms = 0;
};

// How this process can give a child a mount namespace of its own.
enum class MountNamespaceSupport {
  kNone,           // neither: readonly_paths cannot be honoured
  kPrivileged,     // CAP_SYS_ADMIN: a new mount namespace (CLONE_NEWNS)
  kUserNamespace,  // unprivileged user namespaces: a new user namespace
                   // mapping only this process's uid and gid to themselves,
                   // owning the new mount namespace
};

// Finds out, by starting a short-lived child that tries, which kind of mount
// namespace Spawn can make here (the first of kPrivileged, kUserNamespace
// that works, bind mount and read-only remount included), and remembers it
// for later calls by the same effective uid. Thread-safe; the first call
// costs one clone and wait (about a millisecond), later ones nothing.
MountNamespaceSupport GetMountNamespaceSupport();

// Forks and executes `spec`. The child calls setsid: it leads a new
// process group (its pid is the group id), with default signal dispositions and an
// empty signal mask, and is killed (SIGKILL) if the forking thread exits
// (with spec.keeper, its whole group is). Returns the child's pid once the
// program is executing.
// Errors: NotFound / PermissionDenied when the program cannot be executed
// (the message names it), or the working directory cannot be entered (as
// the run_as user: the message names the directory); PermissionDenied when
// the child cannot take on run_as; Internal for a failed fork or namespace
// join; InvalidArgument for more than kMaxSpawnFds fds;
// FailedPrecondition when `readonly_paths` is set and this process cannot
// make mount namespaces (GetMountNamespaceSupport() is kNone), or a path
// cannot be made read-only (the message names it).
absl::StatusOr<pid_t> Spawn(const SpawnSpec& spec);

// True once Spawn has found that the process keeper cannot run here (spawns
// with SpawnSpec::keeper then run their programs directly). Thread-safe.
bool KeeperUnusable();

// Sets what KeeperUnusable() returns (true: as after a failed keeper), for
// tests of what callers do then. Thread-safe.
void SetKeeperUnusableForTesting(bool unusable);

// The path execvp would run for `name` with PATH `path_env`: `name` itself
// when it contains a '/', else the first executable regular file
// <dir>/<name> of the PATH directories. Errors: NotFound naming the program.
absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path_env);

// pidfd_open(2) and pidfd_send_signal(2), through syscall(2) (Debian 12's
// <sys/pidfd.h> lacks C linkage). -1 with errno on failure.
int PidfdOpen(pid_t pid);
int PidfdSendSignal(int pidfd, int sig);

// A process that holds a network namespace with only a loopback interface
// (up), so the instances of one cluster can join it. It lives until
// StopNetnsHolder, or until this process dies.
struct NetnsHolder {
  pid_t pid = -1;
  int ns_fd = -1;         // /proc/<pid>/ns/net, for SpawnSpec::netns_fd
  int keepalive_fd = -1;  // closing it ends the holder
};

// Errors: PermissionDenied when this process may not create network
// namespaces (not root); Internal otherwise.
absl::StatusOr<NetnsHolder> StartNetnsHolder();

// Ends the holder and waits for it. Blocks briefly. A no-op for a holder that
// was never started.
void StopNetnsHolder(NetnsHolder& holder);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_SPAWN_H_
