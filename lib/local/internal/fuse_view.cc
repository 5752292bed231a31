#define FUSE_USE_VERSION 34
#include "local/internal/fuse_view.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {
namespace {

using ::kiln::PathForMessage;

// The view never changes while mounted: the kernel may keep names and
// attributes as long as it likes.
constexpr double kTimeout = 86400.0;

struct Node {
  fuse_ino_t parent = FUSE_ROOT_ID;
  bool dir = false;
  int64_t size = 0;
  std::string uri;
  std::map<std::string, fuse_ino_t, std::less<>> children;  // directories
};

// One fetched block, or the fetch of it in progress.
struct Block {
  absl::Notification done;
  absl::StatusOr<std::string> data;  // set before `done`
  std::list<std::pair<fuse_ino_t, int64_t>>::iterator lru;
};

class FuseViewImpl final : public FuseView {
 public:
  FuseViewImpl(ObjectStore& store, std::string mount_point, FuseViewOptions options)
      : store_(store), mount_point_(std::move(mount_point)), options_(options) {
    if (options_.block_size < 4096) options_.block_size = 4096;
    if (options_.cache_blocks < 1) options_.cache_blocks = 1;
    if (options_.threads < 1) options_.threads = 1;
    nodes_.resize(2);  // [0] unused, [1] the root
    nodes_[FUSE_ROOT_ID].dir = true;
  }

  ~FuseViewImpl() override { Unmount(); }

  absl::Status Build(std::vector<FuseViewFile> files);
  absl::Status Start();
  void Unmount() override;
  const std::string& mount_point() const override { return mount_point_; }
  FuseViewStats stats() const override {
    return FuseViewStats{ranges_read_.load(), bytes_read_.load()};
  }

 private:
  static FuseViewImpl& Of(fuse_req_t req) {
    return *static_cast<FuseViewImpl*>(fuse_req_userdata(req));
  }
  const Node* Find(fuse_ino_t ino) const {
    return ino >= FUSE_ROOT_ID && ino < nodes_.size() ? &nodes_[ino] : nullptr;
  }
  struct stat Attr(fuse_ino_t ino) const;
  void Serve();
  // Bytes [off, off + size) of the file, clamped to its end.
  absl::StatusOr<std::string> ReadFile(fuse_ino_t ino, const Node& node, int64_t off, size_t size);
  absl::StatusOr<std::shared_ptr<Block>> GetBlock(fuse_ino_t ino, const Node& node, int64_t index);

  static void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
  static void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        fuse_file_info* fi);

  ObjectStore& store_;
  const std::string mount_point_;
  FuseViewOptions options_;
  std::vector<Node> nodes_;  // by inode number; fixed once mounted
  fuse_session* fuse_ = nullptr;
  int stop_fd_ = -1;  // eventfd: readable once Unmount starts
  std::vector<std::thread> threads_;
  absl::Mutex unmount_mu_;
  bool unmounted_ = false;

  absl::Mutex cache_mu_;
  std::map<std::pair<fuse_ino_t, int64_t>, std::shared_ptr<Block>> blocks_
      ABSL_GUARDED_BY(cache_mu_);
  std::list<std::pair<fuse_ino_t, int64_t>> lru_ ABSL_GUARDED_BY(cache_mu_);  // oldest first
  std::atomic<int64_t> ranges_read_{0};
  std::atomic<int64_t> bytes_read_{0};
};

absl::Status FuseViewImpl::Build(std::vector<FuseViewFile> files) {
  for (FuseViewFile& f : files) {
    if (!IsSafeRelativePath(f.rel) || f.rel.empty() || f.rel.back() == '/') {
      return absl::InvalidArgumentError(absl::StrCat("object '", PathForMessage(f.uri),
                                                     "': its path '", PathForMessage(f.rel),
                                                     "' is not a safe relative path"));
    }
    fuse_ino_t at = FUSE_ROOT_ID;
    std::vector<std::string> parts = absl::StrSplit(f.rel, '/', absl::SkipEmpty());
    for (size_t i = 0; i < parts.size(); ++i) {
      const bool last = i + 1 == parts.size();
      if (!nodes_[at].dir) {
        return absl::InvalidArgumentError(absl::StrCat(
            "object '", PathForMessage(f.uri), "': its path '", PathForMessage(f.rel),
            "' needs a directory where another object is a file"));
      }
      auto it = nodes_[at].children.find(parts[i]);
      if (it != nodes_[at].children.end()) {
        if (last) {
          return absl::InvalidArgumentError(absl::StrCat(
              "object '", PathForMessage(f.uri), "': its path '", PathForMessage(f.rel),
              "' is taken (by a ", nodes_[it->second].dir ? "directory" : "file", ")"));
        }
        at = it->second;
        continue;
      }
      const fuse_ino_t ino = nodes_.size();
      nodes_.push_back(Node{});
      nodes_[ino].parent = at;
      nodes_[ino].dir = !last;
      if (last) {
        nodes_[ino].size = std::max<int64_t>(0, f.size);
        nodes_[ino].uri = std::move(f.uri);
      }
      nodes_[at].children.emplace(parts[i], ino);
      at = ino;
    }
  }
  return absl::OkStatus();
}

