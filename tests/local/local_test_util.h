// Helpers of the local backend's tests: temporary directories, images made of
// scripts, a recorder of container and cluster events, and running a
// real-time loop until something happened (with a timeout, never a fixed
// sleep).
#ifndef KILN_TESTS_LOCAL_LOCAL_TEST_UTIL_H_
#define KILN_TESTS_LOCAL_LOCAL_TEST_UTIL_H_

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kiln/cluster_provider.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "local/internal/fs.h"

namespace kiln::local::testing {

#ifndef KILN_LOCAL_TEST_DIR
#define KILN_LOCAL_TEST_DIR "."
#endif

// The python3 of the host system (a pyenv shim may not work in a sandbox).
inline std::string Python() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

// A fresh directory under the system's temporary directory; removed by the
// destructor.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/kiln-local-XXXXXX");
    char* made = mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
    // Searchable by everyone: containers of a provider running as root run
    // as another user (LocalOptions::container_user), who must reach it.
    if (!path_.empty()) chmod(path_.c_str(), 0755);
  }
  ~TempDir() {
    if (!path_.empty()) internal::RemoveTree(path_).IgnoreError();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& data, mode_t mode = 0644) {
  ASSERT_TRUE(MakeDirs(internal::DirName(path)).ok()) << path;
  std::ofstream(path, std::ios::binary) << data;
  chmod(path.c_str(), mode);
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Entries of a directory (names), sorted; empty when it does not exist.
inline std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Whether bubblewrap works on this machine.
inline bool BwrapWorks() {
  return std::system("bwrap --ro-bind / / true >/dev/null 2>&1") == 0;
}

// Why a bwrap test is skipped where BwrapWorks() is false.
inline constexpr char kNoBwrap[] =
    "bubblewrap does not work on this machine (`bwrap --ro-bind / / true` fails): the bwrap "
    "runtime is not tested here";

// The name of a test instantiated for a runtime: "Bwrap" or "Process".
inline std::string RuntimeName(const ::testing::TestParamInfo<LocalRuntime>& info) {
  return info.param == LocalRuntime::kBwrap ? "Bwrap" : "Process";
}

// Runs `loop` (real time) in short slices until `done()` or `timeout`.
// Returns done().
inline bool RunUntil(EventLoop& loop, const std::function<bool()>& done,
                     absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    loop.RunUntil(loop.Now() + absl::Milliseconds(20));
  }
  return true;
}

// Records what containers and clusters report.
class Recorder : public ContainerEvents, public ClusterListener {
 public:
  struct Line {
    std::string host;
    std::string text;
  };
  void OnLogLine(const Instance& instance, std::string_view line) override {
    lines.push_back(Line{instance.host_name, std::string(line)});
  }
  void OnExit(const Instance& instance, const ContainerExit& exit) override {
    exits[instance.host_name] = exit;
    ++exit_calls;
  }
  void OnInterruptionNotice(const Cluster& cluster, const Instance& instance,
                            absl::Time deadline) override {
    notices.push_back({instance.host_name, deadline});
  }
  void OnInstanceLost(const Cluster& cluster, const Instance& instance) override {
    lost.push_back(instance.host_name);
  }

  bool HasLine(const std::string& host, const std::string& text) const {
    for (const Line& l : lines) {
      if (l.host == host && l.text == text) return true;
    }
    return false;
  }
  std::string AllLines() const {
    std::string out;
    for (const Line& l : lines) absl::StrAppend(&out, l.host, ": ", l.text, "\n");
    return out;
  }

  std::vector<Line> lines;
  std::map<std::string, ContainerExit> exits;
  int exit_calls = 0;
  std::vector<std::pair<std::string, absl::Time>> notices;
  std::vector<std::string> lost;
};

