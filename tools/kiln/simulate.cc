// `kiln simulate`: runs a scenario's policies through Kiln's engine in
// virtual time and prints one row per policy. Public headers only.
//
//   kiln simulate SCENARIO.json [--format table|json|csv] [--report FILE.html] [--seed N]
//                 [--jobs N]
//
// Exit status: 0 on success, 1 when the scenario cannot be read or run or the
// output or the report cannot be written, 2 on a usage error. The report's
// directory is checked before the run, and the report replaces an existing
// file only once it is written whole.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/json.h"
#include "kiln/sim/scenario.h"

namespace kiln::cli {
std::string ShownPath(std::string_view path);  // kiln.cc
}  // namespace kiln::cli

namespace {

using kiln::cli::ShownPath;

constexpr char kSimulateUsage[] =
    "usage: kiln simulate SCENARIO.json [--format table|json|csv] [--report FILE.html] [--seed N]\n"
    "                     [--jobs N]\n"
    "\n"
    "  Runs each policy of the scenario through Kiln's engine in virtual time and\n"
    "  prints one row per policy (jobs, completed, cost, billable and warm-retained\n"
    "  instance-hours, warm-hit rate, startup P50/P90/P99, interruptions, lost work,\n"
    "  deadline misses) and the best policy by cost at equal or better latency.\n"
    "  --report writes a self-contained HTML page with charts. --seed overrides\n"
    "  the scenario's seed (an integer in [0, 9223372036854775807], as in the\n"
    "  file). --jobs runs up to N policy runs at once, one per thread (default:\n"
    "  one per core; 1 runs them one after another); the output is the same.\n"
    "  Scenario files: examples/scenarios/README.md.\n";

// A progress bar on stderr, shown only when stderr is a terminal and the run
// has taken more than a second.
class ProgressBar {
 public:
  ProgressBar() : enabled_(isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

  void Update(double fraction) {
    if (!enabled_) return;
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    if (elapsed < std::chrono::seconds(1)) return;
    const int percent = static_cast<int>(fraction * 100);
    if (percent == last_percent_) return;
    last_percent_ = percent;
    constexpr int kWidth = 40;
    const int filled = percent * kWidth / 100;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(stderr, "\r[%s] %3d%%  %.0f s", bar.c_str(), percent,
                 std::chrono::duration<double>(elapsed).count());
    std::fflush(stderr);
    shown_ = true;
  }

  void Finish() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  const bool enabled_;
  const std::chrono::steady_clock::time_point start_;
  int last_percent_ = -1;
  bool shown_ = false;
};

// The directory a file named `path` goes in.
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Whether a file can be made at `path`: its directory exists and may be
// written, and `path` is not a directory. Checked before a run that may take
// minutes. Returns what is wrong, or "".
std::string CheckCanCreate(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ShownPath(dir) + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return ShownPath(dir) + ": not a directory";
  if (access(dir.c_str(), W_OK) != 0) return ShownPath(dir) + ": " + std::strerror(errno);
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return ShownPath(path) + ": is a directory";
  }
  return "";
}

// Writes `text` to `path` whole or not at all: into a new file next to it,
// synced, then renamed over `path`. On any error (a full disk above all) the
// new file is removed and a file already at `path` is left as it was.
// Returns what went wrong, or "".
std::string WriteWhole(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp-XXXXXX";
  const int fd = mkstemp(temp.data());
  if (fd < 0) return ShownPath(temp) + ": " + std::strerror(errno);
  // mkstemp makes the file private; a report gets the usual mode.
  const mode_t mask = umask(0);
  umask(mask);
  std::string error;
  if (fchmod(fd, 0666 & ~mask) != 0) error = std::strerror(errno);
  for (size_t done = 0; error.empty() && done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = std::strerror(errno);
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (error.empty() && fsync(fd) != 0) error = std::strerror(errno);
  if (close(fd) != 0 && error.empty()) error = std::strerror(errno);
  if (error.empty() && std::rename(temp.c_str(), path.c_str()) != 0) error = std::strerror(errno);
  if (!error.empty()) {
    unlink(temp.c_str());
    return ShownPath(path) + ": " + error;
  }
  return "";
}

// If args[i] is the option `name`, with its value in the next argument or as
// `name=VALUE`: sets *value (empty when it is missing), moves `i` past what it
// took and returns true. Returns false, changing nothing, for anything else.
bool OptionValue(const std::vector<std::string>& args, size_t& i, const std::string& name,
                 std::string* value) {
  const std::string& a = args[i];
  if (a == name) {
    *value = i + 1 < args.size() ? args[++i] : "";
    return true;
  }
  if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
    *value = a.substr(name.size() + 1);
    return true;
  }
  return false;
}

// A seed as the scenario file takes it: decimal digits, at most INT64_MAX.
bool ParseSeed(const std::string& text, uint64_t* seed) {
  if (text.empty() || text.size() > 19) return false;
  uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');  // < 10^19: no overflow
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *seed = n;
  return true;
}

// A --jobs value: decimal digits, at least 1 and at most kMaxJobs.
constexpr int kMaxJobs = 4096;
bool ParseJobs(const std::string& text, int* jobs) {
  if (text.empty() || text.size() > 4) return false;
  int n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > kMaxJobs) return false;
  *jobs = n;
  return true;
}

}  // namespace

