// Spawn's read-only views (SpawnSpec::readonly_paths): the child sees the
// paths read-only, the host does not; as root through a mount namespace, and
// as an unprivileged user through a user namespace.
#include "local/internal/spawn.h"

#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "local/internal/fs.h"
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

}  // namespace
}  // namespace kiln::local::internal
