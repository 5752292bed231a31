// Journal: where an engine writes down what it has promised, so that a new
// engine on the same journal comes back with every job.
//
// The fifth pluggable component, optional (EngineOptions::journal). Without
// one the engine keeps its jobs in memory only and builds no records at all,
// as the simulator runs. With one:
//   * every accepted CreateTrainingJob (its request), every change of a job's
//     status, secondary status or status message, UpdateTrainingJob, the job's
//     end (what Describe shows: times, FailureReason, billable time, final
//     metrics), the instance time its attempts held (billing marks) and its
//     warm pool (WarmPoolStatus, and an Available pool's cluster and
//     keep-alive) are recorded as a JobRecord: the job as it stands, whole;
//   * while jobs hold instances, every billing_mark_period() the engine
//     calls Mark(now), once for all of them: a job whose instances are lost
//     with its engine is billed until the last durable mark (or its last
//     record, if later), so at most one period (plus the journal's commit
//     latency) short of the time it really held them, never beyond;
//   * DeleteTrainingJob is recorded as an erasure of the job's id;
//   * CreateTrainingJob, StopTrainingJob, UpdateTrainingJob and
//     DeleteTrainingJob return success only once the record of what they did
//     is durable (Journal::Wait); a call the engine gets from inside a
//     callback of its own loop (an observer, a workload event) does not wait,
//     since the loop would stall: its record is durable once any later
//     waiting call, or a Flush(), has returned OK;
//   * NewEngine rebuilds every job the journal holds (Journal::Recover)
//     before it returns, see EngineOptions::journal. A warm pool that was
//     Available stays Available for the rest of its keep-alive once the
//     cluster provider takes its cluster back (ClusterProvider::Reattach);
//     when it cannot, the pool ends Terminated, billed until the restart; a
//     pool whose keep-alive ran out while no engine ran ends Terminated,
//     billed until its end. This needs a WarmPoolManager that saves and
//     restores its records (the default one does; see
//     WarmPoolManager::Restore): with one that does not, a recovered job
//     shows no WarmPoolStatus and its pool is gone.
//
// Records are plain data: the engine never shows a journal its internals, and
// a journal never reads the engine's. Kiln ships one journal, SQLite in a
// state directory (kiln/journal_sqlite/sqlite_journal.h); a server database can
// implement the same interface.
//
// Threading: Append and Erase are called by the engine on its loop thread
// and must not block on I/O (a journal queues the record and writes it on
// its own thread, many records per transaction: group commit). Wait and
// Flush are thread-safe and block the caller until what it waits for is
// durable. Recover is called once, before any Append.
#ifndef KILN_JOURNAL_H_
#define KILN_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kiln/cluster_provider.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/warm_pool.h"

