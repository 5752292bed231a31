#include "local/internal/pipe_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {

// ---------------------------------------------------------------------------
// StopSignal

StopSignal::StopSignal() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

StopSignal::~StopSignal() {
  if (fd_ >= 0) close(fd_);
}

void StopSignal::Stop() {
  if (stopped_.exchange(true, std::memory_order_acq_rel)) return;
  if (fd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = write(fd_, &one, sizeof(one));
    (void)ignored;
  }
}

// ---------------------------------------------------------------------------
// FifoWriter

namespace {

// Takes a SIGPIPE raised by our own write on this thread off the pending
// set (it is blocked here, so it was never delivered).
void ConsumeSigpipe() {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  struct timespec zero = {0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
}

// Blocks SIGPIPE on the calling thread for the life of the object.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_);
  }
  ~SigpipeBlock() {
    ConsumeSigpipe();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

thread_local int sigpipe_blocks = 0;
thread_local SigpipeBlock* sigpipe_block = nullptr;

}  // namespace

FifoWriter::FifoWriter(const StopSignal& stop) : stop_(stop) {
  // The writer thread must not die of SIGPIPE when its reader goes away: the
  // signal is blocked on this thread while any FifoWriter lives here, and
  // EPIPE is what we act on.
  if (sigpipe_blocks++ == 0) sigpipe_block = new SigpipeBlock();
}

FifoWriter::~FifoWriter() {
  Close();
  if (--sigpipe_blocks == 0) {
    delete sigpipe_block;
    sigpipe_block = nullptr;
  }
}

void FifoWriter::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void FifoWriter::Nap(int ms) const {
  struct pollfd p = {stop_.fd(), POLLIN, 0};
  if (stop_.fd() >= 0) {
    poll(&p, 1, ms);
  } else {
    usleep(static_cast<useconds_t>(ms) * 1000);
  }
}

absl::StatusOr<FifoWriter::Result> FifoWriter::Open(const std::string& path) {
  Close();
  path_ = path;
  bytes_ = 0;
  int nap_ms = 1;
  int naps = 0;
  for (;;) {
    if (stop_.stopped()) return Result::kStopped;
    int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
        close(fd);
        return absl::InternalError(absl::StrCat("'", ::kiln::PathForMessage(path),
                                                "' is no longer a FIFO"));
      }
      fd_ = fd;
      // Best effort: a smaller buffer still works, only slower.
      fcntl(fd_, F_SETPIPE_SZ, kPipeBufferBytes);
      return Result::kOk;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err == ENOENT) return Result::kGone;
    if (err != ENXIO) return ErrnoStatus(err, "open FIFO", path);
    // No reader yet.
    Nap(nap_ms);
    if (++naps > 20) nap_ms = 5;
  }
}

absl::StatusOr<FifoWriter::Result> FifoWriter::WaitWritable() {
  struct pollfd p[2] = {{fd_, POLLOUT, 0}, {stop_.fd(), POLLIN, 0}};
  const nfds_t n = stop_.fd() >= 0 ? 2 : 1;
  for (;;) {
    if (stop_.stopped()) return Result::kStopped;
    int r = poll(p, n, stop_.fd() >= 0 ? -1 : 50);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "poll FIFO", path_);
    }
    if (stop_.stopped()) return Result::kStopped;
    if (p[0].revents & POLLERR) return Result::kReaderClosed;
    if (p[0].revents & POLLOUT) return Result::kOk;
  }
}

absl::StatusOr<FifoWriter::Result> FifoWriter::Write(std::string_view data) {
  while (!data.empty()) {
    if (stop_.stopped()) return Result::kStopped;
    ssize_t n = write(fd_, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      bytes_ += n;
      continue;
    }
    const int err = errno;
    if (n < 0 && err == EINTR) continue;
    if (n < 0 && err == EAGAIN) {
      absl::StatusOr<Result> w = WaitWritable();
      if (!w.ok() || *w != Result::kOk) return w;
      continue;
    }
    if (n < 0 && err == EPIPE) {
      ConsumeSigpipe();
      return Result::kReaderClosed;
    }
    return ErrnoStatus(n < 0 ? err : EIO, "write FIFO", path_);
  }
  return Result::kOk;
}

