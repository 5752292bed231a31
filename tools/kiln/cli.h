// What the `kiln` commands share: their entry points, the parsing of their
// options, and the read-only view of a state directory's journal.
//
// Public headers only.
#ifndef KILN_TOOLS_KILN_CLI_H_
#define KILN_TOOLS_KILN_CLI_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/engine.h"
#include "kiln/journal.h"
#include "kiln/local/local.h"
#include "kiln/serve/client.h"

namespace kiln::cli {

int RunCommand(const std::vector<std::string>& args);        // run.cc
int ListCommand(const std::vector<std::string>& args);       // jobs.cc
int DescribeCommand(const std::vector<std::string>& args);   // jobs.cc
int LogsCommand(const std::vector<std::string>& args);       // logs.cc
int ServeCommand(const std::vector<std::string>& args);      // serve.cc
int StopCommand(const std::vector<std::string>& args);       // remote.cc
int DeleteCommand(const std::vector<std::string>& args);     // remote.cc
int UpdateCommand(const std::vector<std::string>& args);     // remote.cc
int SubmitCommand(const std::vector<std::string>& args);     // remote.cc
int InterruptCommand(const std::vector<std::string>& args);  // remote.cc
int TokenCommand(const std::vector<std::string>& args);      // token.cc
int AgentCommand(const std::vector<std::string>& args);      // agent.cc
int HostsCommand(const std::vector<std::string>& args);      // hosts.cc

// The names a controller's certificate holds when nothing else is said:
// this machine's host name (when a certificate can hold it), localhost and
// 127.0.0.1 (cli.cc).
std::vector<std::string> DefaultControllerNames();

// A file name from the command line as the messages show it (kiln.cc).
std::string ShownPath(std::string_view path);

// Where `kiln run` and the commands that read its state keep it when not told.
std::string DefaultStateDir();

// An engine error as the service words it: "CODE: message".
std::string ServiceErrorText(std::string_view operation, const absl::Status& status);

// One option of a command: `name` ("--state-dir") followed by a value, or
// alone when !takes_value. `apply` gets the value ("" for a flag) and returns
// false, with `error` set, when it is wrong.
struct Option {
  std::string name;
  bool takes_value = true;
  std::function<bool(const std::string& value, std::string& error)> apply;
};

// An option whose value is kept in `out` (the last one given wins).
Option ValueOption(std::string name, std::string& out);
// An option that may be repeated, each value appended to `out`.
Option RepeatedOption(std::string name, std::vector<std::string>& out);
// An option without a value, which sets `out`.
Option FlagOption(std::string name, bool& out);
// An option whose value is a whole number of seconds, zero or more.
Option SecondsOption(std::string name, absl::Duration& out);
// An option whose value is a local runtime: process or bwrap.
Option RuntimeOption(std::string name, local::LocalRuntime& out);

// Goes through `args` in order, applying each option of `options` it finds;
// every other argument that does not start with '-' goes to `operands`.
// Returns false at the first error, with `error` set: "--x needs a value",
// "unknown option --y" (arguments shown escaped), or an option's own.
bool ParseOptions(const std::vector<std::string>& args, const std::vector<Option>& options,
                  std::vector<std::string>& operands, std::string& error);

// The server to talk to: `endpoint` when given (--endpoint), else
// KILN_ENDPOINT, else "" (none: the state directory).
std::string EndpointOr(const std::string& endpoint);

// A client of the server at `endpoint`, with the region and credentials found
// the AWS way (AWS_REGION, AWS_ACCESS_KEY_ID, AWS_PROFILE, ...).
absl::StatusOr<std::unique_ptr<serve::Client>> ClientFor(const std::string& endpoint);

// An engine that shows the jobs of a state directory's journal as last
// recorded, read-only (while a `kiln run` may write the directory).
struct JournalView {
  std::unique_ptr<Journal> journal;
  std::unique_ptr<EventLoop> loop;
  std::unique_ptr<Engine> engine;
};

// Errors: the journal's (naming the file and what is wrong) or the engine's.
absl::StatusOr<JournalView> OpenJournalView(const std::string& state_dir);

}  // namespace kiln::cli

#endif  // KILN_TOOLS_KILN_CLI_H_
