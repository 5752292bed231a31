// The time index of a log stream: when each part of the stream was written,
// so a reader (kiln/log_reader.h) gives every line the time it was written.
//
// The index of the stream <log_dir>/<job>/<name> is the file
// <log_dir>/.times/<job>/<name> (no job's name starts with a dot), so the
// job's directory holds its streams only. An index is a sequence of 24-byte
// records, each three little-endian 64-bit integers:
//   end    the stream's size when the record was written,
//   micros the time, in microseconds since the Unix epoch (never less than
//          the previous record's),
//   flags  kClosedFlag: the stream's writer closed it here (its run ended:
//          a last line without a newline is whole).
// A line's time is that of the first record whose end reaches the line's
// end. A record is written after the bytes it covers reach the stream; a
// torn last record (a writer killed mid-write) is ignored. Lines past the
// last record (an index that could not be written) take the stream's
// modification time.
//
// Internal to kiln::local: never installed. TimeIndexWriter is
// thread-compatible; TimeIndexReader is thread-compatible and may read an
// index being written.
#ifndef KILN_LIB_LOCAL_LOG_INDEX_H_
#define KILN_LIB_LOCAL_LOG_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {

inline constexpr size_t kTimeRecordBytes = 24;
inline constexpr int64_t kClosedFlag = 1;

struct TimeRecord {
  int64_t end = 0;
  absl::Time time;
  bool closed = false;
};

// The directory of the indexes under a log directory.
inline constexpr char kTimeIndexDir[] = ".times";

// The index of the stream `stream_path` (<log_dir>/<job>/<name>).
std::string TimeIndexPath(std::string_view stream_path);

// Appends records to a stream's index, best effort: a record that cannot be
// written leaves the lines it covers to the stream's modification time.
class TimeIndexWriter {
 public:
  // Opens the index of `stream_path` for appending; `fresh`: the stream was
  // just made, so an index left by an earlier stream of that name is
  // emptied.
  void Open(const std::string& stream_path, bool fresh);
  // Records that the stream holds `end` bytes as of now.
  void Mark(int64_t end, bool closed = false);
  void Close() { fd_.reset(); }

 private:
  UniqueFd fd_;
  int64_t last_micros_ = 0;
};

// Reads an index forward: the time of each line, in order of their ends.
class TimeIndexReader {
 public:
  // Reads the index of `stream_path` (none: every line takes `fallback`).
  TimeIndexReader(const std::string& stream_path, absl::Time fallback);

  // The time of the line that ends at `end`; calls come with ends that never
  // decrease.
  absl::Time TimeAt(int64_t end);

  // Where the lines written before `time` end: the end of the last record
  // before it (0 when none is). Independent of TimeAt's calls.
  int64_t EndBefore(absl::Time time);

  // Whether the stream was closed at `size` or later (its last line is whole
  // without a newline).
  bool ClosedAt(int64_t size);

  // The first and last records (false when the index has none).
  bool Bounds(TimeRecord& first, TimeRecord& last);

 private:
  // Loads the records after those in `records_`, from offset `next_`.
  bool LoadMore();

  UniqueFd fd_;
  absl::Time fallback_;
  std::vector<TimeRecord> records_;  // a window of the index, in order
  size_t at_ = 0;                    // the record TimeAt last used, in records_
  int64_t next_ = 0;                 // where the index's next unread record is
};

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_LOG_INDEX_H_
