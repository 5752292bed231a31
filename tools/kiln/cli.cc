// What the `kiln` commands share (cli.h).
#include "cli.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "kiln/journal_sqlite/sqlite_journal.h"
#include "kiln/json.h"
#include "kiln/service_error.h"

namespace kiln::cli {

std::string DefaultStateDir() {
  // Root's containers run as nobody, who cannot reach /root: root's state
  // lives where system services keep theirs.
  const char* home = std::getenv("HOME");
  return geteuid() == 0 ? "/var/lib/kiln/state"
                        : std::string(home != nullptr ? home : "/tmp") + "/.kiln/state";
}

std::vector<std::string> DefaultControllerNames() {
  std::vector<std::string> names;
  char host[HOST_NAME_MAX + 1] = {0};
  // (A host name certificates cannot hold, with '_' say, is left out.)
  if (gethostname(host, sizeof host - 1) == 0 && host[0] != '\0' &&
      std::all_of(host, host + std::strlen(host), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
      })) {
    names.push_back(host);
  }
  names.push_back("localhost");
  names.push_back("127.0.0.1");
  return names;
}

std::string ServiceErrorText(std::string_view operation, const absl::Status& status) {
  // (A server's answer carries its own code.)
  std::string code = serve::ServiceErrorCode(status);
  if (code.empty()) code = std::string(ToServiceError(operation, status).code);
  return code + ": " + std::string(status.message());
}

Option SecondsOption(std::string name, absl::Duration& out) {
  return {name, true, [name, &out](const std::string& v, std::string& err) {
            int64_t seconds = 0;
            if (!absl::SimpleAtoi(v, &seconds) || seconds < 0) {
              err = name + " takes a number of seconds, not '" + InputForMessage(v) + "'";
              return false;
            }
            out = absl::Seconds(seconds);
            return true;
          }};
}

Option RuntimeOption(std::string name, local::LocalRuntime& out) {
  return {name, true, [name, &out](const std::string& v, std::string& err) {
            if (v == "process") {
              out = local::LocalRuntime::kProcess;
            } else if (v == "bwrap") {
              out = local::LocalRuntime::kBwrap;
            } else {
              // Values are shown escaped: none can add a line to the message.
              err = name + " must be process or bwrap, not '" + InputForMessage(v) + "'";
              return false;
            }
            return true;
          }};
}

std::string EndpointOr(const std::string& endpoint) {
  if (!endpoint.empty()) return endpoint;
  const char* env = std::getenv("KILN_ENDPOINT");
  return env != nullptr ? env : "";
}

absl::StatusOr<std::unique_ptr<serve::Client>> ClientFor(const std::string& endpoint) {
  absl::StatusOr<serve::ClientOptions> options = serve::ResolveClientOptions(endpoint);
  if (!options.ok()) return options.status();
  return serve::NewClient(*std::move(options));
}

absl::StatusOr<JournalView> OpenJournalView(const std::string& state_dir) {
  JournalView v;
  absl::StatusOr<std::unique_ptr<Journal>> journal =
      journal_sqlite::OpenSqliteJournal({.state_dir = state_dir, .read_only = true});
  if (!journal.ok()) return journal.status();
  v.journal = *std::move(journal);
  v.loop = NewVirtualEventLoop();
  EngineOptions options;
  options.loop = v.loop.get();
  options.journal = v.journal.get();
  absl::StatusOr<std::unique_ptr<Engine>> engine = NewEngine(std::move(options));
  if (!engine.ok()) return engine.status();
  v.engine = *std::move(engine);
  return v;
}

Option ValueOption(std::string name, std::string& out) {
  return {std::move(name), true, [&out](const std::string& value, std::string&) {
            out = value;
            return true;
          }};
}

Option RepeatedOption(std::string name, std::vector<std::string>& out) {
  return {std::move(name), true, [&out](const std::string& value, std::string&) {
            out.push_back(value);
            return true;
          }};
}

Option FlagOption(std::string name, bool& out) {
  return {std::move(name), false, [&out](const std::string&, std::string&) {
            out = true;
            return true;
          }};
}

bool ParseOptions(const std::vector<std::string>& args, const std::vector<Option>& options,
                  std::vector<std::string>& operands, std::string& error) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const Option* option = nullptr;
    for (const Option& o : options) {
      if (o.name == a) option = &o;
    }
    if (option == nullptr) {
      if (!a.empty() && a[0] == '-') {
        error = "unknown option " + InputForMessage(a);
        return false;
      }
      operands.push_back(a);
      continue;
    }
    std::string value;
    if (option->takes_value) {
      if (i + 1 >= args.size()) {
        error = a + " needs a value";
        return false;
      }
      value = args[++i];
    }
    if (!option->apply(value, error)) return false;
  }
  return true;
}

}  // namespace kiln::cli
