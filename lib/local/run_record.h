// What a container run started with a lease (LocalOptions::reattach_lease)
// leaves on disk, so that a provider made later on the state directory can
// take the run back (Reattach) after the process that started it is gone:
// <cluster dir>/retained, while the cluster is a warm pool's, and
// <cluster dir>/runs/<host>/
//   run    its process keeper (pid and start time) and its log stream's path,
//          written by the supervisor once the container runs;
//   exit   the keeper's exit record (process_keeper.h), empty until the
//          entrypoint has ended;
//   lease  touched while a provider holds the run (the keeper's lease).
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_RUN_RECORD_H_
#define KILN_LIB_LOCAL_RUN_RECORD_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {

// <cluster_dir>/runs/<host>.
std::string RunDir(const std::string& cluster_dir, const std::string& host);

inline constexpr char kRunRecordFile[] = "run";
inline constexpr char kExitRecordFile[] = "exit";
inline constexpr char kLeaseFile[] = "lease";
// <cluster dir>/retained: the cluster is a warm pool's (Recycle), kept for
// the next job; a provider made later on the state directory keeps it for
// Reattach like a cluster whose containers run.
inline constexpr char kRetainedFile[] = "retained";

struct RunRecord {
  pid_t keeper = -1;
  uint64_t start_time = 0;  // the keeper's, in clock ticks since boot
  std::string stream;       // the log stream's path
};

// Writes `record` to <run_dir>/run, whole or not at all. Errors: as
// ErrnoStatus, naming the file.
absl::Status WriteRunRecord(const std::string& run_dir, const RunRecord& record);

// Reads <run_dir>/run. Errors: NotFound when there is none; DataLoss naming
// the file when it is not one WriteRunRecord wrote.
absl::StatusOr<RunRecord> ReadRunRecord(const std::string& run_dir);

// The start time of process `pid` (field 22 of /proc/<pid>/stat), 0 when
// there is no such process.
uint64_t ProcessStartTime(pid_t pid);

// A pidfd for the keeper `record` names if that very process still runs (its
// start time matches), else an invalid descriptor.
UniqueFd OpenKeeper(const RunRecord& record);

// Whether a keeper of a run below `cluster_dir` (runs/*/run) still runs.
bool HasLiveRuns(const std::string& cluster_dir);

// Whether `cluster_dir` is a warm pool's (kRetainedFile), or has a run whose
// keeper still runs: what a provider made later may take back.
bool MayBeTakenBack(const std::string& cluster_dir);

struct ExitRecord {
  int exit_code = 0;
  int64_t user_cpu_us = 0;
  int64_t system_cpu_us = 0;
  int64_t max_rss_kib = 0;
};

// The keeper's exit record in the file `fd`, if it has written it.
std::optional<ExitRecord> ReadExitRecord(int fd);

// pidfd_getfd(2): a copy of descriptor `fd` of the process `pidfd`, -1 with
// errno on failure.
int PidfdGetfd(int pidfd, int fd);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_RUN_RECORD_H_
