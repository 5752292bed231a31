// The pieces of Pipe mode: a FIFO writer that waits for its reader without
// blocking forever, honours backpressure and a stop signal, never dies of
// SIGPIPE; gzip decompression; RecordIO framing; the per-epoch object order
// (ShuffleConfig, ShardedByS3Key).
//
// Internal to kiln::local: never installed. StopSignal is thread-safe; a
// FifoWriter and an Inflater are thread-compatible (one writer thread each);
// the free functions are pure.
#ifndef KILN_LIB_LOCAL_INTERNAL_PIPE_STREAM_H_
#define KILN_LIB_LOCAL_INTERNAL_PIPE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::local::internal {

// A one-way latch that also wakes poll(): Stop() makes fd() readable for
// ever. Thread-safe.
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  void Stop();
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  // An eventfd, readable once stopped (-1 if none could be made: waits then
  // poll with a short timeout instead).
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::atomic<bool> stopped_{false};
};

// The pipe buffer a FifoWriter asks for (F_SETPIPE_SZ): 1 MiB, the default
// limit of /proc/sys/fs/pipe-max-size, so no privilege is needed.
inline constexpr int kPipeBufferBytes = 1 << 20;

// Writes one epoch's bytes into one FIFO. Every call ends early with
// kStopped once `stop` fires, with kReaderClosed when the reader has closed
// its end (EPIPE; the SIGPIPE this raises is blocked and consumed on the
// calling thread), and with kGone when the FIFO has been removed before a
// reader opened it (the instance's tree was reset). Errors (Internal,
// naming the FIFO) are system failures.
class FifoWriter {
 public:
  enum class Result { kOk, kReaderClosed, kStopped, kGone };

  // `stop` must outlive the writer.
  explicit FifoWriter(const StopSignal& stop);
  ~FifoWriter();  // closes the FIFO
  FifoWriter(const FifoWriter&) = delete;
  FifoWriter& operator=(const FifoWriter&) = delete;

  // Waits until a reader opens the FIFO at `path`, then opens it for writing
  // (non-blocking; polled with a backoff of at most 5 ms, so a FIFO nobody
  // opens costs a few hundred wake-ups a second and no thread is stuck in
  // open()) and grows its buffer to kPipeBufferBytes.
  absl::StatusOr<Result> Open(const std::string& path);

  // Writes all of `data`, waiting for the reader to make room.
  absl::StatusOr<Result> Write(std::string_view data);

  // Moves the rest of the regular file `fd` (from its offset to EOF) into the
  // FIFO with splice(2): the page cache's pages go to the pipe, no copy
  // through user space. Falls back to read/write where splice is refused.
  // `name` names the file in errors.
  absl::StatusOr<Result> SpliceFrom(int fd, const std::string& name);

  // Waits until the reader has read everything written (the pipe is empty).
  absl::StatusOr<Result> WaitDrained();

  // Closes the FIFO: the reader sees end of file once it has read the rest.
  void Close();

  // Bytes written since Open.
  int64_t bytes() const { return bytes_; }

 private:
  // Waits until the FIFO can take more (or stop/hang-up). kOk to retry.
  absl::StatusOr<Result> WaitWritable();
  // Sleeps up to `ms`, returning early when stopped.
  void Nap(int ms) const;

  const StopSignal& stop_;
  std::string path_;
  int fd_ = -1;
  int64_t bytes_ = 0;
};

// Gzip decompression of a stream of chunks (concatenated gzip members are
// decompressed one after another, as gzip -d does). Thread-compatible.
class Inflater {
 public:
  Inflater();
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Decompresses `chunk`, handing every piece of output to `out` (non-empty
  // pieces, valid during the call only). An error of `out` stops and is
  // returned; corrupt data is InvalidArgument.
  absl::Status Feed(std::string_view chunk,
                    absl::FunctionRef<absl::Status(std::string_view)> out);
  // After the last chunk: InvalidArgument when the stream stops inside a
  // gzip member (a truncated object). An empty object is OK (no output).
  absl::Status Finish() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// dmlc/MXNet RecordIO: the magic number 0xced7230a, a little-endian word
// whose low 29 bits are the length and top 3 bits the continuation flag, the
// data, zero padding to a multiple of 4 bytes. Where the data holds the
// magic number at a 4-byte-aligned offset, the record is split there into
// parts (flags 1, 2, ..., 3) and the reader puts the magic number back, as
// dmlc's RecordIOWriter does, so chunked readers never mistake data for a
// record start. Appends the framed `record` to `out`. InvalidArgument when
// the record has 2^29 bytes or more (the format's limit).
absl::Status AppendRecordIO(std::string_view record, std::string* out);

inline constexpr uint32_t kRecordIOMagic = 0xced7230a;

// The positions (into a list of `count` objects sorted by key) that instance
// `instance` of `instances` reads in epoch `epoch`, in reading order. With a
// shuffle seed the whole list is shuffled (Fisher-Yates on a generator keyed
// by seed and epoch, so the same seed gives the same orders everywhere) and
// then sharded, so ShardedByS3Key with a seed redistributes objects across
// instances every epoch; without one the order is the sorted order. Sharded:
// instance i gets positions i, i + n, i + 2n, ... of that order; otherwise
// every object.
std::vector<size_t> EpochOrder(size_t count, bool has_seed, int64_t seed, uint64_t epoch,
                               bool sharded, size_t instance, size_t instances);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_PIPE_STREAM_H_