namespace kiln {

// One SecondaryStatusTransition as Describe shows it: its StatusMessage is
// `message`, followed by ". " and `detail` when `detail` is not empty.
struct JournalTransition {
  std::string status;   // SecondaryStatus
  std::string message;  // the service's wording
  std::string detail;   // Kiln's addition (e.g. an interruption's host), often empty
  absl::Time start;
  absl::Time end = absl::InfiniteFuture();  // InfiniteFuture: still running
};

// A MetricDefinitions metric that has a value.
struct JournalMetric {
  std::string name;
  double value = 0;
  absl::Time time;
};

// A job as the engine holds it: enough to describe it, list it and carry on
// with it. Times the job has not reached are absl::InfinitePast().
struct JobRecord {
  // The job's number in its engine (JobContext::job_id): never reused, larger
  // for later jobs. Records with the same id are versions of one job; the
  // latest replaces the earlier ones.
  uint64_t id = 0;
  std::string name;
  // The request without its TrainingJobName, immutable and shared with the
  // engine. Set in a job's first record and after an UpdateTrainingJob; null
  // means "as in the job's previous record".
  std::shared_ptr<const v1::CreateTrainingJobRequest> request;
  absl::Time creation_time;
  absl::Time last_modified_time;
  std::string status;  // TrainingJobStatus
  std::vector<JournalTransition> transitions;
  absl::Time training_start_time = absl::InfinitePast();
  absl::Time training_end_time = absl::InfinitePast();
  std::string failure_reason;
  std::vector<JournalMetric> metrics;
  // Billing marks: the instance time held by the attempts that have ended,
  // and since when the current attempt holds its instances (InfinitePast:
  // none held).
  absl::Duration held;
  absl::Time held_since = absl::InfinitePast();
  // While instances are held: until when they were held for certain, as
  // the engine appends it, when the record was made; as Recover gives it,
  // the latest of that and the last durable Mark. A new engine that cannot
  // take the attempt back bills it until then. InfinitePast: none held, or
  // a journal written before billing marks were.
  absl::Time held_until = absl::InfinitePast();
  // Attempts and their budgets.
  int32_t attempt = 1;
  int32_t spot_interruptions = 0;
  int32_t infrastructure_failures = 0;
  bool on_spot = false;    // capacity of the current attempt
  bool warm_pool = false;  // the job takes part in warm pools
  // Why a Stopping job stops: "" (not stopping), "User", "MaxRuntime" or
  // "MaxWait".
  std::string stop_cause;
  // The cluster the current attempt holds, if any, and whether its
  // containers run (Training): what ClusterProvider::Reattach is given.
  std::optional<Cluster> cluster;
  bool containers_running = false;
  // The job's record in the warm-pool manager (WarmPoolManager::Save), when
  // it takes part in warm pools and the manager saves records.
  std::optional<WarmPoolRecord> pool;
};

class Journal {
 public:
  // A position in the journal: everything appended up to it is durable once
  // Wait(ticket) has returned OK. Tickets grow with every Append and Erase.
  using Ticket = uint64_t;

  virtual ~Journal() = default;

  // Reads back every job the journal holds, latest record of each, in
  // increasing id, calling `job` once per job; stops at the first error
  // `job` returns and returns it.
  // Errors: DataLoss when the journal is unreadable or corrupt, and
  // FailedPrecondition when a newer Kiln wrote it (the message names the
  // file or store and what is wrong).
  // Called once, before any Append or Erase. `job`'s record is the caller's.
  virtual absl::Status Recover(absl::FunctionRef<absl::Status(JobRecord&&)> job) = 0;

  // Queues `record` and returns its ticket; never blocks on I/O.
  // Loop thread only (one thread at a time). REQUIRES: not read_only().
  virtual Ticket Append(JobRecord record) = 0;
  // Queues the erasure of the job `id` (DeleteTrainingJob) and returns its
  // ticket. Loop thread only. REQUIRES: not read_only().
  virtual Ticket Erase(uint64_t id) = 0;

  // Blocks until everything queued up to `ticket` is durable. Returns OK, or
  // the error that kept it from being written (e.g. ResourceExhausted for a
  // full disk, Internal or DataLoss for a failed write), which names the file
  // or store. After a failed write the journal stays failed: every Wait and
  // Flush returns that error, and records queued afterwards are dropped (a
  // journal with a gap in it would come back wrong).
  // Thread-safe; must not be called from the loop thread inside a callback of
  // the loop (it would stall the loop).
  virtual absl::Status Wait(Ticket ticket) = 0;
  // Wait for everything queued so far. Thread-safe.
  virtual absl::Status Flush() = 0;

  // A billing mark: every job whose latest record appended before this
  // call has held_since set still held its instances at `time`. Queued like
  // Append and durable with the next commit, but never waited for, and only
  // the latest mark matters (a journal keeps one). Recover gives each record
  // with held_since set a held_until of at least the last durable mark.
  // Loop thread only; never blocks on I/O. REQUIRES: not read_only().
  // Default: marks are dropped (a lost attempt is then billed until its
  // last record).
  virtual void Mark(absl::Time time) {}
  // How often an engine calls Mark while jobs hold instances; zero or less:
  // never. Read once, by NewEngine. Default: 10 seconds.
  virtual absl::Duration billing_mark_period() const { return absl::Seconds(10); }

  // Whether the journal was opened for reading only: Recover works, Append
  // and Erase may not be called. An engine over such a journal shows the
  // jobs as recorded and accepts no change (FailedPrecondition).
  virtual bool read_only() const { return false; }
};

}  // namespace kiln

#endif  // KILN_JOURNAL_H_
