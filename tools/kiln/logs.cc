// `kiln logs`: the log lines of a job that `kiln run` ran on a state
// directory, from the job's log streams there (kiln/local/local.h:
// <state-dir>/logs/<job>/algo-<k>-<epoch>[-<n>], one per host and run),
// read-only, also while a `kiln run` writes the directory; or, with
// --endpoint URL (or KILN_ENDPOINT), of a job of a server (`kiln serve`),
// through its CloudWatch Logs API (kiln/serve/server.h), with credentials
// the AWS way.
//
//   kiln logs [--state-dir DIR | --endpoint URL] [--host algo-K] [--follow] NAME
//
// The streams are shown in the order they started (hosts in order within a
// start), each stream's lines in order. When the job has more than one host
// and --host does not pick one, each line starts with its stream's name,
// "<job>/algo-<k>-<epoch>[-<n>] ", as CloudWatch names it. A line that has
// no newline yet is held back while the job runs: it is shown once complete,
// or once the job has ended. A line longer than 64 KiB comes in pieces of
// 64 KiB. With --follow the command keeps showing lines as they
// are written until the job has ended (Completed, Failed or Stopped in the
// journal) and every line is shown. Exit status: 0; 1 when the journal or a
// stream cannot be read, the job or the host does not exist, an argument is
// wrong, or stdout cannot be written; 130 after Ctrl-C (SIGINT), which ends
// --follow without a message.
//
// Public headers only.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "cli.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/log_reader.h"
#include "kiln/plugin/json_value.h"
#include "kiln/serve/client.h"

namespace kiln::cli {
namespace {

constexpr char kUsage[] =
    "usage: kiln logs [--state-dir DIR | --endpoint URL] [--host algo-K] [--follow] NAME\n";

// The longest line shown in one piece (observers get the same; local.h).
constexpr size_t kMaxLineBytes = 64 * 1024;
// How often --follow looks for new lines, and how many looks between two
// readings of the job's status.
constexpr absl::Duration kPollPeriod = absl::Milliseconds(100);
constexpr int kPollsPerStatus = 3;
// How often --follow asks a server (the job's status, then its streams).
constexpr absl::Duration kRemotePollPeriod = absl::Milliseconds(500);

volatile sig_atomic_t interrupted = 0;
void OnInterrupt(int) { interrupted = 1; }

// True for a digit string that fits `out`.
bool ParseNumber(absl::string_view text, int64_t& out) {
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit) &&
         absl::SimpleAtoi(text, &out);
}

// One log stream file and how far it has been read.
struct Stream {
  std::string name;  // algo-<k>-<epoch>[-<n>]
  int64_t host = 0;  // k
  int64_t epoch = 0;
  int64_t n = 1;
  // The end of what was shown: a line without its newline is read again
  // at each look, as a stream that breaks cuts it off (kiln/local/local.h).
  off_t offset = 0;
  std::string partial;  // what this look read after the last newline
  std::string token;    // (from a server) where its next read starts

  auto Key() const { return std::tie(epoch, n, host); }
};

// False for a file name that is not a log stream's.
bool ParseStreamName(absl::string_view name, Stream& s) {
  if (!absl::ConsumePrefix(&name, "algo-")) return false;
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  if (parts.size() != 2 && parts.size() != 3) return false;
  if (!ParseNumber(parts[0], s.host) || s.host < 1 || !ParseNumber(parts[1], s.epoch)) {
    return false;
  }
  s.n = 1;
  return parts.size() == 2 || (ParseNumber(parts[2], s.n) && s.n >= 2);
}

// The job's log streams: finds new ones and prints what they gained.
class Tail {
 public:
  // `host`: 0 for every host. `label`: whether each line shows its stream.
  Tail(std::string job, std::string dir, int64_t host, bool label)
      : job_(std::move(job)), dir_(std::move(dir)), host_(host), label_(label) {}

  // Prints the complete lines the streams gained since the last call and,
  // with `last`, the lines that never got their newline. Returns false when
  // a stream cannot be read or stdout cannot be written (`error` says which).
  bool Poll(bool last, std::string& error) {
    if (!FindStreams(error)) return false;
    std::string out;
    for (Stream& s : streams_) {
      if (!Read(s, out, error)) return false;
      if (last && !s.partial.empty()) {
        EmitLine(s, s.partial, out);
        s.offset += static_cast<off_t>(s.partial.size());
      }
      s.partial.clear();
    }
    if (out.empty()) return true;
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
      error = "cannot write the output";
      return false;
    }
    return true;
  }

