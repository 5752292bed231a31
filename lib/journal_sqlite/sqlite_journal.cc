// The SQLite journal (kiln/journal_sqlite/sqlite_journal.h).
//
// One table holds the latest record of each job: jobs(id, name, request,
// state), the request as the API's protobuf bytes and the rest as
// internal/record_codec.h encodes it; kiln_mark(id = 1, time) the last
// billing mark (Journal::Mark, Unix nanoseconds). kiln_schema(version) says
// which Kiln wrote it. The loop thread only queues records; the writer thread takes
// everything queued, keeps the latest record of each job, writes them in one
// transaction and commits it (WAL, synchronous=FULL: synced before commit
// returns), then tells the waiters.
#include "kiln/journal_sqlite/sqlite_journal.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "journal_sqlite/internal/record_codec.h"
#include "kiln/plugin/status_macros.h"

namespace kiln::journal_sqlite {
namespace {

// 2: job states carry billing marks and warm pools (record_codec.h's state
// version 2), and kiln_mark holds the last Mark. A version 1 journal is read
// as it is and, opened for writing, gets kiln_mark and is marked version 2
// before anything is written to it (an older Kiln then refuses it, naming
// the version, rather than failing on a state it cannot read).
constexpr int64_t kSchemaVersion = 2;
constexpr char kCreateMarkTable[] =
    "CREATE TABLE IF NOT EXISTS kiln_mark(id INTEGER PRIMARY KEY, time INTEGER NOT NULL);";

// The status for SQLite's result `rc` on `db`, naming `file` and what was
// being done.
absl::Status SqliteError(sqlite3* db, int rc, const std::string& file, const std::string& doing) {
  const std::string text = absl::StrCat("journal ", file, ": ", doing, ": ",
                                        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(text);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(
          absl::StrCat(text, " (the file is corrupt or not a Kiln journal)"));
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(text);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(text);
    default:
      return absl::InternalError(text);
  }
}

// A prepared statement, finalized when it goes.
class Statement {
 public:
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt** out() { return &stmt_; }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// The lock that makes one process the journal's writer: <dir>/journal.lock,
// flock()ed for as long as the journal is open, holding the writer's pid.
class LockFile {
 public:
  ~LockFile() {
    if (fd_ >= 0) close(fd_);  // releases the flock
  }
  absl::Status Take(const std::string& path) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("journal lock ", path, ": cannot open: ", std::strerror(errno)));
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      if (error != EWOULDBLOCK) {
        return absl::InternalError(
            absl::StrCat("journal lock ", path, ": flock: ", std::strerror(error)));
      }
      char text[32] = {};
      const ssize_t n = pread(fd_, text, sizeof text - 1, 0);
      int64_t pid = 0;
      const bool known =
          n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(std::string(text, n)), &pid);
      return absl::FailedPreconditionError(
          absl::StrCat("the state directory's journal is in use by ",
                       known ? absl::StrCat("process ", pid) : std::string("another process"),
                       " (lock file ", path, "); stop it, or open the journal read-only"));
    }
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
      return absl::InternalError(
          absl::StrCat("journal lock ", path, ": cannot write the pid: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  int fd_ = -1;
};

class SqliteJournal final : public Journal {
 public:
  SqliteJournal(std::string file, bool read_only, absl::Duration billing_mark_period)
      : file_(std::move(file)), read_only_(read_only), billing_mark_period_(billing_mark_period) {}

  ~SqliteJournal() override {
    if (writer_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      work_cv_.notify_one();
      writer_.join();
    }
    insert_.reset();
    update_.reset();
    erase_.reset();
    mark_.reset();
    sqlite3_close_v2(db_);
  }

  absl::Status Open(const SqliteJournalOptions& options) {
    const int flags = read_only_ ? SQLITE_OPEN_READONLY
                                 : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (read_only_) {
      struct stat st;
      if (stat(file_.c_str(), &st) != 0) {
        return absl::NotFoundError(
            absl::StrCat("journal ", file_, ": there is no journal (", std::strerror(errno), ")"));
      }
    }
    int rc = sqlite3_open_v2(file_.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, file_, "cannot open");
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, 5000);
    if (!read_only_) {
      // WAL: readers (kiln list, kiln describe) never block the writer; FULL:
      // a commit is on disk when it returns.
      KILN_RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL", "cannot use WAL mode"));
      KILN_RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL", "cannot set synchronous=FULL"));
      if (options.max_bytes > 0) {
        const int64_t page_size = QueryInt("PRAGMA page_size").value_or(4096);
        KILN_RETURN_IF_ERROR(Exec(absl::StrCat("PRAGMA max_page_count=",
                                               std::max<int64_t>(1, options.max_bytes / page_size)),
                                  "cannot cap its size"));
      }
    }
    KILN_RETURN_IF_ERROR(CheckSchema());
    if (!read_only_) {
      KILN_RETURN_IF_ERROR(Prepare(
          "INSERT INTO jobs(id, name, request, state) VALUES(?1, ?2, ?3, ?4) "
          "ON CONFLICT(id) DO UPDATE SET request = excluded.request, state = excluded.state",
          *insert_));
      KILN_RETURN_IF_ERROR(Prepare("UPDATE jobs SET state = ?2 WHERE id = ?1", *update_));
      KILN_RETURN_IF_ERROR(Prepare("DELETE FROM jobs WHERE id = ?1", *erase_));
      KILN_RETURN_IF_ERROR(
          Prepare("INSERT OR REPLACE INTO kiln_mark(id, time) VALUES(1, ?1)", *mark_));
    }
    return absl::OkStatus();
  }

  // Starts the writer thread. REQUIRES: opened for writing.
  void Start() {
    writer_ = std::thread([this] { WriteLoop(); });
  }

  absl::Status Recover(absl::FunctionRef<absl::Status(JobRecord&&)> job) override {
    // The last billing mark (a version 1 journal has none).
    absl::Time mark = absl::InfinitePast();
    absl::StatusOr<int64_t> has_mark =
        QueryInt("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'kiln_mark'");
    if (!has_mark.ok()) return has_mark.status();
    if (*has_mark != 0) {
      Statement read_mark;
      KILN_RETURN_IF_ERROR(Prepare("SELECT time FROM kiln_mark WHERE id = 1", read_mark));
      const int rc = sqlite3_step(read_mark.get());
      if (rc == SQLITE_ROW) {
        mark = absl::FromUnixNanos(sqlite3_column_int64(read_mark.get(), 0));
      } else if (rc != SQLITE_DONE) {
        return SqliteError(db_, rc, file_, "cannot read the billing mark");
      }
    }
    Statement select;
    KILN_RETURN_IF_ERROR(Prepare("SELECT id, name, request, state FROM jobs ORDER BY id", select));
    int rc;
    while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
      JobRecord record;
      record.id = static_cast<uint64_t>(sqlite3_column_int64(select.get(), 0));
      const auto* name = sqlite3_column_text(select.get(), 1);
      if (name != nullptr) record.name = reinterpret_cast<const char*>(name);
      auto request = std::make_shared<v1::CreateTrainingJobRequest>();
      const void* request_bytes = sqlite3_column_blob(select.get(), 2);
      const int request_size = sqlite3_column_bytes(select.get(), 2);
      if (!request->ParseFromArray(request_bytes, request_size)) {
        return absl::DataLossError(absl::StrCat("journal ", file_, ": job ", record.id,
                                                ": its request cannot be read (corrupt)"));
      }
      record.request = std::move(request);
      const auto* state = static_cast<const char*>(sqlite3_column_blob(select.get(), 3));
      const int state_size = sqlite3_column_bytes(select.get(), 3);
      if (!internal::DecodeState(std::string_view(state == nullptr ? "" : state, state_size),
                                 record)) {
        return absl::DataLossError(absl::StrCat("journal ", file_, ": job ", record.id,
                                                ": its state cannot be read (corrupt, or "
                                                "written in a format this Kiln does not know)"));
      }
      if (record.held_since != absl::InfinitePast()) {
        record.held_until = std::max(record.held_until, mark);
      }
      KILN_RETURN_IF_ERROR(job(std::move(record)));
    }
    if (rc != SQLITE_DONE) return SqliteError(db_, rc, file_, "cannot read the jobs");
    return absl::OkStatus();
  }