absl::StatusOr<FifoWriter::Result> FifoWriter::SpliceFrom(int fd, const std::string& name) {
  bool moved_any = false;
  for (;;) {
    if (stop_.stopped()) return Result::kStopped;
    ssize_t n = splice(fd, nullptr, fd_, nullptr, kPipeBufferBytes,
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      bytes_ += n;
      moved_any = true;
      continue;
    }
    if (n == 0) return Result::kOk;
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN) {
      absl::StatusOr<Result> w = WaitWritable();
      if (!w.ok() || *w != Result::kOk) return w;
      continue;
    }
    if (err == EPIPE) {
      ConsumeSigpipe();
      return Result::kReaderClosed;
    }
    if ((err == EINVAL || err == ENOSYS) && !moved_any) break;  // not spliceable
    return ErrnoStatus(err, "splice", name);
  }
  // Buffered copy.
  std::unique_ptr<char[]> buffer(new char[kPipeBufferBytes]);
  for (;;) {
    ssize_t n = read(fd, buffer.get(), kPipeBufferBytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read", name);
    if (n == 0) return Result::kOk;
    absl::StatusOr<Result> w = Write(std::string_view(buffer.get(), static_cast<size_t>(n)));
    if (!w.ok() || *w != Result::kOk) return w;
  }
}

absl::StatusOr<FifoWriter::Result> FifoWriter::WaitDrained() {
  for (;;) {
    if (stop_.stopped()) return Result::kStopped;
    int queued = 0;
    if (ioctl(fd_, FIONREAD, &queued) != 0) return ErrnoStatus(errno, "FIONREAD", path_);
    if (queued == 0) return Result::kOk;
    // POLLERR: the reader closed without reading the rest.
    struct pollfd p[2] = {{fd_, 0, 0}, {stop_.fd(), POLLIN, 0}};
    int r = poll(p, stop_.fd() >= 0 ? 2 : 1, 1);
    if (r < 0 && errno != EINTR) return ErrnoStatus(errno, "poll FIFO", path_);
    if (r > 0 && (p[0].revents & POLLERR)) return Result::kReaderClosed;
  }
}

// ---------------------------------------------------------------------------
// Inflater

struct Inflater::State {
  z_stream z{};
  bool ok = false;
  bool in_member = false;  // inside a gzip member (no end seen yet)
  bool ended_one = false;  // a member has ended: zero bytes after one are padding
  std::unique_ptr<unsigned char[]> out{new unsigned char[256 * 1024]};
};

Inflater::Inflater() : state_(std::make_unique<State>()) {
  // 15 + 16: gzip wrapper only (CompressionType Gzip).
  state_->ok = inflateInit2(&state_->z, 15 + 16) == Z_OK;
}

Inflater::~Inflater() {
  if (state_->ok) inflateEnd(&state_->z);
}

