// The log stream of a container run: the file
// <log_dir>/<job>/<host>-<epoch>[-<n>] that holds the container's output and
// Kiln's own "[kiln] " lines, and the splitting of output into lines for
// observers.
//
// Internal to kiln::local: never installed. RunLog is thread-safe; LineSplitter
// and LogStream are thread-compatible (one supervisor thread each).
#ifndef KILN_LIB_LOCAL_LOG_STREAM_H_
#define KILN_LIB_LOCAL_LOG_STREAM_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "local/internal/fs.h"
#include "local/log_index.h"

namespace kiln::local::internal {

// The longest line observers get in one piece: a longer one comes in pieces.
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// Splits output into lines (without the newline, a trailing '\r' dropped).
class LineSplitter {
 public:
  // Appends `chunk`; complete lines (and over-long partial ones) go to `lines`.
  void Add(std::string_view chunk, std::vector<std::string>& lines);
  // Gives what is left, as a last line (when not empty).
  void Flush(std::vector<std::string>& lines);

 private:
  static void Emit(std::string_view line, std::vector<std::string>& lines);
  std::string buf_;
};

// Where the log stream of one container run goes:
// <log_dir>/<job>/algo-<k>-<epoch>, or, when a run of the same job on the
// same host that started in the same second holds that name (a rerun, the
// job's next attempt, a provider in another process sharing the log
// directory), the first free of "<name>-2", "<name>-3", ... The first Open
// makes the file with O_EXCL: the kernel, not the clock, keeps two runs from
// ever sharing a stream, so what is said about a run (NoteForRun) reaches its
// stream and no other. The stream gets its name when the run starts; what is
// said about the run before (while PrepareImage prepares the instance for it)
// is kept until then, for the stream's first lines.
//
// Thread-safe.
class RunLog {
 public:
  // Gives the stream its name (StartContainers).
  void Name(std::string name);

  // Keeps `text` for the stream while it has no name, and returns true; false
  // once it has one (the caller writes `text` then).
  bool QueueUnlessNamed(std::string_view text);

  // The texts QueueUnlessNamed kept, which the caller now writes.
  std::vector<std::string> TakeQueued();

  // Makes the stream the file `path`, which an earlier process made for the
  // same run (a run taken back, run_record.h): Open then opens it again.
  // Errors: as ErrnoStatus, naming the file, when it is not there.
  absl::Status Adopt(const std::string& path);

  // Opens the stream for appending: the first time, a file made under a name
  // no other stream has (its directory made when missing); afterwards, that
  // file again, or, when it was deleted or replaced meanwhile, one made anew
  // the same way (never a file another run may have made under its name).
  // Sets `path` to the file's name (on error, the one that failed).
  // Errors: as ErrnoStatus, naming the directory or the file.
  // REQUIRES: Name was called.
  absl::StatusOr<UniqueFd> Open(std::string& path);

 private:
  absl::Mutex mu_;
  std::string name_ ABSL_GUARDED_BY(mu_);  // "" until Name
  std::vector<std::string> queued_ ABSL_GUARDED_BY(mu_);
  std::string path_ ABSL_GUARDED_BY(mu_);  // the file made, "" until then
  dev_t dev_ ABSL_GUARDED_BY(mu_) = 0;     // ... and which file it is
  ino_t ino_ ABSL_GUARDED_BY(mu_) = 0;
};

// The log stream of one container run (RunLog): the container's output as it
// comes, and Kiln's own "[kiln] " lines, with the stream's time index
// (log_index.h): a record after each write that completes a line (or a piece
// of kMaxLineBytes), and a closing one at Close.
//
// Every write is completed, or the stream breaks: on the first failure (a full
// disk) the file is cut back to the end of its last whole line, a "[kiln] "
// line saying why is added when it fits (the cut may have freed the room),
// and nothing more is written to it. So the file never holds a cut line, nor
// one joined to a later one, as writing on after a short write would give
// (the disk may have room again by the next chunk). The caller shows observers
// the line the breaking call returns: the stream says so once, where it can
// be read. A stream that cannot be opened is broken from the start, and one
// whose close() fails (a deferred write error) is broken at the end.
//
// Thread-compatible (the supervisor thread of the run).
class LogStream {
 public:
  // What every line that reports a broken stream to observers starts with.
  static constexpr char kBrokenPrefix[] = "[kiln] the log stream cannot be written: ";

  // `run` must outlive the stream.
  explicit LogStream(RunLog& run) : run_(run) {}

  // Opens the run's stream for appending (RunLog::Open). Returns the line for
  // observers when it cannot (naming what and why), else "".
  std::string Open();

  // Opens an adopted stream (RunLog::Adopt) to go on with it: as Open, and
  // sets `partial` to what follows its last newline (a line whose rest is
  // still to come; at most kMaxLineBytes of it).
  std::string Resume(std::string& partial);

  // The file's path, once opened.
  const std::string& path() const { return path_; }

  // Appends container output. Returns the line for observers when this call
  // broke the stream, else "".
  std::string AppendOutput(std::string_view data);

  // Appends "[kiln] <text>" on a line of its own. Returns the line for
  // observers when this call broke the stream, else "".
  std::string AppendPlatformLine(std::string_view text);

  // Whether the stream was opened and then broke, or could not be opened.
  bool broken() const { return state_ == State::kBroken; }

  // Closes the file. Returns the line for observers when close() fails (where
  // some file systems, NFS or FUSE ones, report a write that failed after it
  // returned), else "". The stream is then broken like a failed write breaks
  // it, except that the file can no longer be put right.
  std::string Close();

 private:
  enum class State { kNotOpen, kOpen, kBroken, kClosed };

  bool AtLineStart() const { return size_ == line_end_; }

  // Writes all of `data`, keeping size_ and line_end_ up to date with what
  // reached the file. False (with `err`) when a write fails.
  bool WriteAll(std::string_view data, int& err);

  std::string Break(int err);

  RunLog& run_;
  std::string path_;  // the file (set by Open)
  UniqueFd fd_;
  TimeIndexWriter index_;
  State state_ = State::kNotOpen;
  off_t size_ = 0;      // bytes in the file (only this stream appends to it)
  off_t line_end_ = 0;  // size_ just after the last newline written
};

// Adds "[kiln] <text>" to the log stream of a container run: what the
// runtime learns about the run outside it (that files could not all be
// deleted), said where the rest of its story is. For a run that has started,
// now; for the run an instance is being prepared for, as the first lines of
// its stream (RunLog). Nothing when `run` is null (no run yet). Best effort:
// the line is whole or absent (LogStream), and there is no one left to tell
// when it cannot be written. Thread-safe.
void NoteForRun(const std::shared_ptr<RunLog>& run, std::string_view text);

// Who tries again to delete what a clean-up left: in an instance's directory,
// the cluster's release; elsewhere, or at the release, the next provider made
// on the state directory (the cluster's kept lock file, or the scratch's
// name, leads it there).
inline constexpr char kLeftForDispose[] = "; what is left is deleted with the cluster";
inline constexpr char kLeftForNextProvider[] =
    "; a provider made later on this state directory tries again";

// What a clean-up left, as NoteForRun says it: "<lead>: <why><then>", where
// `removal` (the failed deletion's status) names the path and the reason.
std::string LeftoverText(std::string_view lead, const absl::Status& removal,
                         std::string_view then);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_LOG_STREAM_H_