  Ticket Append(JobRecord record) override { return Queue(Op{0, std::move(record)}); }
  Ticket Erase(uint64_t id) override { return Queue(Op{id, std::nullopt}); }

  void Mark(absl::Time time) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return;
    mark_time_ = time;  // only the latest is written
    if (writer_idle_) {
      writer_idle_ = false;
      work_cv_.notify_one();
    }
  }
  absl::Duration billing_mark_period() const override { return billing_mark_period_; }

  absl::Status Wait(Ticket ticket) override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return durable_ >= ticket || !failed_.ok(); });
    return durable_ >= ticket ? absl::OkStatus() : failed_;
  }

  absl::Status Flush() override {
    Ticket last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = queued_;
    }
    return Wait(last);
  }

  bool read_only() const override { return read_only_; }

 private:
  // A record to write, or (no record) the erasure of job `id`.
  struct Op {
    uint64_t id;
    std::optional<JobRecord> record;
  };

  // Queues `op`, or puts it in the place of the queued record of its job:
  // only a job's latest record is written, and the writer then takes (and
  // the loop thread frees) one record per job instead of one per change.
  Ticket Queue(Op op) {
    Op replaced{0, std::nullopt};  // freed after the lock is released
    std::lock_guard<std::mutex> lock(mu_);
    const Ticket ticket = ++queued_;
    if (!failed_.ok()) return ticket;  // dropped: the journal has failed
    const uint64_t id = op.record ? op.record->id : op.id;
    auto [at, added] = queued_at_.try_emplace(id, queue_.size());
    if (!added) {
      Op& before = queue_[at->second];
      if (op.record && before.record && op.record->request == nullptr) {
        op.record->request = std::move(before.record->request);
      }
      replaced = std::exchange(before, std::move(op));
      return ticket;
    }
    queue_.push_back(std::move(op));
    if (writer_idle_) {
      writer_idle_ = false;
      work_cv_.notify_one();
    }
    return ticket;
  }

  void WriteLoop() {
    std::vector<Op> batch;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      writer_idle_ = queue_.empty() && !mark_time_;
      work_cv_.wait(lock, [&] { return !queue_.empty() || mark_time_ || stop_; });
      if (queue_.empty() && !mark_time_) return;  // stopping, and everything is written
      batch.swap(queue_);
      queued_at_.clear();
      const std::optional<absl::Time> mark = std::exchange(mark_time_, std::nullopt);
      const Ticket last = queued_;
      lock.unlock();
      absl::Status written = Write(batch, mark);
      batch.clear();
      lock.lock();
      if (written.ok()) {
        durable_ = last;
      } else {
        failed_ = std::move(written);
        queue_.clear();
        mark_time_.reset();
        queued_at_.clear();
      }
      done_cv_.notify_all();
      if (!failed_.ok()) {
        // Failed for good: wake and drop whatever comes.
        writer_idle_ = false;
        work_cv_.wait(lock, [&] { return stop_; });
        return;
      }
    }
  }

  // Writes `batch` in one transaction: for each job its latest record (with
  // the latest request any of its records in the batch carries), or its
  // erasure; then `mark`, if any (it came after the batch's records).
  absl::Status Write(std::vector<Op>& batch, std::optional<absl::Time> mark) {
    absl::flat_hash_map<uint64_t, size_t> latest;  // job id -> index in batch
    latest.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      Op& op = batch[i];
      const uint64_t id = op.record ? op.record->id : op.id;
      auto [it, added] = latest.try_emplace(id, i);
      if (added) continue;
      Op& before = batch[it->second];
      if (op.record && before.record && op.record->request == nullptr) {
        op.record->request = std::move(before.record->request);
      }
      it->second = i;
    }
    KILN_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "cannot begin a transaction"));
    absl::Status status = absl::OkStatus();
    std::string request_bytes, state;
    for (size_t i = 0; i < batch.size() && status.ok(); ++i) {
      Op& op = batch[i];
      const uint64_t id = op.record ? op.record->id : op.id;
      if (latest[id] != i) continue;
      sqlite3_stmt* s;
      if (!op.record) {
        s = erase_->get();
        sqlite3_bind_int64(s, 1, static_cast<int64_t>(id));
      } else {
        state.clear();
        internal::EncodeState(*op.record, state);
        if (op.record->request != nullptr) {
          s = insert_->get();
          request_bytes.clear();
          op.record->request->SerializeToString(&request_bytes);
          sqlite3_bind_int64(s, 1, static_cast<int64_t>(id));
          sqlite3_bind_text(s, 2, op.record->name.data(), static_cast<int>(op.record->name.size()),
                            SQLITE_STATIC);
          sqlite3_bind_blob(s, 3, request_bytes.data(), static_cast<int>(request_bytes.size()),
                            SQLITE_STATIC);
          sqlite3_bind_blob(s, 4, state.data(), static_cast<int>(state.size()), SQLITE_STATIC);
        } else {
          s = update_->get();
          sqlite3_bind_int64(s, 1, static_cast<int64_t>(id));
          sqlite3_bind_blob(s, 2, state.data(), static_cast<int>(state.size()), SQLITE_STATIC);
        }
      }
      const int rc = sqlite3_step(s);
      if (rc != SQLITE_DONE) status = SqliteError(db_, rc, file_, "cannot write");
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
    }
    if (status.ok() && mark) {
      sqlite3_stmt* s = mark_->get();
      sqlite3_bind_int64(s, 1, absl::ToUnixNanos(*mark));
      const int rc = sqlite3_step(s);
      if (rc != SQLITE_DONE) status = SqliteError(db_, rc, file_, "cannot write a billing mark");
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
    }
    if (!status.ok()) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return status;
    }
    return Exec("COMMIT", "cannot commit");
  }

  // Creates the tables of a new journal, or checks an existing one's version.
  absl::Status CheckSchema() {
    absl::StatusOr<int64_t> tables =
        QueryInt("SELECT count(*) FROM sqlite_schema WHERE type = 'table'");
    if (!tables.ok()) return tables.status();
    absl::StatusOr<int64_t> has_schema = QueryInt(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'kiln_schema'");
    if (!has_schema.ok()) return has_schema.status();
    if (*has_schema == 0) {
      if (*tables != 0) {
        return absl::DataLossError(absl::StrCat(
            "journal ", file_, ": not a Kiln journal (an SQLite database without kiln_schema)"));
      }
      if (read_only_) {
        return absl::NotFoundError(absl::StrCat("journal ", file_, ": the journal is empty"));
      }
      return Exec(absl::StrCat("BEGIN IMMEDIATE;"
                               "CREATE TABLE kiln_schema(version INTEGER NOT NULL);"
                               "INSERT INTO kiln_schema(version) VALUES(",
                               kSchemaVersion,
                               ");"
                               "CREATE TABLE jobs(id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                               "request BLOB NOT NULL, state BLOB NOT NULL);",
                               kCreateMarkTable, "COMMIT"),
                  "cannot create the journal's tables");
    }
    absl::StatusOr<int64_t> version = QueryInt("SELECT max(version) FROM kiln_schema");
    if (!version.ok()) return version.status();
    if (*version > kSchemaVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat("journal ", file_, ": written by a newer Kiln (schema version ", *version,
                       "; this Kiln reads version ", kSchemaVersion, " and older)"));
    }
    if (*version < 1) {
      return absl::DataLossError(
          absl::StrCat("journal ", file_, ": corrupt (schema version ", *version, ")"));
    }
    if (*version < kSchemaVersion && !read_only_) {
      return Exec(
          absl::StrCat("BEGIN IMMEDIATE;", kCreateMarkTable,
                       "UPDATE kiln_schema SET version = ", kSchemaVersion, ";COMMIT"),
          absl::StrCat("cannot migrate it from schema version ", *version, " to ", kSchemaVersion));
    }
    return absl::OkStatus();
  }

  absl::Status Exec(const std::string& sql, const std::string& doing) {
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, file_, doing);
    return absl::OkStatus();
  }

  absl::Status Prepare(const char* sql, Statement& out) {
    const int rc = sqlite3_prepare_v2(db_, sql, -1, out.out(), nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, file_, "cannot read its tables");
    return absl::OkStatus();
  }

  // The first column of the first row of `sql`, an integer (0 for NULL).
  absl::StatusOr<int64_t> QueryInt(const char* sql) {
    Statement s;
    KILN_RETURN_IF_ERROR(Prepare(sql, s));
    const int rc = sqlite3_step(s.get());
    if (rc == SQLITE_ROW) return sqlite3_column_int64(s.get(), 0);
    if (rc == SQLITE_DONE) return 0;
    return SqliteError(db_, rc, file_, "cannot read its tables");
  }

  const std::string file_;
  const bool read_only_;
  sqlite3* db_ = nullptr;
  // The writer thread's statements (after Open, used by it only).
  std::unique_ptr<Statement> insert_ = std::make_unique<Statement>();
  std::unique_ptr<Statement> update_ = std::make_unique<Statement>();
  std::unique_ptr<Statement> erase_ = std::make_unique<Statement>();
  std::unique_ptr<Statement> mark_ = std::make_unique<Statement>();
  const absl::Duration billing_mark_period_;

  std::mutex mu_;
  std::condition_variable work_cv_;  // the writer waits for work (or stop_)
  std::condition_variable done_cv_;  // Wait waits for durable_ (or failed_)
  std::vector<Op> queue_;            // guarded by mu_
  // guarded by mu_: job id -> the index of its record (or erasure) in queue_
  absl::flat_hash_map<uint64_t, size_t> queued_at_;
  std::optional<absl::Time> mark_time_;  // guarded by mu_: the mark to write
  Ticket queued_ = 0;         // guarded by mu_: the last ticket given
  Ticket durable_ = 0;        // guarded by mu_: the last ticket committed
  absl::Status failed_;       // guarded by mu_: the write that failed, for good
  bool writer_idle_ = false;  // guarded by mu_: the writer waits for work
  bool stop_ = false;         // guarded by mu_
  std::thread writer_;
};

