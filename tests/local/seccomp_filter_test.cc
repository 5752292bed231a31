// The bwrap runtime's seccomp filter, loaded into a child process: what it
// refuses fails with EPERM (clone3 with ENOSYS), what a training job does
// still works.
#include "local/internal/seccomp_filter.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::local::internal {
namespace {

// Runs `body` in a forked child under the filter; its exit status (0: every
// check held), or -1 when the child did not exit normally.
int UnderFilter(const std::string& program, int (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    struct sock_fprog prog;
    prog.len = static_cast<unsigned short>(program.size() / sizeof(struct sock_filter));
    prog.filter = reinterpret_cast<struct sock_filter*>(const_cast<char*>(program.data()));
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(100);
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) _exit(101);
    _exit(body());
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SeccompFilterTest, RefusesWhatContainersNeverNeed) {
  absl::StatusOr<std::string> filter = ContainerSeccompFilter();
  ASSERT_TRUE(filter.ok()) << filter.status();
  ASSERT_EQ(filter->size() % sizeof(struct sock_filter), 0u);
  EXPECT_EQ(UnderFilter(*filter, [] {
              if (mount("none", "/", nullptr, MS_REMOUNT, nullptr) == 0 || errno != EPERM) return 1;
              if (umount2("/proc", MNT_DETACH) == 0 || errno != EPERM) return 2;
              if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM) return 3;
              if (syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0) >= 0 || errno != EPERM) {
                return 4;
              }
              if (syscall(SYS_clone3, nullptr, 0) >= 0 || errno != ENOSYS) return 5;
              if (syscall(SYS_keyctl, 0, 0, 0, 0, 0) >= 0 || errno != EPERM) return 6;
              if (syscall(SYS_bpf, 0, nullptr, 0) >= 0 || errno != EPERM) return 7;
              if (syscall(SYS_kexec_load, 0, 0, nullptr, 0) >= 0 || errno != EPERM) return 8;
              return 0;
            }),
            0);
}

TEST(SeccompFilterTest, AllowsWhatJobsDo) {
  absl::StatusOr<std::string> filter = ContainerSeccompFilter();
  ASSERT_TRUE(filter.ok()) << filter.status();
  EXPECT_EQ(UnderFilter(*filter, [] {
              // A process of its own (fork uses clone without namespace
              // flags), a file, a thread-ish clone: all as usual.
              const pid_t child = fork();
              if (child < 0) return 1;
              if (child == 0) _exit(7);
              int status = 0;
              if (waitpid(child, &status, 0) != child || WEXITSTATUS(status) != 7) return 2;
              if (getpid() <= 0) return 3;
              int fds[2];
              if (pipe(fds) != 0) return 4;
              return 0;
            }),
            0);
}

TEST(SeccompFilterTest, NamesWhatItRefuses) {
  const std::vector<std::string>& names = RefusedSyscalls();
  for (const char* name : {"mount", "umount2", "unshare", "setns", "init_module", "kexec_load",
                           "keyctl", "bpf", "perf_event_open", "pivot_root"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

}  // namespace
}  // namespace kiln::local::internal
