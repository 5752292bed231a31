// kiln::agent's outbox (kiln/agent/outbox.h): segment files of
// length | CRC-32C | seq | payload records, each written with one pwritev, a
// sparse index of record offsets per segment in memory, and the acknowledged
// number in a 16-byte file rewritten in place.
#include "kiln/agent/outbox.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "agent/internal/crc32c.h"
#include "kiln/plugin/status_macros.h"

namespace kiln::agent {
namespace {

using internal::Crc32c;

constexpr size_t kHeaderBytes = 16;
// Every kIndexStride-th record's offset is kept in memory: a Read starts at
// most kIndexStride - 1 records before the one it wants.
constexpr uint64_t kIndexStride = 64;
constexpr int64_t kMaxSegmentBytes = int64_t{1} << 30;
// What a Read or a scan asks of the file at once (more for a larger record).
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kAckFileBytes = 16;
constexpr char kLockFile[] = "lock";
constexpr char kAckFile[] = "acknowledged";
constexpr char kSegmentSuffix[] = ".log";
constexpr size_t kSeqDigits = 20;  // (UINT64_MAX has 20)

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The checksum of a record: CRC-32C of its seq (8 bytes, little-endian) then
// its payload.
uint32_t RecordCrc(uint64_t seq, const char* payload, size_t n) {
  char s[8];
  PutU64(s, seq);
  return Crc32c(Crc32c(0, s, sizeof s), payload, n);
}

std::string SegmentName(uint64_t first_seq) {
  return absl::StrFormat("%020u%s", first_seq, kSegmentSuffix);
}

// The first seq of a segment file named `name`, or false for any other name.
bool ParseSegmentName(const std::string& name, uint64_t* first_seq) {
  const size_t suffix = sizeof kSegmentSuffix - 1;
  if (name.size() != kSeqDigits + suffix || name.compare(kSeqDigits, suffix, kSegmentSuffix) != 0) {
    return false;
  }
  for (size_t i = 0; i < kSeqDigits; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return absl::SimpleAtoi(absl::string_view(name.data(), kSeqDigits), first_seq);
}

// A failed write of `path`: ResourceExhausted when the disk, a quota or the
// file size limit is full (the caller can retry once space is back).
absl::Status WriteError(int err, const std::string& path) {
  std::string message = absl::StrCat("outbox file '", path, "': cannot write: ", strerror(err));
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
    return absl::ResourceExhaustedError(std::move(message));
  }
  return absl::InternalError(std::move(message));
}

absl::Status PathError(const std::string& what, const std::string& path, int err) {
  return absl::InternalError(
      absl::StrCat("outbox file '", path, "': cannot ", what, ": ", strerror(err)));
}

// Writes all of `iov` at `offset`, however many calls that takes.
absl::Status WriteAt(int fd, const std::string& path, int64_t offset, iovec* iov, int iovcnt) {
  while (iovcnt > 0) {
    const ssize_t n = pwritev(fd, iov, iovcnt, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return WriteError(errno, path);
    }
    offset += n;
    size_t left = static_cast<size_t>(n);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return absl::OkStatus();
}

// Reads up to `n` bytes at `offset` into `out` (fewer only at the end of the
// file); returns how many.
absl::StatusOr<size_t> ReadAt(int fd, const std::string& path, int64_t offset, char* out,
                              size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fd, out + got, n - got, offset + static_cast<int64_t>(got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return PathError("read", path, errno);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PathError("open", dir, errno);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return PathError("sync", dir, err);
  return absl::OkStatus();
}

// One segment file. first_seq and path never change; the rest is guarded by
// the outbox's mutex, except that fd, once set, is read without it by whoever
// holds the segment (a Read keeps it open past Acknowledge and Close).
struct Segment {
  Segment(uint64_t first, std::string file) : first_seq(first), path(std::move(file)) {}
  ~Segment() {
    if (fd >= 0) close(fd);
  }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const uint64_t first_seq;
  const std::string path;
  int fd = -1;         // read-write for the last segment; others opened when read
  uint64_t count = 0;  // records
  int64_t size = 0;    // bytes of whole records; anything after is not part of it
  // index[i]: the offset of record first_seq + i * kIndexStride.
  std::vector<int64_t> index;
};

// Reads the records of one segment file in order, from `offset` up to `end`,
// asking the file for kReadChunk bytes (or one record) at a time.
class RecordReader {
 public:
  RecordReader(int fd, const std::string& path, int64_t offset, int64_t end)
      : fd_(fd), path_(path), offset_(offset), end_(end) {}

  // The offset of the next record.
  int64_t offset() const { return offset_; }

  // Reads the next record, which must be numbered `seq`: its payload in
  // *payload (a view into this reader, valid until the next call). DataLoss
  // naming the file and offset when it is not a whole, valid record numbered
  // `seq`; Internal when the file cannot be read.
  absl::Status Next(uint64_t seq, std::string_view* payload) {
    KILN_ASSIGN_OR_RETURN(size_t avail, Fill(kHeaderBytes));
    if (avail < kHeaderBytes) {
      return Damaged(
          absl::StrCat("cut short: ", avail, " bytes of a ", kHeaderBytes, "-byte header"));
    }
    const char* p = Here();
    const uint32_t length = GetU32(p);
    const uint32_t crc = GetU32(p + 4);
    const uint64_t found = GetU64(p + 8);
    if (found != seq) return Damaged(absl::StrCat("numbered ", found, " where ", seq, " was due"));
    if (length > kMaxOutboxPayloadBytes) {
      return Damaged(absl::StrCat("payload length ", length, " is over the limit of ",
                                  kMaxOutboxPayloadBytes));
    }
    const size_t record = kHeaderBytes + length;
    KILN_ASSIGN_OR_RETURN(avail, Fill(record));
    if (avail < record) {
      return Damaged(absl::StrCat("cut short: ", avail, " bytes of a ", record, "-byte record"));
    }
    p = Here();
    if (RecordCrc(seq, p + kHeaderBytes, length) != crc) return Damaged("checksum mismatch");
    *payload = std::string_view(p + kHeaderBytes, length);
    offset_ += static_cast<int64_t>(record);
    return absl::OkStatus();
  }

 private:
  const char* Here() const { return buf_.data() + (offset_ - buf_offset_); }

  // Makes at least `n` bytes from offset_ be in buf_ (fewer at end_);
  // returns how many there are.
  absl::StatusOr<size_t> Fill(size_t n) {
    const int64_t buffered_end = buf_offset_ + static_cast<int64_t>(buf_.size());
    if (offset_ >= buf_offset_ && buffered_end - offset_ >= static_cast<int64_t>(n)) {
      return static_cast<size_t>(buffered_end - offset_);
    }
    const size_t want = static_cast<size_t>(
        std::min<int64_t>(end_ - offset_, static_cast<int64_t>(std::max(n, kReadChunk))));
    buf_.resize(want);
    KILN_ASSIGN_OR_RETURN(size_t got, ReadAt(fd_, path_, offset_, buf_.data(), want));
    buf_.resize(got);
    buf_offset_ = offset_;
    return got;
  }

  absl::Status Damaged(absl::string_view why) const {
    return absl::DataLossError(
        absl::StrCat("outbox segment '", path_, "': record at offset ", offset_, ": ", why));
  }

  const int fd_;
  const std::string& path_;
  int64_t offset_;
  const int64_t end_;
  std::string buf_;
  int64_t buf_offset_ = 0;
};

// Whether a valid record numbered `seq` or later starts anywhere in the file
// between `offset` and `end`: then damage at `offset` is not a torn tail.
absl::StatusOr<bool> ValidRecordFollows(int fd, const std::string& path, int64_t offset,
                                        int64_t end, uint64_t seq) {
  std::string rest(static_cast<size_t>(end - offset), '\0');
  KILN_ASSIGN_OR_RETURN(size_t got, ReadAt(fd, path, offset, rest.data(), rest.size()));
  rest.resize(got);
  const uint64_t highest = seq + rest.size() / kHeaderBytes;
  for (size_t p = 0; p + kHeaderBytes <= rest.size(); ++p) {
    const uint64_t found = GetU64(rest.data() + p + 8);
    if (found < seq || found > highest) continue;
    const uint32_t length = GetU32(rest.data() + p);
    if (length > rest.size() - p - kHeaderBytes) continue;
    if (RecordCrc(found, rest.data() + p + kHeaderBytes, length) == GetU32(rest.data() + p + 4)) {
      return true;
    }
  }
  return false;
}

class OutboxImpl final : public Outbox {
 public:
  OutboxImpl(std::string dir, OutboxOptions options, int lock_fd)
      : dir_(std::move(dir)), options_(options), lock_fd_(lock_fd) {}
  ~OutboxImpl() override { Close(); }

  // Reads the directory: the acknowledged number, then the segments (see
  // Outbox::Open). Called once, before the outbox is shared.
  absl::Status Load();

  const std::string& dir() const override { return dir_; }

  absl::StatusOr<uint64_t> Append(std::string_view payload) override {
    if (payload.size() > kMaxOutboxPayloadBytes) {
      return absl::InvalidArgumentError(absl::StrCat("outbox '", dir_, "': a payload of ",
                                                     payload.size(), " bytes is over the limit of ",
                                                     kMaxOutboxPayloadBytes));
    }
    const size_t record = kHeaderBytes + payload.size();
    absl::MutexLock lock(&mu_);
    if (closed_) return Closed();
    if (truncate_pending_) {
      // (Before a new segment is started: no segment but the last may end
      // in part of a record.)
      const Segment& last = *segments_.back();
      if (ftruncate(last.fd, last.size) != 0) return WriteError(errno, last.path);
      truncate_pending_ = false;
    }
    if (segments_.empty() ||
        (segments_.back()->size > 0 &&
         segments_.back()->size + static_cast<int64_t>(record) > options_.segment_bytes)) {
      KILN_RETURN_IF_ERROR(StartSegment());
    }
    Segment& segment = *segments_.back();
    const uint64_t seq = last_seq_ + 1;
    char header[kHeaderBytes];
    PutU32(header, static_cast<uint32_t>(payload.size()));
    PutU32(header + 4, RecordCrc(seq, payload.data(), payload.size()));
    PutU64(header + 8, seq);
    iovec iov[2] = {{header, kHeaderBytes}, {const_cast<char*>(payload.data()), payload.size()}};
    absl::Status written = WriteAt(segment.fd, segment.path, segment.size, iov, 2);
    if (written.ok() && options_.sync && fdatasync(segment.fd) != 0) {
      written = WriteError(errno, segment.path);
    }
    if (!written.ok()) {
      // Nothing appended: cut off what part of the record got written (now,
      // or before the next write if that fails too).
      truncate_pending_ = ftruncate(segment.fd, segment.size) != 0;
      return written;
    }
    if (segment.count % kIndexStride == 0) segment.index.push_back(segment.size);
    segment.size += static_cast<int64_t>(record);
    ++segment.count;
    last_seq_ = seq;
    return seq;
  }

  absl::StatusOr<std::vector<OutboxEvent>> Read(uint64_t after, size_t max_bytes) const override {
    std::vector<OutboxEvent> events;
    if (after == UINT64_MAX) return events;
    size_t bytes = 0;
    uint64_t from = after + 1;
    // One segment a round: where to start is found under the lock, the file
    // is read outside it.
    while (true) {
      std::shared_ptr<Segment> segment;
      uint64_t seq;
      int64_t offset, end;
      uint64_t end_seq;
      {
        absl::MutexLock lock(&mu_);
        if (closed_) return Closed();
        from = std::max(from, acked_ + 1);
        if (from > last_seq_) break;
        // The last segment that starts at or before `from` holds it (every
        // segment holds at least one event not acknowledged, but the last).
        auto it = std::upper_bound(
            segments_.begin(), segments_.end(), from,
            [](uint64_t s, const std::shared_ptr<Segment>& seg) { return s < seg->first_seq; });
        segment = *--it;
        if (segment->fd < 0) {
          segment->fd = open(segment->path.c_str(), O_RDONLY | O_CLOEXEC);
          if (segment->fd < 0) return PathError("open", segment->path, errno);
        }
        const uint64_t k = (from - segment->first_seq) / kIndexStride;
        seq = segment->first_seq + k * kIndexStride;
        offset = segment->index[k];
        end = segment->size;
        end_seq = segment->first_seq + segment->count;
      }
      RecordReader reader(segment->fd, segment->path, offset, end);
      for (; seq < end_seq; ++seq) {
        std::string_view payload;
        KILN_RETURN_IF_ERROR(reader.Next(seq, &payload));
        if (seq < from) continue;
        if (!events.empty() && bytes + payload.size() > max_bytes) return events;
        events.push_back(OutboxEvent{seq, std::string(payload)});
        bytes += payload.size();
        if (bytes >= max_bytes) return events;
      }
      from = end_seq;
    }
    return events;
  }

  absl::Status Acknowledge(uint64_t seq) override {
    absl::MutexLock ack_lock(&ack_mu_);
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return Closed();
      if (seq > last_seq_) {
        return absl::InvalidArgumentError(absl::StrCat("outbox '", dir_,
                                                       "': cannot acknowledge event ", seq,
                                                       ": the last event is ", last_seq_));
      }
      if (seq <= acked_) return absl::OkStatus();
    }
    // The number first, so that a segment is never gone while its events
    // would still be due.
    KILN_RETURN_IF_ERROR(WriteAck(seq));
    std::vector<std::shared_ptr<Segment>> reclaimed;
    {
      absl::MutexLock lock(&mu_);
      acked_ = seq;
      reclaimed = TakeAcknowledged();
    }
    return Unlink(reclaimed);
  }

  uint64_t last_seq() const override {
    absl::MutexLock lock(&mu_);
    return last_seq_;
  }
  uint64_t acknowledged() const override {
    absl::MutexLock lock(&mu_);
    return acked_;
  }

  bool WaitFor(uint64_t after, absl::Duration timeout) const override {
    absl::MutexLock lock(&mu_);
    const uint64_t generation = wake_generation_;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return last_seq_ > after || closed_ || wake_generation_ != generation;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    return last_seq_ > after;
  }

  void Wake() override {
    absl::MutexLock lock(&mu_);
    ++wake_generation_;
  }

  void Close() override {
    absl::MutexLock ack_lock(&ack_mu_);
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    segments_.clear();
    if (ack_fd_ >= 0) close(ack_fd_);
    ack_fd_ = -1;
    if (lock_fd_ >= 0) close(lock_fd_);  // (releases the flock)
    lock_fd_ = -1;
  }

 private:
  std::string PathOf(const std::string& name) const { return absl::StrCat(dir_, "/", name); }

  absl::Status Closed() const {
    return absl::FailedPreconditionError(absl::StrCat("outbox '", dir_, "' is closed"));
  }

  // Starts the segment of event last_seq_ + 1.
  absl::Status StartSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto segment = std::make_shared<Segment>(last_seq_ + 1, PathOf(SegmentName(last_seq_ + 1)));
    segment->fd = open(segment->path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (segment->fd < 0) return WriteError(errno, segment->path);
    if (options_.sync) KILN_RETURN_IF_ERROR(SyncDir(dir_));
    segments_.push_back(std::move(segment));
    return absl::OkStatus();
  }

  // Takes out of segments_ those whose events are all acknowledged.
  std::vector<std::shared_ptr<Segment>> TakeAcknowledged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::shared_ptr<Segment>> taken;
    while (!segments_.empty()) {
      const Segment& first = *segments_.front();
      const uint64_t next =
          segments_.size() > 1 ? segments_[1]->first_seq : first.first_seq + first.count;
      if (next > acked_ + 1) break;
      taken.push_back(std::move(segments_.front()));
      segments_.pop_front();
    }
    if (segments_.empty()) truncate_pending_ = false;
    return taken;
  }

  static absl::Status Unlink(const std::vector<std::shared_ptr<Segment>>& segments) {
    for (const auto& segment : segments) {
      if (unlink(segment->path.c_str()) != 0 && errno != ENOENT) {
        return PathError("delete", segment->path, errno);
      }
    }
    return absl::OkStatus();
  }

  // Rewrites the acknowledged file: seq, its CRC-32C, 4 zero bytes.
  absl::Status WriteAck(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ack_mu_) {
    char buf[kAckFileBytes] = {};
    PutU64(buf, seq);
    PutU32(buf + 8, Crc32c(0, buf, 8));
    iovec iov = {buf, sizeof buf};
    KILN_RETURN_IF_ERROR(WriteAt(ack_fd_, PathOf(kAckFile), 0, &iov, 1));
    if (options_.sync && fdatasync(ack_fd_) != 0) return WriteError(errno, PathOf(kAckFile));
    return absl::OkStatus();
  }

  // Load's parts.
  absl::Status LoadAcknowledged();
  absl::Status ScanSegment(Segment& segment, bool last);

  const std::string dir_;
  const OutboxOptions options_;

  // Held through Acknowledge, so that the file is written outside mu_.
  absl::Mutex ack_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  int ack_fd_ ABSL_GUARDED_BY(ack_mu_) = -1;

  mutable absl::Mutex mu_;
  int lock_fd_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t wake_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The last segment may hold part of a record after its size (a failed
  // write whose truncation failed too): cut it off before the next write.
  bool truncate_pending_ ABSL_GUARDED_BY(mu_) = false;
  // In order of first_seq, each starting where the one before ends; Append
  // writes to the last one.
  std::deque<std::shared_ptr<Segment>> segments_ ABSL_GUARDED_BY(mu_);
};

absl::Status OutboxImpl::LoadAcknowledged() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const std::string path = PathOf(kAckFile);
  ack_fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (ack_fd_ < 0) return PathError("open", path, errno);
  char buf[kAckFileBytes + 1];
  KILN_ASSIGN_OR_RETURN(size_t got, ReadAt(ack_fd_, path, 0, buf, sizeof buf));
  if (got == 0) {
    // New: written now, so that Acknowledge only ever rewrites its bytes.
    KILN_RETURN_IF_ERROR(WriteAck(0));
    if (options_.sync) KILN_RETURN_IF_ERROR(SyncDir(dir_));
    acked_ = 0;
    return absl::OkStatus();
  }
  if (got != kAckFileBytes || Crc32c(0, buf, 8) != GetU32(buf + 8) || GetU32(buf + 12) != 0) {
    return absl::DataLossError(absl::StrCat("outbox file '", path,
                                            "': not a valid acknowledged number (", got, " bytes; ",
                                            kAckFileBytes, " with a checksum are due)"));
  }
  acked_ = GetU64(buf);
  return absl::OkStatus();
}

// Reads every record of `segment` (its fd open), setting its count, size and
// index. A damaged record of the last segment with no valid record after it
// is truncated away, with what follows it.
absl::Status OutboxImpl::ScanSegment(Segment& segment, bool last) {
  struct stat st;
  if (fstat(segment.fd, &st) != 0) return PathError("stat", segment.path, errno);
  const int64_t file_size = st.st_size;
  RecordReader reader(segment.fd, segment.path, 0, file_size);
  while (reader.offset() < file_size) {
    const uint64_t seq = segment.first_seq + segment.count;
    std::string_view payload;
    absl::Status status = reader.Next(seq, &payload);
    if (!status.ok()) {
      if (!last || status.code() != absl::StatusCode::kDataLoss) return status;
      KILN_ASSIGN_OR_RETURN(bool follows, ValidRecordFollows(segment.fd, segment.path,
                                                             reader.offset(), file_size, seq));
      if (follows) {
        return absl::DataLossError(absl::StrCat(status.message(), " (valid records follow it)"));
      }
      if (ftruncate(segment.fd, reader.offset()) != 0) {
        return PathError("truncate", segment.path, errno);
      }
      break;
    }
    if (segment.count % kIndexStride == 0) {
      segment.index.push_back(reader.offset() -
                              static_cast<int64_t>(kHeaderBytes + payload.size()));
    }
    ++segment.count;
  }
  segment.size = reader.offset();
  return absl::OkStatus();
}

absl::Status OutboxImpl::Load() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  KILN_RETURN_IF_ERROR(LoadAcknowledged());

