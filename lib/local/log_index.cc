// The time index of a log stream (log_index.h).
#include "local/log_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"

namespace kiln::local::internal {
namespace {

void Put64(int64_t v, char* out) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((u >> (8 * i)) & 0xFF);
}

int64_t Get64(const char* in) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return static_cast<int64_t>(u);
}

TimeRecord Decode(const char* in) {
  TimeRecord r;
  r.end = Get64(in);
  r.time = absl::FromUnixMicros(Get64(in + 8));
  r.closed = (Get64(in + 16) & kClosedFlag) != 0;
  return r;
}

// Records [first, first + count) of the index, fewer at its end.
std::vector<TimeRecord> ReadRecords(int fd, int64_t first, size_t count) {
  std::vector<TimeRecord> out;
  std::string buf(count * kTimeRecordBytes, '\0');
  ssize_t got;
  do {
    got = pread(fd, buf.data(), buf.size(), static_cast<off_t>(first) * kTimeRecordBytes);
  } while (got < 0 && errno == EINTR);
  if (got <= 0) return out;
  const size_t whole = static_cast<size_t>(got) / kTimeRecordBytes;
  out.reserve(whole);
  for (size_t i = 0; i < whole; ++i) out.push_back(Decode(buf.data() + i * kTimeRecordBytes));
  return out;
}

int64_t RecordCount(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return 0;
  return st.st_size / static_cast<int64_t>(kTimeRecordBytes);
}

constexpr size_t kBlockRecords = 512;

}  // namespace

std::string TimeIndexPath(std::string_view stream_path) {
  const size_t name = stream_path.rfind('/');
  const size_t job = name == 0 || name == std::string_view::npos ? std::string_view::npos
                                                                 : stream_path.rfind('/', name - 1);
  if (job == std::string_view::npos) return absl::StrCat(kTimeIndexDir, "/", Av(stream_path));
  return absl::StrCat(Av(stream_path.substr(0, job + 1)), kTimeIndexDir,
                      Av(stream_path.substr(job)));
}

void TimeIndexWriter::Open(const std::string& stream_path, bool fresh) {
  fd_.reset();
  last_micros_ = 0;
  const std::string path = TimeIndexPath(stream_path);
  if (!MakeDirs(DirName(path)).ok()) return;
  fd_ = UniqueFd(
      open(path.c_str(),
           O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (fresh ? O_TRUNC : 0), 0644));
  if (!fd_.valid() || fresh) return;
  // Going on with an index: its times never go back.
  const int64_t n = RecordCount(fd_.get());
  if (n == 0) return;
  const UniqueFd in(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) return;
  const std::vector<TimeRecord> last = ReadRecords(in.get(), n - 1, 1);
  if (!last.empty()) last_micros_ = absl::ToUnixMicros(last.back().time);
}

void TimeIndexWriter::Mark(int64_t end, bool closed) {
  if (!fd_.valid()) return;
  last_micros_ = std::max(last_micros_, absl::ToUnixMicros(absl::Now()));
  char record[kTimeRecordBytes];
  Put64(end, record);
  Put64(last_micros_, record + 8);
  Put64(closed ? kClosedFlag : 0, record + 16);
  ssize_t w;
  do {
    w = write(fd_.get(), record, sizeof record);
  } while (w < 0 && errno == EINTR);
  // A short record (a full disk) would misalign the ones after it: none
  // follows.
  if (w != static_cast<ssize_t>(sizeof record)) fd_.reset();
}

TimeIndexReader::TimeIndexReader(const std::string& stream_path, absl::Time fallback)
    : fd_(open(TimeIndexPath(stream_path).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)),
      fallback_(fallback) {}

bool TimeIndexReader::LoadMore() {
  if (!fd_.valid()) return false;
  std::vector<TimeRecord> more = ReadRecords(fd_.get(), next_, kBlockRecords);
  if (more.empty()) return false;
  next_ += static_cast<int64_t>(more.size());
  records_ = std::move(more);
  at_ = 0;
  return true;
}

absl::Time TimeIndexReader::TimeAt(int64_t end) {
  if (!fd_.valid()) return fallback_;
  if (records_.empty()) {
    // The first call: the first record reaching `end`, by bisection.
    int64_t lo = 0, hi = RecordCount(fd_.get());
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      const std::vector<TimeRecord> r = ReadRecords(fd_.get(), mid, 1);
      if (!r.empty() && r[0].end < end) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    next_ = lo;
    if (!LoadMore()) return fallback_;
  }
  while (records_[at_].end < end) {
    if (++at_ == records_.size()) {
      const TimeRecord last = records_.back();
      if (!LoadMore()) {
        records_ = {last};  // (the next call looks for more again)
        at_ = 0;
        return fallback_;
      }
    }
  }
  return records_[at_].time;
}

int64_t TimeIndexReader::EndBefore(absl::Time time) {
  if (!fd_.valid()) return 0;
  // The first record at `time` or later, by bisection (times never go back).
  int64_t lo = 0, hi = RecordCount(fd_.get());
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const std::vector<TimeRecord> r = ReadRecords(fd_.get(), mid, 1);
    if (!r.empty() && r[0].time < time) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return 0;
  const std::vector<TimeRecord> r = ReadRecords(fd_.get(), lo - 1, 1);
  return r.empty() ? 0 : r[0].end;
}

bool TimeIndexReader::ClosedAt(int64_t size) {
  if (!fd_.valid()) return false;
  const int64_t n = RecordCount(fd_.get());
  if (n == 0) return false;
  const std::vector<TimeRecord> last = ReadRecords(fd_.get(), n - 1, 1);
  return !last.empty() && last[0].closed && last[0].end >= size;
}

bool TimeIndexReader::Bounds(TimeRecord& first, TimeRecord& last) {
  if (!fd_.valid()) return false;
  const int64_t n = RecordCount(fd_.get());
  if (n == 0) return false;
  const std::vector<TimeRecord> a = ReadRecords(fd_.get(), 0, 1);
  const std::vector<TimeRecord> b = ReadRecords(fd_.get(), n - 1, 1);
  if (a.empty() || b.empty()) return false;
  first = a[0];
  last = b[0];
  return true;
}

}  // namespace kiln::local::internal
