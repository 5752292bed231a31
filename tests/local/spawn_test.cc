// Spawn's read-only views (SpawnSpec::readonly_paths): the child sees the
// paths read-only, the host does not; as root through a mount namespace, and
// as an unprivileged user through a user namespace.
#include "local/internal/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "local/internal/fs.h"
#include "local/internal/process_keeper.h"
#include "local/local_test_util.h"

namespace kiln::local::internal {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// Runs `script` with /bin/sh, `readonly` given read-only; returns its exit
// code (-1 when it could not start or did not exit normally).
int RunShell(const std::string& script, const std::vector<std::string>& readonly,
             std::string* error = nullptr) {
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.output_fd = 2;
  spec.readonly_paths = readonly;
  absl::StatusOr<pid_t> pid = Spawn(spec);
  if (!pid.ok()) {
    if (error != nullptr) *error = pid.status().ToString();
    return -1;
  }
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SpawnTest, ReadOnlyPathsAreReadOnlyForTheChildOnly) {
  if (GetMountNamespaceSupport() == MountNamespaceSupport::kNone) {
    GTEST_SKIP() << "this process may create neither mount nor user namespaces";
  }
  TempDir tmp;
  const std::string dir = tmp.path() + "/src";
  WriteFile(dir + "/old", "old");
  std::string error;
  // The write fails with EROFS ("Read-only file system") in the child...
  EXPECT_EQ(RunShell(absl::StrCat("{ echo x > ", dir, "/new; } 2>", tmp.path(), "/err"), {dir},
                     &error),
            2)
      << error;
  EXPECT_NE(ReadFile(tmp.path() + "/err").find("Read-only file system"), std::string::npos)
      << ReadFile(tmp.path() + "/err");
  EXPECT_FALSE(Exists(dir + "/new"));
  // ...reads work, and other paths stay writable...
  EXPECT_EQ(RunShell(absl::StrCat("test \"$(cat ", dir, "/old)\" = old && echo y > ", tmp.path(),
                                  "/other"),
                     {dir}),
            0);
  EXPECT_EQ(ReadFile(tmp.path() + "/other"), "y\n");
  // ...and the host's view is untouched.
  EXPECT_EQ(RunShell(absl::StrCat("echo x > ", dir, "/new"), {}), 0);
  EXPECT_EQ(ReadFile(dir + "/new"), "x\n");
  EXPECT_EQ(ReadFile("/proc/self/mountinfo").find(dir), std::string::npos);
}

TEST(SpawnTest, ReadOnlyPathThatDoesNotExistFailsNamingIt) {
  if (GetMountNamespaceSupport() == MountNamespaceSupport::kNone) {
    GTEST_SKIP() << "this process may create neither mount nor user namespaces";
  }
  SpawnSpec spec;
  spec.argv = {"/bin/true"};
  spec.output_fd = 2;
  spec.readonly_paths = {"/nonexistent/kiln-path"};
  absl::StatusOr<pid_t> pid = Spawn(spec);
  EXPECT_TRUE(absl::IsFailedPrecondition(pid.status())) << pid.status();
  EXPECT_NE(pid.status().message().find("/nonexistent/kiln-path"), std::string::npos);
}

// Drops to an unprivileged user in a forked child (this test process has no
// other threads here) and checks the user-namespace path there.
TEST(SpawnTest, UnprivilegedUserGetsReadOnlyPathsThroughAUserNamespace) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become an unprivileged user";
  TempDir tmp;
  const std::string dir = tmp.path() + "/src";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_EQ(chmod(tmp.path().c_str(), 0777), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // 10: cannot drop; 11: no user namespaces for unprivileged users;
    // 12: the write was not refused; 13: the unrestricted write failed.
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    // Changing uid made this process non-dumpable (its /proc files root's),
    // which a process started as that user is not.
    if (prctl(PR_SET_DUMPABLE, 1) != 0) _exit(10);
    if (GetMountNamespaceSupport() != MountNamespaceSupport::kUserNamespace) _exit(11);
    if (RunShell(absl::StrCat("{ echo x > ", dir, "/new; } 2>/dev/null"), {dir}) != 2) _exit(12);
    if (RunShell(absl::StrCat("echo x > ", dir, "/new2"), {}) != 0) _exit(13);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 11) {
    GTEST_SKIP() << "the kernel refuses user namespaces to unprivileged users here";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(Exists(dir + "/new"));
  EXPECT_TRUE(Exists(dir + "/new2"));
}

// Spawns `script` with /bin/sh under the keeper, its output to `out_fd`.
absl::StatusOr<pid_t> SpawnKept(const std::string& script, int out_fd) {
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.output_fd = out_fd;
  spec.keeper = true;
  return Spawn(spec);
}

// Waits for `pid` (a child) and returns its wait status.
int Reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// True once `pid` has ended (gone, or a zombie), within `timeout`.
bool EndsWithin(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// The keeper (process_keeper.h) passes the program's end on: its exit code,
// or 128 + the signal that killed it; and a program that cannot be executed
// is Spawn's error, as without the keeper.
TEST(SpawnKeeperTest, ExitsWithTheProgramsStatus) {
  absl::StatusOr<pid_t> pid = SpawnKept("exit 3", 2);
  ASSERT_TRUE(pid.ok()) << pid.status();
  int status = Reap(*pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);

  pid = SpawnKept("kill -TERM $$; sleep 5", 2);
  ASSERT_TRUE(pid.ok()) << pid.status();
  status = Reap(*pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);

  SpawnSpec missing;
  missing.argv = {"/nonexistent/train"};
  missing.output_fd = 2;
  missing.keeper = true;
  absl::StatusOr<pid_t> not_run = Spawn(missing);
  EXPECT_EQ(not_run.status().code(), absl::StatusCode::kNotFound) << not_run.status();
  EXPECT_NE(not_run.status().message().find("/nonexistent/train"), std::string::npos);
}

// The job's variables reach the program only: the keeper itself starts with
// an empty environment (its /proc/<pid>/environ), and the program gets them
// all, in order, values with '=' and spaces included.
TEST(SpawnKeeperTest, TheEnvironmentReachesTheProgramOnly) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string out = tmp.path() + "/env";
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "env > \"$OUT\"; touch \"$OUT.done\"; sleep 30"};
  spec.env = {"PATH=/usr/bin:/bin", "OUT=" + out, "TOKEN=s3cr3t a=b", "LD_PRELOAD=/nonexistent.so"};
  spec.output_fd = 2;
  spec.keeper = true;
  absl::StatusOr<pid_t> pid = Spawn(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  if (KeeperUnusable()) GTEST_SKIP() << "the keeper cannot run here";
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!internal::Exists(out + ".done") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(ReadFile(absl::StrCat("/proc/", *pid, "/environ")), "");
  const std::string env = ReadFile(out);
  EXPECT_NE(env.find("TOKEN=s3cr3t a=b\n"), std::string::npos) << env;
  EXPECT_NE(env.find("LD_PRELOAD=/nonexistent.so\n"), std::string::npos) << env;
  kill(*pid, KeeperEndSignal());
  Reap(*pid);
}

// run_as: the program runs as that user and group, with no supplementary
// group, after its namespaces are set up.
TEST(SpawnTest, RunAsGivesTheProgramThatUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  for (bool keeper : {false, true}) {
    SCOPED_TRACE(keeper);
    const std::string out = absl::StrCat(tmp.path(), "/id-", keeper);
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", "id -u; id -g; id -G"};
    spec.env = {"PATH=/usr/bin:/bin"};
    const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    ASSERT_GE(fd, 0);
    spec.output_fd = fd;
    spec.keeper = keeper;
    spec.run_as = Credentials{4321, 4322};
    absl::StatusOr<pid_t> pid = Spawn(spec);
    close(fd);
    ASSERT_TRUE(pid.ok()) << pid.status();
    const int status = Reap(*pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_EQ(ReadFile(out), "4321\n4322\n4322\n");
  }
  // A working directory the user cannot enter is named.
  const std::string closed = tmp.path() + "/closed";
  ASSERT_TRUE(MakeDirs(closed).ok());
  chmod(closed.c_str(), 0700);
  SpawnSpec spec;
  spec.argv = {"/bin/true"};
  spec.output_fd = 2;
  spec.cwd = closed;
  spec.run_as = Credentials{4321, 4322};
  absl::StatusOr<pid_t> pid = Spawn(spec);
  EXPECT_TRUE(absl::IsPermissionDenied(pid.status())) << pid.status();
  EXPECT_NE(pid.status().message().find("as user 4321"), std::string::npos) << pid.status();
  EXPECT_NE(pid.status().message().find(closed), std::string::npos) << pid.status();
}

// A signal sent to the group (a stop's SIGTERM) ends the program, not the
// keeper, which still reports the program's end.
TEST(SpawnKeeperTest, SurvivesSignalsToTheGroup) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  absl::StatusOr<pid_t> pid =
      SpawnKept("trap 'exit 7' TERM; echo ready; while :; do sleep 0.01; done", out[1]);
  close(out[1]);
  ASSERT_TRUE(pid.ok()) << pid.status();
  // The trap is set once the program says so.
  char ready[6] = {};
  size_t got = 0;
  while (got < sizeof(ready)) {
    const ssize_t n = read(out[0], ready + got, sizeof(ready) - got);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0) << "the program ended before it was ready";
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(std::string(ready, sizeof(ready)), "ready\n");
  ASSERT_EQ(kill(-*pid, SIGTERM), 0);
  const int status = Reap(*pid);
  close(out[0]);  // (open until then: what the shell says of its killed sleep is no SIGPIPE)
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

// What the keeper is for: when the thread that started the program exits
// (as it does when the whole process dies), the program's own children die
// too, not only the main process.
TEST(SpawnKeeperTest, TheProgramsChildrenDieWithTheForkingThread) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  absl::StatusOr<pid_t> pid = absl::UnknownError("not spawned");
  std::string line;
  std::thread starter([&] {
    pid = SpawnKept("sleep 1000 & echo $!; wait", out[1]);
    close(out[1]);
    // Once the program has started its child, this thread ends.
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  });
  starter.join();
  close(out[0]);
  ASSERT_TRUE(pid.ok()) << pid.status();
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line, &grandchild)) << "'" << line << "'";
  EXPECT_TRUE(EndsWithin(grandchild, absl::Seconds(5)))
      << "the program's child " << grandchild << " outlived the thread that started it";
  const int status = Reap(*pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  if (!EndsWithin(grandchild, absl::ZeroDuration())) kill(grandchild, SIGKILL);
}

