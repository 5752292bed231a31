// The local backend's log streams as a LogReader (kiln/local/local.h:
// NewLocalLogReader): the stream files under the log directory, and their
// time indexes (log_index.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kiln/local/local.h"
#include "local/internal/fs.h"
#include "local/log_index.h"
#include "local/log_stream.h"

namespace kiln::local {
namespace {

using internal::Av;
using internal::ErrnoStatus;
using internal::kMaxLineBytes;
using internal::TimeIndexReader;
using internal::TimeRecord;
using internal::UniqueFd;

bool Digits(absl::string_view text, int64_t& out) {
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit) &&
         absl::SimpleAtoi(text, &out);
}

// Whether `file` is a stream's file name, algo-<k>-<epoch>[-<n>]; its epoch.
bool ParseStreamFile(absl::string_view file, int64_t& epoch) {
  if (!absl::ConsumePrefix(&file, "algo-")) return false;
  const std::vector<absl::string_view> parts = absl::StrSplit(file, '-');
  int64_t host = 0, n = 0;
  if (parts.size() != 2 && parts.size() != 3) return false;
  if (!Digits(parts[0], host) || host < 1 || !Digits(parts[1], epoch)) return false;
  return parts.size() == 2 || (Digits(parts[2], n) && n >= 2);
}

// Whether `name` is "<job>/<stream file>" with a job name that names a
// directory of the log directory (and nothing above or beside it).
bool ParseStreamName(std::string_view name, int64_t& epoch) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos || slash == 0 || name[0] == '.') return false;
  const std::string_view job = name.substr(0, slash);
  if (job == "." || job == "..") return false;
  return ParseStreamFile(Av(name.substr(slash + 1)), epoch);
}

// The entries of directory `path` (without "." and ".."); none when it does
// not exist.
absl::StatusOr<std::vector<std::string>> Entries(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return out;
    return ErrnoStatus(errno, "list", path);
  }
  errno = 0;
  while (const dirent* e = readdir(d)) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") out.emplace_back(n);
  }
  const int err = errno;
  closedir(d);
  if (err != 0) return ErrnoStatus(err, "list", path);
  return out;
}

// Splits a stream into events as observers get its lines (log_stream.h's
// LineSplitter): at each newline, and in pieces of kMaxLineBytes.
class EventScanner {
 public:
  EventScanner(int fd, int64_t from, int64_t size) : fd_(fd), at_(from), size_(size) {}

  // The next event's bytes [begin, end) and its message; false at the end
  // of what is whole (`rest` is then what follows the last newline, when it
  // is shorter than a piece).
  bool Next(int64_t& begin, int64_t& end, std::string& message, std::string& rest) {
    for (;;) {
      const size_t nl = buf_.find('\n', scan_);
      if (nl != std::string::npos) {
        Take(nl, nl + 1, begin, end, message);
        return true;
      }
      scan_ = buf_.size();
      if (buf_.size() >= kMaxLineBytes) {
        Take(kMaxLineBytes, kMaxLineBytes, begin, end, message);
        return true;
      }
      if (!Fill()) {
        rest = buf_;
        return false;
      }
    }
  }

  // Where the bytes not yet taken begin.
  int64_t position() const { return at_; }
  absl::Status status() const { return status_; }

 private:
  void Take(size_t length, size_t used, int64_t& begin, int64_t& end, std::string& message) {
    begin = at_;
    end = at_ + static_cast<int64_t>(used);
    message.assign(buf_, 0, length);
    if (!message.empty() && message.back() == '\r') message.pop_back();
    buf_.erase(0, used);
    scan_ = 0;
    at_ = end;
  }

  bool Fill() {
    const int64_t read_at = at_ + static_cast<int64_t>(buf_.size());
    if (read_at >= size_) return false;
    char chunk[64 * 1024];
    const size_t want = static_cast<size_t>(std::min<int64_t>(sizeof chunk, size_ - read_at));
    ssize_t got;
    do {
      got = pread(fd_, chunk, want, static_cast<off_t>(read_at));
    } while (got < 0 && errno == EINTR);
    if (got < 0) status_ = ErrnoStatus(errno, "read", "the log stream");
    if (got <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(got));
    return true;
  }