absl::Status Inflater::Feed(std::string_view chunk,
                            absl::FunctionRef<absl::Status(std::string_view)> out) {
  State& s = *state_;
  if (!s.ok) return absl::InternalError("zlib: inflateInit2 failed");
  constexpr unsigned kOut = 256 * 1024;
  s.z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(chunk.data()));
  s.z.avail_in = static_cast<uInt>(chunk.size());
  while (s.z.avail_in > 0) {
    if (!s.in_member && s.ended_one) {
      // Between members: zero bytes are padding (as gzip -d reads them; a
      // member starts with 0x1f), however the chunks split them.
      while (s.z.avail_in > 0 && *s.z.next_in == 0) {
        ++s.z.next_in;
        --s.z.avail_in;
      }
      if (s.z.avail_in == 0) break;
    }
    s.in_member = true;
    s.z.next_out = s.out.get();
    s.z.avail_out = kOut;
    const int r = inflate(&s.z, Z_NO_FLUSH);
    const size_t produced = kOut - s.z.avail_out;
    if (produced > 0) {
      absl::Status st = out(std::string_view(reinterpret_cast<char*>(s.out.get()), produced));
      if (!st.ok()) return st;
    }
    if (r == Z_STREAM_END) {
      s.in_member = false;
      s.ended_one = true;
      inflateReset(&s.z);  // a concatenated member may follow
      continue;
    }
    if (r == Z_OK) continue;
    if (r == Z_BUF_ERROR && s.z.avail_in == 0) break;
    return absl::InvalidArgumentError(absl::StrCat(
        "not valid gzip data (", s.z.msg != nullptr ? s.z.msg : "zlib", ", error ", r, ")"));
  }
  // Output may still be pending with no input left.
  while (s.in_member) {
    s.z.next_out = s.out.get();
    s.z.avail_out = kOut;
    const int r = inflate(&s.z, Z_NO_FLUSH);
    const size_t produced = kOut - s.z.avail_out;
    if (produced > 0) {
      absl::Status st = out(std::string_view(reinterpret_cast<char*>(s.out.get()), produced));
      if (!st.ok()) return st;
    }
    if (r == Z_STREAM_END) {
      s.in_member = false;
      inflateReset(&s.z);
      break;
    }
    if (produced == 0 || r != Z_OK) break;
  }
  return absl::OkStatus();
}

absl::Status Inflater::Finish() const {
  if (state_->in_member) {
    return absl::InvalidArgumentError("gzip data ends in the middle of a member (truncated)");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// RecordIO

namespace {

void AppendWord(uint32_t w, std::string* out) {
  char b[4] = {static_cast<char>(w & 0xff), static_cast<char>((w >> 8) & 0xff),
               static_cast<char>((w >> 16) & 0xff), static_cast<char>((w >> 24) & 0xff)};
  out->append(b, 4);
}

}  // namespace

absl::Status AppendRecordIO(std::string_view record, std::string* out) {
  if (record.size() >= (size_t{1} << 29)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a RecordIO record holds less than 2^29 bytes; this one has ", record.size()));
  }
  const uint32_t len = static_cast<uint32_t>(record.size());
  const uint32_t lower_align = (len >> 2) << 2;
  const uint32_t upper_align = ((len + 3) >> 2) << 2;
  const char magic[4] = {0x0a, 0x23, static_cast<char>(0xd7), static_cast<char>(0xce)};
  auto encode = [](uint32_t cflag, uint32_t length) { return (cflag << 29) | length; };
  uint32_t dptr = 0;
  for (uint32_t i = 0; i < lower_align; i += 4) {
    if (std::memcmp(record.data() + i, magic, 4) == 0) {
      out->append(magic, 4);
      AppendWord(encode(dptr == 0 ? 1 : 2, i - dptr), out);
      out->append(record.data() + dptr, i - dptr);
      dptr = i + 4;
    }
  }
  out->append(magic, 4);
  AppendWord(encode(dptr != 0 ? 3 : 0, len - dptr), out);
  out->append(record.data() + dptr, len - dptr);
  out->append(upper_align - len, '\0');
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Epoch order

namespace {

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, n), n > 0 (Lemire's multiply-and-reject).
uint64_t Bounded(uint64_t& state, uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(SplitMix(state)) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(SplitMix(state)) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

std::vector<size_t> EpochOrder(size_t count, bool has_seed, int64_t seed, uint64_t epoch,
                               bool sharded, size_t instance, size_t instances) {
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), size_t{0});
  if (has_seed && count > 1) {
    uint64_t state = static_cast<uint64_t>(seed);
    state = SplitMix(state) ^ (epoch * 0xd1342543de82ef95ULL);
    for (size_t i = count - 1; i > 0; --i) {
      std::swap(order[i], order[Bounded(state, i + 1)]);
    }
  }
  if (!sharded || instances <= 1) return order;
  std::vector<size_t> share;
  for (size_t j = instance; j < count; j += instances) share.push_back(order[j]);
  return share;
}

}  // namespace kiln::local::internal