struct stat FuseViewImpl::Attr(fuse_ino_t ino) const {
  const Node& n = nodes_[ino];
  struct stat st;
  std::memset(&st, 0, sizeof(st));
  st.st_ino = ino;
  st.st_mode = n.dir ? (S_IFDIR | 0555) : (S_IFREG | 0444);
  st.st_nlink = n.dir ? 2 : 1;
  st.st_size = n.size;
  st.st_blksize = static_cast<blksize_t>(options_.block_size);
  st.st_blocks = (n.size + 511) / 512;
  return st;
}

void FuseViewImpl::OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  FuseViewImpl& self = Of(req);
  const Node* p = self.Find(parent);
  if (p == nullptr || !p->dir) {
    fuse_reply_err(req, p == nullptr ? ENOENT : ENOTDIR);
    return;
  }
  auto it = p->children.find(std::string_view(name));
  if (it == p->children.end()) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = it->second;
  e.generation = 1;
  e.attr = self.Attr(it->second);
  e.attr_timeout = kTimeout;
  e.entry_timeout = kTimeout;
  fuse_reply_entry(req, &e);
}

void FuseViewImpl::OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  FuseViewImpl& self = Of(req);
  if (self.Find(ino) == nullptr) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st = self.Attr(ino);
  fuse_reply_attr(req, &st, kTimeout);
}

void FuseViewImpl::OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FuseViewImpl& self = Of(req);
  const Node* n = self.Find(ino);
  if (n == nullptr) {
    fuse_reply_err(req, ENOENT);
  } else if (n->dir) {
    fuse_reply_err(req, EISDIR);
  } else if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC) != 0) {
    fuse_reply_err(req, EROFS);
  } else {
    fi->keep_cache = 1;  // the object does not change while mounted
    fuse_reply_open(req, fi);
  }
}

void FuseViewImpl::OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          fuse_file_info*) {
  FuseViewImpl& self = Of(req);
  const Node* n = self.Find(ino);
  if (n == nullptr || n->dir) {
    fuse_reply_err(req, n == nullptr ? ENOENT : EISDIR);
    return;
  }
  absl::StatusOr<std::string> data = self.ReadFile(ino, *n, off, size);
  if (!data.ok()) {
    fuse_reply_err(req, EIO);
    return;
  }
  fuse_reply_buf(req, data->data(), data->size());
}

void FuseViewImpl::OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FuseViewImpl& self = Of(req);
  const Node* n = self.Find(ino);
  if (n == nullptr || !n->dir) {
    fuse_reply_err(req, n == nullptr ? ENOENT : ENOTDIR);
    return;
  }
  fi->cache_readdir = 1;
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void FuseViewImpl::OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             fuse_file_info*) {
  FuseViewImpl& self = Of(req);
  const Node* n = self.Find(ino);
  if (n == nullptr || !n->dir) {
    fuse_reply_err(req, n == nullptr ? ENOENT : ENOTDIR);
    return;
  }
  // Entry k (0 ".", 1 "..", then the children in name order) has the offset
  // k + 1: the offset of the entry after it.
  std::string buf(size, '\0');
  size_t used = 0;
  off_t k = 0;
  auto add = [&](const char* name, fuse_ino_t child) {
    if (k++ < off) return true;
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    st.st_ino = child;
    st.st_mode = self.nodes_[child].dir ? S_IFDIR : S_IFREG;
    const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, k);
    if (need > size - used) return false;
    used += need;
    return true;
  };
  bool more = add(".", ino) && add("..", n->parent);
  for (auto it = n->children.begin(); more && it != n->children.end(); ++it) {
    more = add(it->first.c_str(), it->second);
  }
  fuse_reply_buf(req, buf.data(), used);
}

