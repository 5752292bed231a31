// The process keeper: a tiny program that stands between the local backend
// and a container's entrypoint on the process runtime, so that a container's
// processes do not outlive the process that runs Kiln.
//
// Why. A container's main process is killed (PR_SET_PDEATHSIG) when the
// thread that started it exits, also when the whole host process dies (a
// crash, SIGKILL, the OOM killer). Its own children are not: a training
// script's workers or a `sleep` would go on running, orphaned, with nobody
// left to stop them. The bwrap runtime is safe (bubblewrap runs the sandbox
// in a PID namespace and --die-with-parent ends it all); the process runtime
// runs the keeper as the container's main process instead:
//   * it starts the entrypoint as its child, in that group, with default
//     signal dispositions, and waits for it;
//   * it is the subreaper of the container's processes
//     (PR_SET_CHILD_SUBREAPER): one orphaned anywhere below it becomes its
//     child, whatever process group it moved to (setsid, setpgid, a
//     daemon's double fork), and it reaps them as they end, as a container's
//     init does;
//   * when the entrypoint ends, it kills (SIGKILL) every process left below
//     it: each child, then each orphan that hands it, until it has no child
//     (a container ends with its main process; the provider's kill of the
//     group reaches only those still in it);
//   * without a lease (below), its parent-death signal is its end signal,
//     SIGRTMAX (which nothing else sends a container), and it catches it: it then kills the
//     entrypoint, then the rest as above, then itself (SIGKILL). The
//     provider sends it the same signal to kill the container (where it
//     would otherwise SIGKILL the group, which would kill the keeper first);
//   * signals sent to the group (Signal, stop: SIGTERM then SIGKILL) reach
//     the entrypoint as before; the keeper survives every catchable one, so
//     it is still there to exit with the entrypoint's status;
//   * it exits with the entrypoint's exit code, or 128 + the signal that
//     ended it (what the provider reports for a main process killed by a
//     signal).
// It finds its children in /proc. Without a /proc of its own PID namespace
// it kills only what the group holds (its whole group, itself included, if
// the parent is gone): a process that left the group then escapes it.
//
// The keeper is built as a static executable, embedded in kiln_local's
// object code, and executed from a sealed memory file (memfd): nothing needs
// installing beside the library. Spawn falls back to running the entrypoint
// directly where the memory file cannot be executed.
//
// Internal to kiln::local: this header is the protocol between Spawn and the
// keeper (lib/local/internal/process_keeper_main.cc).
#ifndef KILN_LIB_LOCAL_INTERNAL_PROCESS_KEEPER_H_
#define KILN_LIB_LOCAL_INTERNAL_PROCESS_KEEPER_H_

#include <csignal>

namespace kiln::local::internal {

// The signal that ends a kept container at once: the keeper's parent-death
// signal, which the provider also sends the keeper (its pid, not its group)
// to kill the container.
inline int KeeperEndSignal() { return SIGRTMAX; }

// The keeper's command line: argv[0] kKeeperName, argv[1] the decimal pid of
// the process whose death ends the container (its parent), argv[2] the lease
// in milliseconds (below), argv[3] the entrypoint's path, argv[4...] the
// entrypoint's arguments (argv[3] is also the entrypoint's argv[0]). Its own
// environment is empty: the entrypoint's comes on kKeeperEnvFd, so that the
// job's variables reach the entrypoint only.
//
// The lease. With a lease of 0 the container ends at once when the parent
// dies (above). With a lease of L > 0 the parent's death only starts the
// lease: the container runs on, and a process that takes it back (the local
// provider's Reattach) renews the lease by touching the lease file
// (kKeeperLeaseFd), as the parent does while it lives. The keeper ends the
// container when both its parent's death and the lease file's last change
// are more than L ago, or, its parent gone, when the lease file is deleted (a
// provider made later deleted the run's cluster: nobody can take it back). Meanwhile:
//   * the keeper holds a copy of the output pipe's read end
//     (kKeeperOutputFd), so that the container's writes wait in the pipe
//     rather than fail; a process that takes the run back gets it with
//     pidfd_getfd(2);
//   * when the entrypoint ends, the keeper writes its exit record to
//     kKeeperExitFd ("<exit code> <user cpu us> <system cpu us> <max rss KiB>\n",
//     at offset 0), and, if its parent is gone, stays (holding the output
//     that is still in the pipe) until a process that took the output sends
//     it kKeeperReleaseSignal after reading the record, or the lease runs
//     out; then it exits with the entrypoint's status.
inline constexpr char kKeeperName[] = "kiln-process-keeper";

// With a lease: the descriptors the keeper gets (kKeeperExitFd, a file it
// may write; kKeeperOutputFd, the output pipe's read end; kKeeperLeaseFd, the
// lease file, read-only). None reaches the entrypoint.
inline constexpr int kKeeperExitFd = 5;
inline constexpr int kKeeperOutputFd = 6;
inline constexpr int kKeeperLeaseFd = 7;

// Sent to a keeper whose parent is gone, once its exit record has been read
// and its output taken: it may exit.
inline int KeeperReleaseSignal() { return SIGRTMAX - 1; }

// The descriptor on which the keeper reports that the entrypoint could not
// be executed: two ints, {kKeeperExecFailed, errno}. It is closed (close on
// exec) once the entrypoint executes, so a reader sees end of file then. The
// entrypoint does not inherit it.
inline constexpr int kKeeperErrorFd = 3;
inline constexpr int kKeeperExecFailed = 4;  // Spawn's stage code for execve

// The descriptor from which the keeper reads the entrypoint's environment:
// "NAME=value" entries, each ended by a NUL, to its end. The keeper closes
// it before it starts the entrypoint.
inline constexpr int kKeeperEnvFd = 4;

// The keeper's exit status when its command line is wrong.
inline constexpr int kKeeperUsage = 125;

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_PROCESS_KEEPER_H_