 private:
  bool FindStreams(std::string& error) {
    DIR* d = opendir(dir_.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) return true;  // no stream yet
      error = absl::StrCat(ShownPath(dir_), ": ", std::strerror(errno));
      return false;
    }
    bool added = false;
    errno = 0;
    while (const dirent* e = readdir(d)) {
      Stream s;
      if (!ParseStreamName(e->d_name, s) || (host_ != 0 && s.host != host_)) continue;
      if (!known_.insert(e->d_name).second) continue;
      s.name = e->d_name;
      streams_.push_back(std::move(s));
      added = true;
    }
    const int err = errno;
    closedir(d);
    if (err != 0) {
      error = absl::StrCat(ShownPath(dir_), ": ", std::strerror(err));
      return false;
    }
    if (added) {
      std::stable_sort(streams_.begin(), streams_.end(),
                       [](const Stream& a, const Stream& b) { return a.Key() < b.Key(); });
    }
    return true;
  }

  bool Read(Stream& s, std::string& out, std::string& error) {
    const std::string path = absl::StrCat(dir_, "/", s.name);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return true;  // deleted meanwhile
      error = absl::StrCat(ShownPath(path), ": ", std::strerror(errno));
      return false;
    }
    char buf[64 * 1024];
    s.partial.clear();
    for (off_t at = s.offset;;) {
      const ssize_t got = pread(fd, buf, sizeof buf, at);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        error = absl::StrCat(ShownPath(path), ": ", std::strerror(errno));
        close(fd);
        return false;
      }
      if (got == 0) break;
      at += got;
      Consume(s, absl::string_view(buf, static_cast<size_t>(got)), out);
    }
    close(fd);
    return true;
  }

  void Consume(Stream& s, absl::string_view data, std::string& out) {
    for (;;) {
      const size_t newline = data.find('\n');
      if (newline == absl::string_view::npos) break;
      s.partial.append(data.data(), newline);
      EmitLine(s, s.partial, out);
      s.offset += static_cast<off_t>(s.partial.size() + 1);
      s.partial.clear();
      data.remove_prefix(newline + 1);
    }
    s.partial.append(data.data(), data.size());
    // The pieces of an over-long line that EmitLine will cut whatever comes
    // next (the last byte may be a '\r' it drops).
    size_t shown = 0;
    while (s.partial.size() - shown > kMaxLineBytes + 1) {
      Emit(s, absl::string_view(s.partial).substr(shown, kMaxLineBytes), out);
      shown += kMaxLineBytes;
      s.offset += static_cast<off_t>(kMaxLineBytes);
    }
    s.partial.erase(0, shown);
  }

  // A line (without its newline, a trailing '\r' dropped) in pieces of
  // kMaxLineBytes, the last one at most that long.
  void EmitLine(const Stream& s, absl::string_view line, std::string& out) const {
    absl::ConsumeSuffix(&line, "\r");
    while (line.size() > kMaxLineBytes) {
      Emit(s, line.substr(0, kMaxLineBytes), out);
      line.remove_prefix(kMaxLineBytes);
    }
    Emit(s, line, out);
  }

  void Emit(const Stream& s, absl::string_view line, std::string& out) const {
    if (label_) absl::StrAppend(&out, job_, "/", s.name, " ");
    absl::StrAppend(&out, line, "\n");
  }

  const std::string job_;
  const std::string dir_;
  const int64_t host_;
  const bool label_;
  std::vector<Stream> streams_;  // in the order they started
  absl::flat_hash_set<std::string> known_;
};

// The job's log streams on a server, through its CloudWatch Logs API: finds
// new ones and prints what they gained (as Tail does with files; the server
// holds a line back until its newline or the end of its run).
class RemoteTail {
 public:
  RemoteTail(serve::Client& client, std::string job, int64_t host, bool label)
      : client_(client), job_(std::move(job)), host_(host), label_(label) {}