absl::StatusOr<std::shared_ptr<Block>> FuseViewImpl::GetBlock(fuse_ino_t ino, const Node& node,
                                                              int64_t index) {
  const auto key = std::make_pair(ino, index);
  std::shared_ptr<Block> block;
  bool fetch = false;
  {
    absl::MutexLock lock(&cache_mu_);
    auto it = blocks_.find(key);
    if (it != blocks_.end()) {
      block = it->second;
      lru_.splice(lru_.end(), lru_, block->lru);
    } else {
      block = std::make_shared<Block>();
      block->lru = lru_.insert(lru_.end(), key);
      blocks_.emplace(key, block);
      fetch = true;
      while (static_cast<int64_t>(blocks_.size()) > options_.cache_blocks) {
        blocks_.erase(lru_.front());
        lru_.pop_front();
      }
    }
  }
  if (fetch) {
    const int64_t start = index * options_.block_size;
    const int64_t length = std::min(options_.block_size, node.size - start);
    block->data = store_.ReadRange(node.uri, start, length);
    ranges_read_.fetch_add(1);
    if (block->data.ok()) {
      bytes_read_.fetch_add(static_cast<int64_t>(block->data->size()));
    } else {
      // A failure is not cached: the next read tries again.
      absl::MutexLock lock(&cache_mu_);
      auto it = blocks_.find(key);
      if (it != blocks_.end() && it->second == block) {
        lru_.erase(block->lru);
        blocks_.erase(it);
      }
    }
    block->done.Notify();
  } else {
    block->done.WaitForNotification();
  }
  if (!block->data.ok()) return block->data.status();
  return block;
}

absl::StatusOr<std::string> FuseViewImpl::ReadFile(fuse_ino_t ino, const Node& node, int64_t off,
                                                   size_t size) {
  std::string out;
  if (off < 0 || off >= node.size || size == 0) return out;
  const int64_t end = std::min(node.size, off + static_cast<int64_t>(size));
  out.reserve(static_cast<size_t>(end - off));
  const int64_t bs = options_.block_size;
  for (int64_t index = off / bs; index * bs < end; ++index) {
    absl::StatusOr<std::shared_ptr<Block>> block = GetBlock(ino, node, index);
    if (!block.ok()) return block.status();
    const std::string& data = *(*block)->data;
    const int64_t from = std::max(off, index * bs) - index * bs;
    const int64_t to = std::min(end, (index + 1) * bs) - index * bs;
    if (to > static_cast<int64_t>(data.size())) {
      // The object is shorter than listed (changed meanwhile): what there is.
      if (from < static_cast<int64_t>(data.size())) {
        out.append(data, static_cast<size_t>(from), data.size() - static_cast<size_t>(from));
      }
      break;
    }
    out.append(data, static_cast<size_t>(from), static_cast<size_t>(to - from));
  }
  return out;
}

absl::Status FuseViewImpl::Start() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o;
    std::memset(&o, 0, sizeof(o));
    o.lookup = OpLookup;
    o.getattr = OpGetattr;
    o.open = OpOpen;
    o.read = OpRead;
    o.opendir = OpOpendir;
    o.readdir = OpReaddir;
    return o;
  }();
  // allow_other: sandboxed containers (other user namespaces) read it too.
  std::vector<std::string> argv_s = {
      "kiln-fastfile", "-o",
      "ro,allow_other,default_permissions,fsname=kiln-fastfile,subtype=kiln"};
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_ = fuse_session_new(&args, &ops, sizeof(ops), this);
  fuse_opt_free_args(&args);  // parsing may have copied them
  if (fuse_ == nullptr) {
    return absl::InternalError(
        absl::StrCat("FUSE view at ", PathForMessage(mount_point_), ": fuse_session_new failed"));
  }
  if (fuse_session_mount(fuse_, mount_point_.c_str()) != 0) {
    fuse_session_destroy(fuse_);
    fuse_ = nullptr;
    return absl::FailedPreconditionError(absl::StrCat(
        "FUSE view at ", PathForMessage(mount_point_),
        ": mounting failed (FastFile over a store that is not local needs /dev/fuse and the "
        "right to mount FUSE file systems: root or CAP_SYS_ADMIN)"));
  }
  const int fd = fuse_session_fd(fuse_);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  // Non-blocking: a serving thread waits in poll, where Unmount can wake it.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) {
    const int err = errno;
    fuse_session_unmount(fuse_);
    fuse_session_destroy(fuse_);
    fuse_ = nullptr;
    return ErrnoStatus(err, "eventfd", mount_point_);
  }
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Serve(); });
  return absl::OkStatus();
}