  std::vector<uint64_t> firsts;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    uint64_t first;
    if (ParseSegmentName(it->path().filename().string(), &first)) firsts.push_back(first);
  }
  if (ec) return PathError("list", dir_, ec.value());
  std::sort(firsts.begin(), firsts.end());

  // Segments whose events are all acknowledged (the next starts at most one
  // after the acknowledged number) are left from an Acknowledge cut short.
  size_t i = 0;
  for (; i + 1 < firsts.size() && firsts[i + 1] <= acked_ + 1; ++i) {
    const std::string path = PathOf(SegmentName(firsts[i]));
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return PathError("delete", path, errno);
  }
  if (i < firsts.size() && firsts[i] > acked_ + 1) {
    return absl::DataLossError(absl::StrCat(
        "outbox '", dir_, "': events ", acked_ + 1, " to ", firsts[i] - 1, " are in no segment (",
        acked_, " acknowledged; the first segment is '", SegmentName(firsts[i]), "')"));
  }
  uint64_t next = acked_ + 1;
  for (; i < firsts.size(); ++i) {
    const bool last = i + 1 == firsts.size();
    auto segment = std::make_shared<Segment>(firsts[i], PathOf(SegmentName(firsts[i])));
    if (!segments_.empty() && segment->first_seq != next) {
      return absl::DataLossError(absl::StrCat("outbox segment '", segment->path,
                                              "': starts at event ", segment->first_seq,
                                              " where event ", next, " was due"));
    }
    segment->fd = open(segment->path.c_str(), (last ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (segment->fd < 0) return PathError("open", segment->path, errno);
    KILN_RETURN_IF_ERROR(ScanSegment(*segment, last));
    if (!last) {
      close(segment->fd);  // (opened again when read)
      segment->fd = -1;
    }
    next = segment->first_seq + segment->count;
    segments_.push_back(std::move(segment));
  }
  last_seq_ = std::max(acked_, next - 1);
  // The last segment too, when all its events are acknowledged (the next
  // Append starts a new one).
  return Unlink(TakeAcknowledged());
}

// Makes `dir` (0700) and its missing parents.
absl::Status MakeDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) == 0) return absl::OkStatus();
  int err = errno;
  if (err == ENOENT) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
    if (ec) return PathError("make", dir, ec.value());
    if (mkdir(dir.c_str(), 0700) == 0) return absl::OkStatus();
    err = errno;
  }
  struct stat st;
  if (err == EEXIST && stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return absl::OkStatus();
  return PathError("make", dir, err);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Outbox>> Outbox::Open(std::string dir, OutboxOptions options) {
  if (dir.empty()) return absl::InvalidArgumentError("outbox: the directory is empty");
  if (options.segment_bytes < 1 || options.segment_bytes > kMaxSegmentBytes) {
    return absl::InvalidArgumentError(absl::StrCat("outbox '", dir, "': segment_bytes ",
                                                   options.segment_bytes, " is not between 1 and ",
                                                   kMaxSegmentBytes));
  }
  KILN_RETURN_IF_ERROR(MakeDir(dir));
  const std::string lock_path = absl::StrCat(dir, "/", kLockFile);
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return PathError("open", lock_path, errno);
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(lock_fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("outbox '", dir, "' is open already, in this process or another (",
                       lock_path, " is locked); one Outbox per directory"));
    }
    return PathError("lock", lock_path, err);
  }
  auto outbox = std::make_unique<OutboxImpl>(std::move(dir), options, lock_fd);
  KILN_RETURN_IF_ERROR(outbox->Load());
  return outbox;
}

}  // namespace kiln::agent