  bool Poll(std::string& error) {
    if (!FindStreams(error)) return false;
    std::string out;
    for (Stream& s : streams_) {
      if (!Read(s, out, error)) return false;
    }
    if (out.empty()) return true;
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
      error = "cannot write the output";
      return false;
    }
    return true;
  }

 private:
  // Calls Logs_20140328.`operation` with `request`; the answer, or null with
  // `error` set.
  std::optional<JsonValue> Call(const std::string& operation, const JsonValue& request,
                                std::string& error) {
    absl::StatusOr<std::string> answer =
        client_.Call(absl::StrCat("Logs_20140328.", operation), WriteJson(request));
    if (!answer.ok()) {
      error = ServiceErrorText(operation, answer.status());
      return std::nullopt;
    }
    absl::StatusOr<JsonValue> parsed = ParseJsonValue(*answer);
    if (!parsed.ok() || !parsed->is_object()) {
      error = absl::StrCat(operation, ": the server's answer is not a JSON object");
      return std::nullopt;
    }
    return *std::move(parsed);
  }

  static std::string StringMember(const JsonValue& v, std::string_view name) {
    const JsonValue* m = v.Find(name);
    return m != nullptr && m->is_string() ? m->string_value() : "";
  }

  bool FindStreams(std::string& error) {
    bool added = false;
    std::string token;
    do {
      JsonValue request = JsonValue::Object()
                              .Set("logGroupName", JsonValue::String(kTrainingLogGroup))
                              .Set("logStreamNamePrefix", JsonValue::String(job_ + "/"));
      if (!token.empty()) request.Set("nextToken", JsonValue::String(token));
      std::optional<JsonValue> page = Call("DescribeLogStreams", request, error);
      if (!page) return false;
      const JsonValue* streams = page->Find("logStreams");
      if (streams != nullptr && streams->is_array()) {
        for (const JsonValue& e : streams->elements()) {
          const std::string full = StringMember(e, "logStreamName");
          Stream s;
          if (!absl::StartsWith(full, job_ + "/") ||
              !ParseStreamName(absl::string_view(full).substr(job_.size() + 1), s) ||
              (host_ != 0 && s.host != host_) || !known_.insert(full).second) {
            continue;
          }
          s.name = full.substr(job_.size() + 1);
          streams_.push_back(std::move(s));
          added = true;
        }
      }
      token = StringMember(*page, "nextToken");
    } while (!token.empty());
    if (added) {
      std::stable_sort(streams_.begin(), streams_.end(),
                       [](const Stream& a, const Stream& b) { return a.Key() < b.Key(); });
    }
    return true;
  }

  // Reads the stream from its token on until the server gives the token
  // back (nothing more for now).
  bool Read(Stream& s, std::string& out, std::string& error) {
    for (;;) {
      JsonValue request = JsonValue::Object()
                              .Set("logGroupName", JsonValue::String(kTrainingLogGroup))
                              .Set("logStreamName", JsonValue::String(job_ + "/" + s.name))
                              .Set("startFromHead", JsonValue::Bool(true));
      if (!s.token.empty()) request.Set("nextToken", JsonValue::String(s.token));
      std::optional<JsonValue> page = Call("GetLogEvents", request, error);
      if (!page) return false;
      const JsonValue* events = page->Find("events");
      if (events != nullptr && events->is_array()) {
        for (const JsonValue& e : events->elements()) {
          if (label_) absl::StrAppend(&out, job_, "/", s.name, " ");
          absl::StrAppend(&out, StringMember(e, "message"), "\n");
        }
      }
      const std::string next = StringMember(*page, "nextForwardToken");
      if (next.empty() || next == s.token) return true;
      s.token = next;
    }
  }

  serve::Client& client_;
  const std::string job_;
  const int64_t host_;
  const bool label_;
  std::vector<Stream> streams_;  // in the order they started
  absl::flat_hash_set<std::string> known_;
};

// Sets `job` to the job `name` as the journal of `state_dir` now holds it.
// Returns what is wrong when it cannot, else "".
std::string Describe(const std::string& state_dir, const std::string& name,
                     v1::DescribeTrainingJobResponse& job) {
  absl::StatusOr<JournalView> view = OpenJournalView(state_dir);
  if (!view.ok()) return std::string(view.status().message());
  v1::DescribeTrainingJobRequest request;
  request.set_training_job_name(name);
  absl::StatusOr<v1::DescribeTrainingJobResponse> described =
      view->engine->DescribeTrainingJob(request);
  if (absl::IsNotFound(described.status())) {
    return absl::StrCat("no job '", InputForMessage(name), "' in the journal of ",
                        ShownPath(state_dir));
  }
  if (!described.ok()) return ServiceErrorText("DescribeTrainingJob", described.status());
  job = *std::move(described);
  return "";
}

bool Ended(const v1::DescribeTrainingJobResponse& job) {
  const std::string& s = job.training_job_status();
  return s == "Completed" || s == "Failed" || s == "Stopped";
}

