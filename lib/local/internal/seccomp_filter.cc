#include "local/internal/seccomp_filter.h"

#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {
namespace {

struct ContextDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};
using Context = std::unique_ptr<void, ContextDeleter>;

absl::Status SeccompError(int rc, std::string_view step) {
  return absl::InternalError(
      absl::StrCat("building the containers' seccomp filter: ", Av(step), ": ", strerror(-rc)));
}

}  // namespace

const std::vector<std::string>& RefusedSyscalls() {
  static const std::vector<std::string> names = {
      // Mounts and the file system's view.
      "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
      "fsconfig", "fsmount", "fspick", "mount_setattr", "name_to_handle_at", "open_by_handle_at",
      "quotactl", "quotactl_fd", "swapon", "swapoff", "sysfs", "nfsservctl", "uselib",
      // Namespaces.
      "unshare", "setns",
      // Kernel modules, kexec, reboot, the kernel's log and accounting.
      "init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms",
      "query_module", "kexec_load", "kexec_file_load", "reboot", "syslog", "acct", "_sysctl",
      "vhangup", "lookup_dcookie",
      // Keyrings (not namespaced).
      "add_key", "request_key", "keyctl",
      // The clock.
      "settimeofday", "clock_settime", "clock_adjtime", "stime",
      // Kernel interfaces with a history of escapes.
      "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
      "io_uring_register", "kcmp", "iopl", "ioperm",
  };
  return names;
}

absl::StatusOr<std::string> ContainerSeccompFilter() {
  Context ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (ctx == nullptr) return absl::InternalError("building the containers' seccomp filter: "
                                                 "seccomp_init failed");
  // Another architecture's system calls (the 32-bit gate of a 64-bit
  // process) would get round the rules by their other numbers: they kill.
  int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc != 0) return SeccompError(rc, "the action for other architectures");
  for (const std::string& name : RefusedSyscalls()) {
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR || nr < 0) continue;  // not on this architecture
    rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 0);
    if (rc != 0) return SeccompError(rc, absl::StrCat("the rule for ", name));
  }
  // clone with a namespace flag. (clone3 passes its flags in memory, which a
  // filter cannot read: ENOSYS, and the C library uses clone instead.)
  for (const uint64_t flag : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
                              CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP}) {
    rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
    if (rc != 0) return SeccompError(rc, "the rules for clone");
  }
  const int clone3 = seccomp_syscall_resolve_name("clone3");
  if (clone3 != __NR_SCMP_ERROR && clone3 >= 0) {
    rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), clone3, 0);
    if (rc != 0) return SeccompError(rc, "the rule for clone3");
  }
  // Exported through a memory file: libseccomp writes to a descriptor.
  absl::StatusOr<UniqueFd> file = MemoryFile("kiln-seccomp", "");
  if (!file.ok()) return file.status();
  const UniqueFd& fd = *file;
  rc = seccomp_export_bpf(ctx.get(), fd.get());
  if (rc != 0) return SeccompError(rc, "export");
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat", "the seccomp filter");
  std::string program(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < program.size()) {
    const ssize_t n = pread(fd.get(), program.data() + done, program.size() - done,
                            static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(n < 0 ? errno : EIO, "read", "the seccomp filter");
    done += static_cast<size_t>(n);
  }
  return program;
}

}  // namespace kiln::local::internal