int RunSimulateCommand(const std::vector<std::string>& args) {
  std::string scenario_path, format = "table", report_path;
  bool seed_set = false;
  uint64_t seed = 0;
  int jobs = 0;  // 0: one per core
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string text;  // an option's value
    if (OptionValue(args, i, "--format", &format)) {
      if (format.empty()) {
        std::cerr << "kiln simulate: --format needs a value (table, json or csv)\n"
                  << kSimulateUsage;
        return 2;
      }
    } else if (OptionValue(args, i, "--report", &report_path)) {
      if (report_path.empty()) {
        std::cerr << "kiln simulate: --report needs a file name\n" << kSimulateUsage;
        return 2;
      }
    } else if (OptionValue(args, i, "--seed", &text)) {
      if (text.empty()) {
        std::cerr << "kiln simulate: --seed needs a number\n" << kSimulateUsage;
        return 2;
      }
      if (!ParseSeed(text, &seed)) {
        std::cerr << "kiln simulate: --seed '" << kiln::InputForMessage(text)
                  << "': expected an integer in [0, " << std::numeric_limits<int64_t>::max()
                  << "]\n"
                  << kSimulateUsage;
        return 2;
      }
      seed_set = true;
    } else if (OptionValue(args, i, "--jobs", &text)) {
      if (text.empty()) {
        std::cerr << "kiln simulate: --jobs needs a number\n" << kSimulateUsage;
        return 2;
      }
      if (!ParseJobs(text, &jobs)) {
        std::cerr << "kiln simulate: --jobs '" << kiln::InputForMessage(text)
                  << "': expected an integer in [1, " << kMaxJobs << "]\n"
                  << kSimulateUsage;
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      std::cout << kSimulateUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "kiln simulate: unknown option '" << kiln::InputForMessage(a) << "'\n"
                << kSimulateUsage;
      return 2;
    } else if (scenario_path.empty()) {
      scenario_path = a;
    } else {
      std::cerr << "kiln simulate: one scenario file at a time\n" << kSimulateUsage;
      return 2;
    }
  }
  if (scenario_path.empty()) {
    std::cerr << kSimulateUsage;
    return 2;
  }
  if (format != "table" && format != "json" && format != "csv") {
    std::cerr << "kiln simulate: --format must be table, json or csv\n";
    return 2;
  }
  auto scenario = kiln::sim::LoadScenario(scenario_path);
  if (!scenario.ok()) {
    std::cerr << "kiln simulate: " << scenario.status().message() << "\n";
    return 1;
  }
  if (!report_path.empty()) {
    if (const std::string problem = CheckCanCreate(report_path); !problem.empty()) {
      std::cerr << "kiln simulate: cannot write the report: " << problem << "\n";
      return 1;
    }
  }
  if (seed_set) {
    scenario->seed = seed;
    auto models = std::make_shared<kiln::sim::SimModels>(*scenario->models);
    models->seed = seed;
    scenario->models = std::move(models);
  }
  ProgressBar bar;
  kiln::sim::RunOptions options;
  options.progress = [&bar](double fraction) { bar.Update(fraction); };
  options.threads = jobs;
  auto report = kiln::sim::RunScenario(*scenario, options);
  bar.Finish();
  if (!report.ok()) {
    std::cerr << "kiln simulate: " << report.status().message() << "\n";
    return 1;
  }
  if (format == "json") {
    std::cout << kiln::sim::FormatJson(*report);
  } else if (format == "csv") {
    std::cout << kiln::sim::FormatCsv(*report);
  } else {
    std::cout << kiln::sim::FormatTable(*report);
  }
  // (A full disk or a closed pipe: the report is still written.)
  std::cout.flush();
  int status = 0;
  if (!std::cout) {
    std::cerr << "kiln simulate: cannot write the output\n";
    status = 1;
  }
  if (!report_path.empty()) {
    if (const std::string problem = WriteWhole(report_path, kiln::sim::FormatHtml(*report));
        !problem.empty()) {
      std::cerr << "kiln simulate: cannot write the report: " << problem << "\n";
      return 1;
    }
    std::cerr << "kiln simulate: report written to " << ShownPath(report_path) << "\n";
  }
  return status;
}