// Reads the next line `fd` gives, without its newline.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

// The same as a pid, or 0.
int ReadPidLine(int fd) {
  int pid = 0;
  return absl::SimpleAtoi(ReadLine(fd), &pid) ? pid : 0;
}

// What RunKept saw: the first lines of the output, and the keeper's exit
// code (-1 if it did not start or was killed).
struct KeptRun {
  std::vector<std::string> lines;
  int exit_code = -1;
};

// Runs `script` under the keeper, reads the first `n` lines of its output
// (empty ones if it ends sooner), then waits for the keeper to exit.
KeptRun RunKept(const std::string& script, int n) {
  KeptRun run;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return run;
  absl::StatusOr<pid_t> pid = SpawnKept(script, out[1]);
  close(out[1]);
  EXPECT_TRUE(pid.ok()) << pid.status();
  if (pid.ok()) {
    for (int i = 0; i < n; ++i) run.lines.push_back(ReadLine(out[0]));
    const int status = Reap(*pid);
    if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  }
  close(out[0]);
  return run;
}

// A process that leaves the container's process group (setsid) is still
// the keeper's: it dies with the forking thread like the rest.
TEST(SpawnKeeperTest, ProcessesThatLeaveTheGroupDieWithTheForkingThread) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  absl::StatusOr<pid_t> pid = absl::UnknownError("not spawned");
  int escaped = 0;
  bool left = false;  // the process was seen after its setsid
  std::thread starter([&] {
    pid = SpawnKept("setsid sleep 1000 & echo $!; wait", out[1]);
    close(out[1]);
    escaped = ReadPidLine(out[0]);
    // Once it has called setsid, this thread ends (and the keeper may
    // kill it at once: only this thread can look).
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (escaped > 0 && !(left = getsid(escaped) == escaped) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  starter.join();
  close(out[0]);
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_GT(escaped, 0);
  ASSERT_TRUE(left) << "the process did not call setsid";
  EXPECT_TRUE(EndsWithin(escaped, absl::Seconds(5)))
      << "the process " << escaped << " that called setsid outlived the forking thread";
  const int status = Reap(*pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  if (!EndsWithin(escaped, absl::ZeroDuration())) kill(escaped, SIGKILL);
}

// When the program ends, what it leaves behind ends too (as a container
// ends with its main process), in its group or not, daemonized or not; the
// keeper still exits with the program's status.
TEST(SpawnKeeperTest, WhatTheProgramLeavesBehindEndsWithIt) {
  // In the group; after a setsid; and orphaned after a setsid (a daemon's
  // double fork, so the keeper inherits it).
  const KeptRun run = RunKept(
      "sleep 1000 & echo $!; setsid sleep 1000 & echo $!; "
      "( setsid sh -c 'echo $$; exec sleep 1000' & ); sleep 0.3; exit 5",
      3);
  EXPECT_EQ(run.exit_code, 5);
  ASSERT_EQ(run.lines.size(), 3u);
  for (const std::string& line : run.lines) {
    int p = 0;
    ASSERT_TRUE(absl::SimpleAtoi(line, &p)) << "'" << line << "'";
    // Gone once the keeper has exited (killed and reaped by it), or nearly.
    EXPECT_TRUE(EndsWithin(p, absl::Seconds(2))) << "process " << p << " outlived the program";
    if (!EndsWithin(p, absl::ZeroDuration())) kill(p, SIGKILL);
  }
}

// The keeper reaps the orphans handed to it (it is their subreaper) while
// the program runs, so they do not pile up as zombies: the program's parent
// (the keeper) has no other child than the program. (A keeper that waited
// for the program alone would list five zombies.)
TEST(SpawnKeeperTest, ReapsOrphansWhileTheProgramRuns) {
  if (access("/proc/thread-self/children", R_OK) != 0) {
    GTEST_SKIP() << "this kernel does not list a process's children in /proc";
  }
  const KeptRun run = RunKept(
      "for i in 1 2 3 4 5; do ( true & ); done; sleep 0.3; "
      "echo $$ $(cat /proc/$PPID/task/$PPID/children)",
      1);
  EXPECT_EQ(run.exit_code, 0);
  ASSERT_EQ(run.lines.size(), 1u);
  // "<the program's pid> <the keeper's children>": the program alone.
  const std::vector<std::string> pids = absl::StrSplit(run.lines[0], ' ', absl::SkipEmpty());
  ASSERT_EQ(pids.size(), 2u) << "'" << run.lines[0] << "'";
  EXPECT_EQ(pids[0], pids[1]);
}

}  // namespace
}  // namespace kiln::local::internal