void FuseViewImpl::Serve() {
  const int fd = fuse_session_fd(fuse_);
  fuse_buf buf;
  std::memset(&buf, 0, sizeof(buf));
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;
    const int res = fuse_session_receive_buf(fuse_, &buf);
    if (res == -EAGAIN || res == -EINTR || res == -ENOENT) continue;
    if (res <= 0) break;  // 0: the connection is gone (unmounted from outside)
    fuse_session_process_buf(fuse_, &buf);
  }
  free(buf.mem);
}

void FuseViewImpl::Unmount() {
  absl::MutexLock lock(&unmount_mu_);
  if (unmounted_) return;
  unmounted_ = true;
  if (fuse_ == nullptr) return;
  const uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof(one)) < 0) {
    // Cannot fail for an eventfd far below its limit; the threads would
    // still end when the connection closes below.
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // Closes the connection (requests still waiting fail) and detaches the
  // mount lazily.
  fuse_session_unmount(fuse_);
  fuse_session_destroy(fuse_);
  fuse_ = nullptr;
  close(stop_fd_);
  stop_fd_ = -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FuseView>> FuseView::Mount(ObjectStore& store,
                                                         std::string mount_point,
                                                         std::vector<FuseViewFile> files,
                                                         FuseViewOptions options) {
  auto view = std::make_unique<FuseViewImpl>(store, std::move(mount_point), options);
  absl::Status s = view->Build(std::move(files));
  if (s.ok()) s = view->Start();
  if (!s.ok()) return s;
  return view;
}

namespace {

// Detaches the mount at `path`: umount2 where this process may, else
// fusermount3 (the FUSE helper that lets an unprivileged owner unmount).
bool DetachMount(const std::string& path) {
  if (umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) return true;
  if (errno != EPERM) return false;
  char* const argv[] = {const_cast<char*>("fusermount3"), const_cast<char*>("-u"),
                        const_cast<char*>("-z"), const_cast<char*>(path.c_str()), nullptr};
  pid_t pid;
  if (posix_spawnp(&pid, "fusermount3", nullptr, nullptr, argv, environ) != 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

StaleViewCleanup CleanStaleViews(const std::string& dir) {
  StaleViewCleanup done;
  struct stat dir_st;
  if (stat(dir.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode)) return done;
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  for (const std::string& name : names) {
    int64_t pid = 0;
    const size_t dash = name.find('-');
    if (dash == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(name.data(), dash), &pid) || pid <= 0) {
      continue;  // not one of ours
    }
    // (A mount of this process's PID whose server is gone is stale too: a
    // crashed process of the same PID left it. A live one is never touched.)
    const std::string path = absl::StrCat(dir, "/", name);
    auto server_gone = [] { return errno == ENOTCONN || errno == ECONNABORTED; };
    struct stat st;
    bool dead = false;
    if (stat(path.c_str(), &st) != 0) {
      if (!server_gone()) continue;
      dead = true;
    } else if (S_ISDIR(st.st_mode) && st.st_dev != dir_st.st_dev) {
      // A mount. stat may answer from the attributes the kernel keeps of its
      // root (kTimeout, a day) after its server is gone; statfs always asks
      // the server.
      struct statfs fs;
      if (statfs(path.c_str(), &fs) == 0 || !server_gone()) continue;  // a live mount
      dead = true;
    }
    if (dead) {
      // The server is gone: a crashed process's mount.
      if (!DetachMount(path)) continue;
      ++done.unmounted;
      if (rmdir(path.c_str()) == 0) ++done.removed;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) continue;
    const bool owner_alive = kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
    if (!owner_alive && rmdir(path.c_str()) == 0) ++done.removed;
  }
  return done;
}

}  // namespace kiln::local::internal
