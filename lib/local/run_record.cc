// The files a leased run leaves on disk (run_record.h).
#include "local/run_record.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "local/internal/spawn.h"

namespace kiln::local::internal {

std::string RunDir(const std::string& cluster_dir, const std::string& host) {
  return absl::StrCat(cluster_dir, "/runs/", host);
}

absl::Status WriteRunRecord(const std::string& run_dir, const RunRecord& record) {
  return WriteFileAtomic(
      absl::StrCat(run_dir, "/", kRunRecordFile),
      absl::StrCat(record.keeper, " ", record.start_time, "\n", record.stream, "\n"));
}

absl::StatusOr<RunRecord> ReadRunRecord(const std::string& run_dir) {
  const std::string path = absl::StrCat(run_dir, "/", kRunRecordFile);
  absl::StatusOr<std::string> text = ReadFilePrefix(path, 8192);
  if (!text.ok()) return text.status();
  const std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  RunRecord r;
  std::vector<absl::string_view> ids;
  if (lines.size() == 3 && lines[2].empty()) ids = absl::StrSplit(lines[0], ' ');
  int pid = 0;
  if (ids.size() != 2 || !absl::SimpleAtoi(ids[0], &pid) || pid <= 0 ||
      !absl::SimpleAtoi(ids[1], &r.start_time) || lines[1].empty()) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a run record"));
  }
  r.keeper = pid;
  r.stream = std::string(lines[1]);
  return r;
}

uint64_t ProcessStartTime(pid_t pid) {
  absl::StatusOr<std::string> stat = ReadFilePrefix(absl::StrCat("/proc/", pid, "/stat"), 4096);
  if (!stat.ok()) return 0;
  // "pid (comm) state ppid ...": comm may hold anything, so the last ')'.
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return 0;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state): the start time, field 22, is fields[19].
  uint64_t start = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start)) return 0;
  return start;
}

UniqueFd OpenKeeper(const RunRecord& record) {
  UniqueFd fd(PidfdOpen(record.keeper));
  // The pidfd holds the pid: a start time that matches now is that process's.
  if (fd.valid() && ProcessStartTime(record.keeper) != record.start_time) fd.reset();
  return fd;
}

bool HasLiveRuns(const std::string& cluster_dir) {
  const std::string runs = absl::StrCat(cluster_dir, "/runs");
  DIR* d = opendir(runs.c_str());
  if (d == nullptr) return false;
  bool live = false;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    absl::StatusOr<RunRecord> r = ReadRunRecord(absl::StrCat(runs, "/", e->d_name));
    if (r.ok() && OpenKeeper(*r).valid()) {
      live = true;
      break;
    }
  }
  closedir(d);
  return live;
}

bool MayBeTakenBack(const std::string& cluster_dir) {
  return access(absl::StrCat(cluster_dir, "/", kRetainedFile).c_str(), F_OK) == 0 ||
         HasLiveRuns(cluster_dir);
}

std::optional<ExitRecord> ReadExitRecord(int fd) {
  char text[128];
  const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0 || text[n - 1] != '\n') return std::nullopt;
  text[n] = '\0';
  ExitRecord r;
  long long user = 0, system = 0, rss = 0;
  if (std::sscanf(text, "%d %lld %lld %lld", &r.exit_code, &user, &system, &rss) != 4) {
    return std::nullopt;
  }
  r.user_cpu_us = user;
  r.system_cpu_us = system;
  r.max_rss_kib = rss;
  return r;
}

int PidfdGetfd(int pidfd, int fd) {
  return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
}

}  // namespace kiln::local::internal
