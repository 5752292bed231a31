// The `kiln` command-line program. It uses only Kiln's public headers.
//
//   kiln validate FILE.json...   check CreateTrainingJob requests
//   kiln simulate SCENARIO.json  compare policies in virtual time (simulate.cc)
//
// Exit status of `validate`: 0 when every file is a valid request, 2 when any
// is invalid, 1 on other errors (a file that cannot be read or is not JSON, or
// stdout that cannot be written).
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "kiln/json.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/validation.h"

namespace kiln::cli {

// A file name from the command line as the messages show it: escaped as
// Kiln's own messages show input, so that no name can add a line to the
// output, and cut after 1024 bytes, as they cut paths.
std::string ShownPath(std::string_view path) { return InputForMessage(path, 1024); }

}  // namespace kiln::cli

namespace {

using kiln::cli::ShownPath;

constexpr char kUsage[] =
    "usage: kiln validate FILE.json...\n"
    "       kiln run [--state-dir DIR] [--runtime process|bwrap] [--grace SECONDS]\n"
    "                [--interrupt HOST@SECONDS]... [--file-root DIR]... [--user UID[:GID]]\n"
    "                [--reattach-lease SECONDS] [JOB.json...]\n"
    "       kiln list [--state-dir DIR | --endpoint URL] [--status STATUS] [--name-contains TEXT]\n"
    "       kiln describe [--state-dir DIR | --endpoint URL] NAME\n"
    "       kiln logs [--state-dir DIR | --endpoint URL] [--host algo-K] [--follow] NAME\n"
    "       kiln serve --credentials FILE [--listen HOST:PORT] [--state-dir DIR] [--region R]\n"
    "                  [--runtime process|bwrap] [--grace SECONDS] [--reattach-lease SECONDS]\n"
    "                  [--file-root DIR]... [--allow-fault-injection]\n"
    "                  [--tls-cert FILE --tls-key FILE]\n"
    "                  [--agents HOST:PORT --pki DIR [--agent-silence-timeout SECONDS]]\n"
    "       kiln submit [--endpoint URL] [--wait] JOB.json\n"
    "       kiln stop|delete [--endpoint URL] NAME\n"
    "       kiln update [--endpoint URL] --keep-alive SECONDS NAME\n"
    "       kiln interrupt [--endpoint URL] [--host algo-K] NAME\n"
    "       kiln token create --pki DIR [--ttl SECONDS] [--controller-name NAME]...\n"
    "       kiln agent --controller HOST:PORT --ca CA.pem --state-dir DIR\n"
    "                  [--token TOKEN | --token-file FILE] [--host-name NAME]\n"
    "                  [--offers TYPE:COUNT,...] [--runtime process|bwrap]\n"
    "                  [--address ADDRESS] [--network-interface NAME]\n"
    "       kiln hosts [--endpoint URL] [--json]\n"
    "       kiln simulate SCENARIO.json [--format table|json|csv] [--report FILE.html] [--seed N]\n"
    "                     [--jobs N]\n"
    "\n"
    "  validate   check CreateTrainingJob requests (SageMaker's JSON) against the\n"
    "             service's rules; prints 'FILE: valid' or what is wrong.\n"
    "             Exit 0: all valid; 2: some invalid; 1: a file unreadable or not JSON,\n"
    "             or stdout not writable.\n"
    "  run        run the jobs in order on this machine (local backend); status and\n"
    "             logs on stderr, each job's DescribeTrainingJob JSON on stdout.\n"
    "             Engine errors show the service's code (ValidationException, ...).\n"
    "             Exit 0: every job Completed; 2: the engine refused a job; 1: a job\n"
    "             did not complete, or bad input; 130: Ctrl-C, which stops the\n"
    "             running job. The state directory's journal keeps every job: a\n"
    "             name it holds is refused, and jobs an earlier run left unfinished\n"
    "             are carried on first (with no JOB.json, only they are).\n"
    "             --state-dir DIR   instance trees, image caches, warm pools\n"
    "                               (default ~/.kiln/state; as root\n"
    "                               /var/lib/kiln/state)\n"
    "             --runtime process (default) each instance a process group; scripts\n"
    "                               find their /opt/ml through SAGEMAKER_BASE_DIR\n"
    "                               and the SM_* paths (entrypoint arguments that\n"
    "                               start with /opt/ml are rewritten, paths inside\n"
    "                               scripts are not)\n"
    "             --runtime bwrap   a bubblewrap sandbox per instance with the tree\n"
    "                               at /opt/ml and host names algo-<k>, as in a\n"
    "                               SageMaker container\n"
    "             --file-root DIR   file:// sources and outputs only below DIR\n"
    "                               (repeatable; default: anywhere)\n"
    "             --user UID[:GID]  the containers' user on this host (as root,\n"
    "                               default nobody 65534; docs/security.md)\n"
    "             --grace SECONDS   from SIGTERM to SIGKILL when a job stops\n"
    "                               (default 120)\n"
    "             --interrupt HOST@SECONDS  a spot interruption notice to HOST that\n"
    "                               long after each job starts Training\n"
    "  list       the jobs of a state directory's journal, oldest first: name,\n"
    "             status, secondary status, creation time (tab-separated).\n"
    "  describe   a job's DescribeTrainingJob JSON from the journal.\n"
    "  logs       a job's log lines from its log streams in the state directory,\n"
    "             each line after its stream's name when the job has more than one\n"
    "             host (--host algo-K: that host's only). --follow shows lines as\n"
    "             they come until the job has ended. --endpoint URL: a server's\n"
    "             job, through its CloudWatch Logs API.\n"
    "             These three read only, also while a `kiln run` uses the directory.\n"
    "  serve      the SageMaker Training API over HTTP (boto3, the aws CLI) on the\n"
    "             local backend; requests signed by a key of the credentials file\n"
    "             (ACCESS_KEY_ID SECRET ACCOUNT_ID a line); prints 'listening on\n"
    "             http://HOST:PORT' (https:// with --tls-cert and --tls-key, PEM\n"
    "             files); SIGTERM stops it, the jobs stay in the journal. Also\n"
    "             CloudWatch Logs' read API for the jobs' logs (aws logs ...).\n"
    "             --allow-fault-injection  answer Kiln.InjectSpotInterruption\n"
    "                               (`kiln interrupt`), for tests and drills\n"
    "             --agents HOST:PORT  listen there for other hosts' agents (mutual\n"
    "                               TLS, the CA in --pki DIR); `kiln hosts` lists them\n"
    "  submit, stop, update, delete, interrupt\n"
    "             a job on a server (--endpoint URL or KILN_ENDPOINT; credentials\n"
    "             the AWS way; AWS_CA_BUNDLE, a PEM file, for an https:// server whose\n"
    "             certificate the system does not trust); list and describe ask it\n"
    "             too when given one.\n"
    "  token create\n"
    "             a one-time join token for an agent (printed on stdout), valid\n"
    "             --ttl seconds (default 3600); the controller's PKI (CA,\n"
    "             its certificate, the tokens) is kept in --pki DIR, made on first\n"
    "             use for --controller-name (default this host's name, localhost,\n"
    "             127.0.0.1).\n"
    "  agent      the agent of this host: joins the controller at --controller\n"
    "             (its CA's certificate in --ca; a join token the first time) and\n"
    "             keeps a session with it until SIGTERM; the host's key and\n"
    "             certificate stay in --state-dir.\n"
    "  hosts      the hosts whose agents joined a server started with --agents,\n"
    "             with their state (Connected, Disconnected, Lost) and offers.\n"
    "  simulate   run a scenario's policies through the engine in virtual time and\n"
    "             print one row per policy (see examples/scenarios/README.md).\n";

enum ExitCode { kOk = 0, kError = 1, kInvalid = 2 };

int Validate(const std::vector<std::string>& files) {
  if (files.empty()) {
    std::cerr << kUsage;
    return kError;
  }
  int result = kOk;
  for (const std::string& path : files) {
    absl::StatusOr<std::string> text = kiln::ReadRequestFile(path);
    if (!text.ok()) {
      std::cout << ShownPath(path) << ": cannot read the file: " << text.status().message() << "\n";
      result = kError;
      continue;
    }
    kiln::v1::CreateTrainingJobRequest request;
    absl::Status status = kiln::ParseJson(*text, request);
    if (!status.ok()) {
      const std::string message(status.message());
      const bool not_json = message.rfind("Invalid JSON:", 0) == 0;
      std::cout << ShownPath(path) << ": " << (not_json ? "not JSON: " : "") << message << "\n";
      if (not_json) {
        result = kError;
      } else if (result == kOk) {
        result = kInvalid;
      }
      continue;
    }
    status = kiln::ValidateCreateTrainingJobRequest(request);
    if (!status.ok()) {
      std::cout << ShownPath(path) << ": " << status.message() << "\n";
      if (result == kOk) result = kInvalid;
      continue;
    }
    std::cout << ShownPath(path) << ": valid\n";
  }
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "kiln validate: cannot write the output\n";
    return kError;
  }
  return result;
}

}  // namespace

int RunSimulateCommand(const std::vector<std::string>& args);  // simulate.cc

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? kError : kOk;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "validate") return Validate(args);
  if (command == "run") return kiln::cli::RunCommand(args);
  if (command == "list") return kiln::cli::ListCommand(args);
  if (command == "describe") return kiln::cli::DescribeCommand(args);
  if (command == "logs") return kiln::cli::LogsCommand(args);
  if (command == "serve") return kiln::cli::ServeCommand(args);
  if (command == "submit") return kiln::cli::SubmitCommand(args);
  if (command == "stop") return kiln::cli::StopCommand(args);
  if (command == "update") return kiln::cli::UpdateCommand(args);
  if (command == "delete") return kiln::cli::DeleteCommand(args);
  if (command == "interrupt") return kiln::cli::InterruptCommand(args);
  if (command == "token") return kiln::cli::TokenCommand(args);
  if (command == "agent") return kiln::cli::AgentCommand(args);
  if (command == "hosts") return kiln::cli::HostsCommand(args);
  if (command == "simulate") return RunSimulateCommand(args);
  std::cerr << "kiln: unknown command '" << kiln::InputForMessage(command) << "'\n" << kUsage;
  return kError;
}