// The journal, and the lock that makes it ours (destroyed after it).
class LockedJournal final : public Journal {
 public:
  LockedJournal(std::unique_ptr<LockFile> lock, std::unique_ptr<SqliteJournal> journal)
      : lock_(std::move(lock)), journal_(std::move(journal)) {}
  absl::Status Recover(absl::FunctionRef<absl::Status(JobRecord&&)> job) override {
    return journal_->Recover(job);
  }
  Ticket Append(JobRecord record) override { return journal_->Append(std::move(record)); }
  Ticket Erase(uint64_t id) override { return journal_->Erase(id); }
  void Mark(absl::Time time) override { journal_->Mark(time); }
  absl::Duration billing_mark_period() const override { return journal_->billing_mark_period(); }
  absl::Status Wait(Ticket ticket) override { return journal_->Wait(ticket); }
  absl::Status Flush() override { return journal_->Flush(); }
  bool read_only() const override { return journal_->read_only(); }

 private:
  std::unique_ptr<LockFile> lock_;
  std::unique_ptr<SqliteJournal> journal_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Journal>> OpenSqliteJournal(const SqliteJournalOptions& options) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("SqliteJournalOptions.state_dir is empty");
  }
  const std::string dir(absl::StripSuffix(options.state_dir, "/"));
  const std::string file = dir + "/journal.sqlite";
  if (options.read_only) {
    auto journal =
        std::make_unique<SqliteJournal>(file, /*read_only=*/true, options.billing_mark_period);
    KILN_RETURN_IF_ERROR(journal->Open(options));
    return std::unique_ptr<Journal>(std::move(journal));
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("journal: cannot make the state directory ", dir, ": ", std::strerror(errno)));
  }
  auto lock = std::make_unique<LockFile>();
  KILN_RETURN_IF_ERROR(lock->Take(dir + "/journal.lock"));
  auto journal =
      std::make_unique<SqliteJournal>(file, /*read_only=*/false, options.billing_mark_period);
  KILN_RETURN_IF_ERROR(journal->Open(options));
  journal->Start();
  return std::unique_ptr<Journal>(
      std::make_unique<LockedJournal>(std::move(lock), std::move(journal)));
}

}  // namespace kiln::journal_sqlite