  int fd_;
  int64_t at_;    // the position of buf_'s first byte
  int64_t size_;  // what is read at most (the size when the read began)
  std::string buf_;
  size_t scan_ = 0;  // buf_ has no newline before this
  absl::Status status_;
};

class LocalLogReader final : public LogReader {
 public:
  explicit LocalLogReader(std::string log_dir) : log_dir_(std::move(log_dir)) {}

  absl::StatusOr<std::vector<LogStreamInfo>> ListStreams(std::string_view prefix) const override {
    std::vector<std::string> jobs;
    const size_t slash = prefix.find('/');
    if (slash != std::string_view::npos) {
      jobs.emplace_back(prefix.substr(0, slash));
    } else {
      absl::StatusOr<std::vector<std::string>> all = Entries(log_dir_);
      if (!all.ok()) return all.status();
      for (std::string& job : *all) {
        if (job[0] != '.' && absl::StartsWith(job, Av(prefix))) jobs.push_back(std::move(job));
      }
    }
    std::vector<LogStreamInfo> out;
    for (const std::string& job : jobs) {
      if (job.empty() || job[0] == '.' || job == "..") continue;
      const std::string dir = absl::StrCat(log_dir_, "/", job);
      absl::StatusOr<std::vector<std::string>> files = Entries(dir);
      if (!files.ok()) return files.status();
      for (const std::string& file : *files) {
        int64_t epoch = 0;
        if (!ParseStreamFile(file, epoch)) continue;
        LogStreamInfo info;
        info.name = absl::StrCat(job, "/", file);
        if (!absl::StartsWith(info.name, Av(prefix))) continue;
        if (!Describe(absl::StrCat(dir, "/", file), epoch, info)) continue;  // (deleted)
        out.push_back(std::move(info));
      }
    }
    std::sort(out.begin(), out.end(),
              [](const LogStreamInfo& a, const LogStreamInfo& b) { return a.name < b.name; });
    return out;
  }

