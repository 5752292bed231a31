// Reading the log streams of training jobs, as CloudWatch Logs shows them in
// the log group /aws/sagemaker/TrainingJobs: one stream per host and run,
// named "<job>/algo-<k>-<epoch>[-<n>]", each a sequence of events (a line of
// the container's output or one of Kiln's own "[kiln] " lines) with the time
// it was written.
//
// A backend that keeps log streams implements LogReader (kiln/local/local.h:
// OpenLogReader); the HTTP server (kiln/serve/server.h) answers CloudWatch
// Logs' read API from one.
//
// Positions: every event occupies a range [begin, end) of byte positions in
// its stream, and the next event begins where it ends; position 0 is the
// stream's start. Positions are stable: a reader resumes from one later, also
// in another process, and gets the events after it.
//
// Threading: implementations are thread-safe; the streams may be written
// meanwhile (a running job's), and a read gives the events complete at that
// moment: a line whose newline has not been written yet is held back until
// it has, or until its run has ended.
#ifndef KILN_LOG_READER_H_
#define KILN_LOG_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kiln {

// The log group every training job's streams are in.
inline constexpr char kTrainingLogGroup[] = "/aws/sagemaker/TrainingJobs";

struct LogStreamInfo {
  std::string name;  // "<job>/algo-<k>-<epoch>[-<n>]"
  // When the run started.
  absl::Time creation_time = absl::UnixEpoch();
  // The first and last events' times; InfinitePast for a stream with no
  // event yet.
  absl::Time first_event_time = absl::InfinitePast();
  absl::Time last_event_time = absl::InfinitePast();
  // The stream's size in bytes.
  int64_t stored_bytes = 0;
};

struct LogEvent {
  absl::Time timestamp;
  std::string message;  // the line, without its newline
  int64_t begin = 0;    // its positions: [begin, end)
  int64_t end = 0;
};

// Which events a read gives: those that lie in [from, to) (positions), with a
// timestamp in [start_time, end_time), at most `max_events` of them and no
// more than about `max_bytes` of messages (at least one event when any
// matches).
struct LogRange {
  int64_t from = 0;
  int64_t to = INT64_MAX;
  absl::Time start_time = absl::InfinitePast();
  absl::Time end_time = absl::InfiniteFuture();
  size_t max_events = 10000;
  size_t max_bytes = size_t{1} << 20;
};

class LogReader {
 public:
  virtual ~LogReader() = default;

  // The streams whose names start with `prefix` ("" for all), sorted by
  // name. Errors: the system's, when the streams cannot be read.
  virtual absl::StatusOr<std::vector<LogStreamInfo>> ListStreams(std::string_view prefix) const = 0;

  // The first events of `range` in stream `name`, in order (forward == true),
  // or its last ones, still in order (forward == false). Errors: NotFound
  // when there is no stream of that name; the system's when it cannot be
  // read.
  virtual absl::StatusOr<std::vector<LogEvent>> ReadEvents(std::string_view name,
                                                           const LogRange& range,
                                                           bool forward) const = 0;
};

}  // namespace kiln

#endif  // KILN_LOG_READER_H_
