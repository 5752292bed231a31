// The seccomp filter of the bwrap runtime's containers: every system call is
// allowed but those a training container never needs and that reach past it
// (mounting, module loading, kexec, keyrings, namespaces, the kernel's clock,
// swap, reboot, BPF, perf events, io_uring, ...), which fail with EPERM (clone3
// with ENOSYS, so that the C library falls back to clone, whose namespace
// flags are refused). Docker's default profile is the model; what differs is
// in docs/security.md. System calls of other architectures (a 64-bit process
// entering through the 32-bit gate) kill the process.
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_INTERNAL_SECCOMP_FILTER_H_
#define KILN_LIB_LOCAL_INTERNAL_SECCOMP_FILTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::local::internal {

// The filter as a classic BPF program for this machine's architecture: an
// array of struct sock_filter, the form bubblewrap's --seccomp reads and
// seccomp(SECCOMP_SET_MODE_FILTER) loads. Errors: Internal when libseccomp
// cannot build or export it (the message says which step).
absl::StatusOr<std::string> ContainerSeccompFilter();

// The names of the system calls the filter refuses outright (those unknown
// on this architecture are left out of the filter). clone is refused only
// with a namespace flag, and is not among them.
const std::vector<std::string>& RefusedSyscalls();

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_SECCOMP_FILTER_H_