int HostCount(const v1::DescribeTrainingJobResponse& job) {
  const v1::ResourceConfig& r = job.resource_config();
  if (r.instance_groups_size() == 0) return r.instance_count();
  int count = 0;
  for (const v1::InstanceGroup& g : r.instance_groups()) count += g.instance_count();
  return count;
}

}  // namespace

int LogsCommand(const std::vector<std::string>& args) {
  std::string state_dir, endpoint, host;
  bool follow = false;
  std::vector<std::string> names;
  std::string error;
  const bool parsed =
      ParseOptions(args,
                   {ValueOption("--state-dir", state_dir), ValueOption("--endpoint", endpoint),
                    ValueOption("--host", host), FlagOption("--follow", follow)},
                   names, error);
  if (parsed && names.size() != 1) error = "give one job name";
  if (parsed && !state_dir.empty() && !endpoint.empty()) {
    error = "give --state-dir or --endpoint, not both";
  }
  if (!error.empty()) {
    std::cerr << "kiln logs: " << error << "\n" << kUsage;
    return 1;
  }
  const std::string& name = names[0];
  // A server's job (--endpoint, KILN_ENDPOINT), or one of the state directory.
  std::unique_ptr<serve::Client> client;
  if (state_dir.empty()) endpoint = EndpointOr(endpoint);
  if (!endpoint.empty()) {
    absl::StatusOr<std::unique_ptr<serve::Client>> made = ClientFor(endpoint);
    if (!made.ok()) {
      std::cerr << "kiln logs: " << made.status().message() << "\n";
      return 1;
    }
    client = *std::move(made);
  } else if (state_dir.empty()) {
    state_dir = DefaultStateDir();
  }
  auto describe = [&](v1::DescribeTrainingJobResponse& job) -> std::string {
    if (client == nullptr) return Describe(state_dir, name, job);
    v1::DescribeTrainingJobRequest request;
    request.set_training_job_name(name);
    absl::StatusOr<v1::DescribeTrainingJobResponse> d = client->DescribeTrainingJob(request);
    if (!d.ok()) return ServiceErrorText("DescribeTrainingJob", d.status());
    job = *std::move(d);
    return "";
  };

  v1::DescribeTrainingJobResponse job;
  error = describe(job);
  if (!error.empty()) {
    std::cerr << "kiln logs: " << error << "\n";
    return 1;
  }
  const int hosts = HostCount(job);
  int64_t host_number = 0;
  if (!host.empty()) {
    absl::string_view digits = host;
    if (!absl::ConsumePrefix(&digits, "algo-") || !ParseNumber(digits, host_number) ||
        host_number < 1 || host_number > hosts || digits[0] == '0') {
      std::vector<std::string> names_of_hosts;
      for (int k = 1; k <= hosts; ++k) names_of_hosts.push_back(absl::StrCat("algo-", k));
      std::cerr << "kiln logs: job '" << InputForMessage(name) << "' has no host '"
                << InputForMessage(host) << "'; its hosts: " << absl::StrJoin(names_of_hosts, ", ")
                << "\n";
      return 1;
    }
  }

  if (follow) {
    struct sigaction action = {};
    action.sa_handler = OnInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
  }
  const bool label = host_number == 0 && hosts > 1;
  Tail tail(name, absl::StrCat(state_dir, "/logs/", name), host_number, label);
  std::optional<RemoteTail> remote;
  if (client != nullptr) remote.emplace(*client, name, host_number, label);
  // (A server is asked less often.)
  const absl::Duration period = remote ? kRemotePollPeriod : kPollPeriod;
  bool ended = Ended(job);
  for (int poll = 1;; ++poll) {
    // The status first: every line written before the job ended is then in
    // the streams this poll reads.
    if (!ended && follow && (remote || poll % kPollsPerStatus == 0)) {
      error = describe(job);
      if (!error.empty()) {
        std::cerr << "kiln logs: " << error << "\n";
        return 1;
      }
      ended = Ended(job);
    }
    if (interrupted) return 130;
    if (!(remote ? remote->Poll(error) : tail.Poll(ended, error))) {
      std::cerr << "kiln logs: " << error << "\n";
      return 1;
    }
    if (ended || !follow) return 0;
    const timespec wait = absl::ToTimespec(period);
    nanosleep(&wait, nullptr);
    if (interrupted) return 130;
  }
}

}  // namespace kiln::cli