  absl::StatusOr<std::vector<LogEvent>> ReadEvents(std::string_view name, const LogRange& range,
                                                   bool forward) const override {
    int64_t epoch = 0;
    if (!ParseStreamName(name, epoch)) {
      return absl::NotFoundError(absl::StrCat("no log stream ", Av(name)));
    }
    const std::string path = absl::StrCat(log_dir_, "/", Av(name));
    const UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!fd.valid() || fstat(fd.get(), &st) != 0) {
      if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no log stream ", Av(name)));
      return ErrnoStatus(errno, "read", path);
    }
    if (!S_ISREG(st.st_mode)) return absl::NotFoundError(absl::StrCat("no log stream ", Av(name)));
    const absl::Time mtime = absl::TimeFromTimespec(st.st_mtim);
    const int64_t size = std::min<int64_t>(st.st_size, range.to);
    int64_t from = std::clamp<int64_t>(range.from, 0, size);
    // Lines that end before the first written at start_time are skipped
    // unread (the index says where they end).
    if (range.start_time != absl::InfinitePast()) {
      TimeIndexReader index(path, mtime);
      const int64_t before = index.EndBefore(range.start_time);
      if (before > from) from = LineStartBefore(fd.get(), std::min(before, size), from);
    }
    if (forward) return Scan(fd.get(), path, mtime, from, size, st.st_size, range, true);
    // Backward: a window at the end first, larger until it holds enough.
    for (int64_t window = std::max<int64_t>(2 * static_cast<int64_t>(range.max_bytes), 1 << 16);;
         window *= 4) {
      const int64_t at =
          size - window <= from ? from : LineStartBefore(fd.get(), size - window, from);
      bool enough = false;
      absl::StatusOr<std::vector<LogEvent>> events =
          Scan(fd.get(), path, mtime, at, size, st.st_size, range, false, &enough);
      if (!events.ok() || enough || at == from) return events;
    }
  }

 private:
  // Where the line that holds position `p` begins (just after a newline
  // before it), looking back no further than kMaxSeekBack nor `floor`;
  // `floor` when no newline is found there.
  static int64_t LineStartBefore(int fd, int64_t p, int64_t floor) {
    constexpr int64_t kMaxSeekBack = int64_t{1} << 20;
    char buf[16 * 1024];
    for (int64_t end = p; end > floor && p - end < kMaxSeekBack;) {
      const int64_t begin = std::max<int64_t>(floor, end - static_cast<int64_t>(sizeof buf));
      ssize_t got;
      do {
        got = pread(fd, buf, static_cast<size_t>(end - begin), static_cast<off_t>(begin));
      } while (got < 0 && errno == EINTR);
      if (got != end - begin) return floor;
      for (int64_t i = got - 1; i >= 0; --i) {
        if (buf[i] == '\n') return begin + i + 1;
      }
      end = begin;
    }
    return floor;
  }

  // The events of `range` among those that begin at `from` (a line's start)
  // and end by `size` (`file_size`: the stream's size now), the first ones
  // (`forward`) or the last ones. `enough`: whether more events than were
  // kept lay there (so a larger window would give the same).
  static absl::StatusOr<std::vector<LogEvent>> Scan(int fd, const std::string& path,
                                                    absl::Time mtime, int64_t from, int64_t size,
                                                    int64_t file_size, const LogRange& range,
                                                    bool forward, bool* enough = nullptr) {
    TimeIndexReader index(path, mtime);
    EventScanner scanner(fd, from, size);
    std::deque<LogEvent> kept;
    size_t bytes = 0;
    bool dropped = false;
    const size_t max_events = std::max<size_t>(range.max_events, 1);
    // Keeps `e` when it is in the range; false once no later event can be.
    auto keep = [&](LogEvent e) {
      if (e.timestamp >= range.end_time) return false;
      if (e.timestamp < range.start_time) return true;
      if (forward && !kept.empty() &&
          (kept.size() == max_events || bytes + e.message.size() > range.max_bytes)) {
        return false;
      }
      bytes += e.message.size();
      kept.push_back(std::move(e));
      while (!forward && kept.size() > 1 && (kept.size() > max_events || bytes > range.max_bytes)) {
        bytes -= kept.front().message.size();
        kept.pop_front();
        dropped = true;
      }
      return true;
    };
    LogEvent e;
    std::string rest;
    bool more = true;
    while (more && scanner.Next(e.begin, e.end, e.message, rest)) {
      e.timestamp = index.TimeAt(e.end);
      more = keep(e);
    }
    if (!scanner.status().ok()) return scanner.status();
    // A last line without its newline is whole once its run has ended.
    if (more && !rest.empty() && size == file_size && index.ClosedAt(size)) {
      e.begin = scanner.position();
      e.end = size;
      e.message = rest;
      if (e.message.back() == '\r') e.message.pop_back();
      e.timestamp = index.TimeAt(e.end);
      keep(std::move(e));
    }
    if (enough != nullptr) *enough = dropped || kept.size() == max_events;
    return std::vector<LogEvent>(std::make_move_iterator(kept.begin()),
                                 std::make_move_iterator(kept.end()));
  }

  // Fills `info` for the stream file `path`; false when it is gone.
  static bool Describe(const std::string& path, int64_t epoch, LogStreamInfo& info) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    info.creation_time = absl::FromUnixSeconds(epoch);
    info.stored_bytes = st.st_size;
    if (st.st_size == 0) return true;
    const absl::Time mtime = absl::TimeFromTimespec(st.st_mtim);
    TimeIndexReader index(path, mtime);
    TimeRecord first, last;
    if (index.Bounds(first, last)) {
      info.first_event_time = first.time;
      info.last_event_time = last.end < st.st_size ? std::max(last.time, mtime) : last.time;
    } else {
      info.first_event_time = info.last_event_time = mtime;
    }
    return true;
  }

  std::string log_dir_;
};

}  // namespace

std::unique_ptr<LogReader> NewLocalLogReader(std::string log_dir) {
  return std::make_unique<LocalLogReader>(std::move(log_dir));
}

}  // namespace kiln::local