// Processes (not zombies) whose process group is `pgid`.
inline std::vector<int> ProcessesInGroup(int pgid) {
  std::vector<int> out;
  for (const std::string& name : ListDir("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    // pid (comm) state ppid pgrp ...: comm may hold spaces; split after ')'.
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
    int group = 0;
    if (f.size() > 2 && f[0] != "Z" && absl::SimpleAtoi(f[2], &group) && group == pgid) {
      out.push_back(pid);
    }
  }
  return out;
}

// True if process `pid` exists and is not a zombie.
inline bool IsRunning(int pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

// Processes (not zombies) in the PID namespace `ns` ("pid:[4026532178]").
inline std::vector<int> ProcessesInNamespace(const std::string& ns) {
  std::vector<int> out;
  for (const std::string& name : ListDir("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    char buf[128];
    ssize_t n = readlink(absl::StrCat("/proc/", pid, "/ns/pid").c_str(), buf, sizeof(buf));
    if (n <= 0 || std::string(buf, static_cast<size_t>(n)) != ns) continue;
    std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    size_t close = stat.rfind(')');
    if (close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z') {
      out.push_back(pid);
    }
  }
  return out;
}

// What a child process (RunWithSmallDisks) found out: name -> value.
using Facts = std::map<std::string, std::string>;

// A small file system: a tmpfs of `kib` KiB mounted at `path`, with room
// for `inodes` files and directories (0: the kernel's default).
struct SmallDisk {
  std::string path;
  int kib = 0;
  int inodes = 0;
};

// Runs `body` in a forked child process that has a mount namespace of its
// own, in which each of `disks` is mounted (the host sees none of them, and
// they vanish with the child), and returns the facts `body` gathered. A
// fact "SKIP" means the machine cannot do this (no CAP_SYS_ADMIN): the
// caller skips. The child dies after a minute whatever it does, so that a
// hang fails the test instead of stalling it (the fact "CHILD" says how the
// child ended when it was not a clean exit).
// REQUIRES: this process runs no other thread (they would not survive the
// fork): make the engine and the provider in `body`.
inline Facts RunWithSmallDisks(const std::vector<SmallDisk>& disks,
                               const std::function<Facts()>& body) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {{"SKIP", "pipe2"}};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(60);
    Facts facts;
    if (unshare(CLONE_NEWNS) != 0) {
      facts["SKIP"] = "unshare(CLONE_NEWNS) is not permitted";
    } else if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      facts["SKIP"] = "mount --make-rprivate / failed";
    }
    for (const SmallDisk& d : disks) {
      if (!facts.empty()) break;
      const std::string options = absl::StrCat(
          "size=", d.kib, "k", d.inodes > 0 ? absl::StrCat(",nr_inodes=", d.inodes) : "");
      if (MakeDirs(d.path).ok() &&
          mount("tmpfs", d.path.c_str(), "tmpfs", 0, options.c_str()) == 0) {
        continue;
      }
      facts["SKIP"] = absl::StrCat("cannot mount a tmpfs at ", d.path);
    }
    if (facts.empty()) facts = body();
    std::string out;
    for (const auto& [name, value] : facts) {
      absl::StrAppend(&out, absl::CEscape(name), "\t", absl::CEscape(value), "\n");
    }
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  Facts facts;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, '\t');
    std::string name, value;
    absl::CUnescape(kv.first, &name);
    absl::CUnescape(kv.second, &value);
    facts[name] = value;
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    facts["CHILD"] = absl::StrCat("ended with wait status ", wstatus);
  }
  return facts;
}

// Regular files at any depth below `dir` (paths relative to it), sorted.
inline std::vector<std::string> FilesBelow(const std::string& dir, const std::string& rel = "") {
  std::vector<std::string> out;
  const std::string here = rel.empty() ? dir : absl::StrCat(dir, "/", rel);
  for (const std::string& name : ListDir(here)) {
    const std::string child = rel.empty() ? name : absl::StrCat(rel, "/", name);
    struct stat st;
    if (lstat(absl::StrCat(dir, "/", child).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      for (std::string& f : FilesBelow(dir, child)) out.push_back(std::move(f));
    } else if (S_ISREG(st.st_mode)) {
      out.push_back(child);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// An in-memory store standing for a remote one (s3://): counts whole-object
// and ranged reads, and can fail the ranged ones.
class CountingStore : public ObjectStore {
 public:
  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  absl::StatusOr<std::string> Get(std::string_view uri) override {
    gets_.fetch_add(1);
    return inner_->Get(uri);
  }
  absl::Status Put(std::string_view uri, std::string_view data) override {
    return inner_->Put(uri, data);
  }
  absl::Status Delete(std::string_view uri) override { return inner_->Delete(uri); }
  absl::StatusOr<std::string> ReadRange(std::string_view uri, int64_t offset,
                                        int64_t length) override {
    ranges_.fetch_add(1);
    if (fail_.load()) return absl::UnavailableError("injected");
    return inner_->ReadRange(uri, offset, length);
  }
  // Reads of either kind.
  int reads() const { return gets_.load() + ranges_.load(); }

  std::atomic<int> gets_{0};
  std::atomic<int> ranges_{0};
  std::atomic<bool> fail_{false};

 private:
  std::unique_ptr<ObjectStore> inner_ = NewInMemoryObjectStore();
};

}  // namespace kiln::local::testing

#endif  // KILN_TESTS_LOCAL_LOCAL_TEST_UTIL_H_
