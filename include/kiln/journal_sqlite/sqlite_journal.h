// The SQLite journal: Kiln's embedded Journal (kiln/journal.h), one SQLite
// database in a state directory, in WAL mode, written by a thread of its own
// that commits everything queued in one transaction (group commit) and syncs
// it to disk before the waiting callers return.
//
//   auto journal = kiln::journal_sqlite::OpenSqliteJournal({.state_dir = dir});
//   if (!journal.ok()) ...  // e.g. another process holds the directory
//   options.journal = journal->get();  // EngineOptions; outlives the engine
//
// Files: <state_dir>/journal.sqlite (with SQLite's -wal and -shm beside it)
// and <state_dir>/journal.lock, which the writing process holds (flock) for
// as long as the journal is open and which names its pid.
// Threading: as Journal says; the journal's own thread is joined when it is
// destroyed, after it has written what was queued.
#ifndef KILN_JOURNAL_SQLITE_SQLITE_JOURNAL_H_
#define KILN_JOURNAL_SQLITE_SQLITE_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/journal.h"

namespace kiln::journal_sqlite {

struct SqliteJournalOptions {
  // The directory that holds the journal; made (one level) if missing.
  std::string state_dir;
  // Opens the journal for reading only (Journal::read_only): no lock is
  // taken, so it works while another process writes it, and it sees what
  // that process had committed when Recover ran.
  bool read_only = false;
  // The most bytes the journal's database may grow to; 0: no limit. A write
  // beyond it fails as one on a full disk does.
  int64_t max_bytes = 0;
  // Journal::billing_mark_period(): how often an engine marks the instance
  // time of the jobs that hold instances (one small write, whatever their
  // number); zero or less: never.
  absl::Duration billing_mark_period = absl::Seconds(10);
};

// Opens (or, for writing, creates) the journal of `options.state_dir`.
// Errors, each naming the file: FailedPrecondition when another process has
// the directory open for writing (the message names its pid) or when a newer
// Kiln wrote the journal; DataLoss when the file is corrupt or not a Kiln
// journal; NotFound, read-only, when there is no journal; InvalidArgument for
// an empty state_dir; what the file system answers otherwise.
// Thread-safe.
absl::StatusOr<std::unique_ptr<Journal>> OpenSqliteJournal(const SqliteJournalOptions& options);

}  // namespace kiln::journal_sqlite

#endif  // KILN_JOURNAL_SQLITE_SQLITE_JOURNAL_H_
