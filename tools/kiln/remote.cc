// The verbs that change jobs on a server (`kiln serve`, or any endpoint of
// the API): they need --endpoint URL or KILN_ENDPOINT, and credentials the
// AWS way (AWS_ACCESS_KEY_ID ..., AWS_PROFILE).
//
//   kiln submit [--endpoint URL] [--wait] JOB.json
//   kiln stop [--endpoint URL] NAME
//   kiln update [--endpoint URL] --keep-alive SECONDS NAME
//   kiln delete [--endpoint URL] NAME
//   kiln interrupt [--endpoint URL] [--host algo-K] NAME
//
// interrupt gives a running spot job's instance (default algo-1) a spot
// interruption notice, on a server that allows it (`kiln serve
// --allow-fault-injection`).
// submit prints the job's ARN (with --wait: then waits until the job has
// ended and prints its DescribeTrainingJob JSON; exit 0 when Completed).
// Errors are shown with the server's code ("ValidationException: ...").
// Exit status: 0; 1 on an error; 2 when the server refused the request.
//
// Public headers only.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli.h"
#include "kiln/json.h"
#include "kiln/serve/client.h"

namespace kiln::cli {
namespace {

constexpr int kError = 1;
constexpr int kRefused = 2;

struct RemoteArgs {
  std::string endpoint;
  bool wait = false;
  std::string keep_alive;
  std::string host = "algo-1";
  std::vector<std::string> operands;
};

// Parses `args` for verb `verb` (with --wait for submit, --keep-alive for
// update, --host for interrupt) and makes the client; prints the error and returns null on failure.
std::unique_ptr<serve::Client> Open(const std::string& verb, const std::vector<std::string>& args,
                                    const std::string& usage, RemoteArgs& o) {
  std::vector<Option> options = {ValueOption("--endpoint", o.endpoint)};
  if (verb == "submit") options.push_back(FlagOption("--wait", o.wait));
  if (verb == "update") options.push_back(ValueOption("--keep-alive", o.keep_alive));
  if (verb == "interrupt") options.push_back(ValueOption("--host", o.host));
  std::string error;
  if (ParseOptions(args, options, o.operands, error) && o.operands.size() != 1) {
    error = verb == "submit" ? "give one job file" : "give one job name";
  }
  o.endpoint = EndpointOr(o.endpoint);
  if (error.empty() && o.endpoint.empty()) {
    error = "no server: give --endpoint URL or set KILN_ENDPOINT";
  }
  if (error.empty() && verb == "update" && o.keep_alive.empty()) {
    error = "--keep-alive SECONDS is required";
  }
  if (!error.empty()) {
    std::cerr << "kiln " << verb << ": " << error << "\nusage: " << usage << "\n";
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<serve::Client>> client = ClientFor(o.endpoint);
  if (!client.ok()) {
    std::cerr << "kiln " << verb << ": " << client.status().message() << "\n";
    return nullptr;
  }
  return *std::move(client);
}

// The exit status for a call's error, which it prints.
int Failed(const std::string& verb, std::string_view operation, const absl::Status& status) {
  std::cerr << "kiln " << verb << ": " << ServiceErrorText(operation, status) << "\n";
  return serve::ServiceErrorCode(status).empty() ? kError : kRefused;
}

}  // namespace

int SubmitCommand(const std::vector<std::string>& args) {
  RemoteArgs o;
  std::unique_ptr<serve::Client> client =
      Open("submit", args, "kiln submit [--endpoint URL] [--wait] JOB.json", o);
  if (client == nullptr) return kError;
  absl::StatusOr<std::string> text = ReadRequestFile(o.operands[0]);
  if (!text.ok()) {
    std::cerr << "kiln submit: " << text.status().message() << "\n";
    return kError;
  }
  v1::CreateTrainingJobRequest request;
  if (absl::Status s = ParseJson(*text, request); !s.ok()) {
    std::cerr << "kiln submit: " << ShownPath(o.operands[0]) << ": " << s.message() << "\n";
    return kError;
  }
  absl::StatusOr<v1::CreateTrainingJobResponse> created = client->CreateTrainingJob(request);
  if (!created.ok()) return Failed("submit", "CreateTrainingJob", created.status());
  std::cout << created->training_job_arn() << std::endl;
  if (!o.wait) return 0;
  v1::DescribeTrainingJobRequest describe;
  describe.set_training_job_name(request.training_job_name());
  for (;;) {
    absl::StatusOr<v1::DescribeTrainingJobResponse> d = client->DescribeTrainingJob(describe);
    if (!d.ok()) return Failed("submit", "DescribeTrainingJob", d.status());
    const std::string& status = d->training_job_status();
    if (status == "Completed" || status == "Failed" || status == "Stopped") {
      std::cout << ToJson(*d) << std::endl;
      return status == "Completed" ? 0 : kError;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int StopCommand(const std::vector<std::string>& args) {
  RemoteArgs o;
  std::unique_ptr<serve::Client> client = Open("stop", args, "kiln stop [--endpoint URL] NAME", o);
  if (client == nullptr) return kError;
  v1::StopTrainingJobRequest request;
  request.set_training_job_name(o.operands[0]);
  absl::Status s = client->StopTrainingJob(request);
  return s.ok() ? 0 : Failed("stop", "StopTrainingJob", s);
}

int DeleteCommand(const std::vector<std::string>& args) {
  RemoteArgs o;
  std::unique_ptr<serve::Client> client =
      Open("delete", args, "kiln delete [--endpoint URL] NAME", o);
  if (client == nullptr) return kError;
  v1::DeleteTrainingJobRequest request;
  request.set_training_job_name(o.operands[0]);
  absl::Status s = client->DeleteTrainingJob(request);
  return s.ok() ? 0 : Failed("delete", "DeleteTrainingJob", s);
}

int UpdateCommand(const std::vector<std::string>& args) {
  RemoteArgs o;
  std::unique_ptr<serve::Client> client =
      Open("update", args, "kiln update [--endpoint URL] --keep-alive SECONDS NAME", o);
  if (client == nullptr) return kError;
  int32_t seconds = 0;
  if (!absl::SimpleAtoi(o.keep_alive, &seconds) || seconds < 0) {
    std::cerr << "kiln update: --keep-alive takes a number of seconds, not '"
              << InputForMessage(o.keep_alive) << "'\n";
    return kError;
  }
  v1::UpdateTrainingJobRequest request;
  request.set_training_job_name(o.operands[0]);
  request.mutable_resource_config()->set_keep_alive_period_in_seconds(seconds);
  absl::StatusOr<v1::UpdateTrainingJobResponse> updated = client->UpdateTrainingJob(request);
  if (!updated.ok()) return Failed("update", "UpdateTrainingJob", updated.status());
  std::cout << updated->training_job_arn() << std::endl;
  return 0;
}

int InterruptCommand(const std::vector<std::string>& args) {
  RemoteArgs o;
  std::unique_ptr<serve::Client> client =
      Open("interrupt", args, "kiln interrupt [--endpoint URL] [--host algo-K] NAME", o);
  if (client == nullptr) return kError;
  absl::Status s = client->InjectSpotInterruption(o.operands[0], o.host);
  return s.ok() ? 0 : Failed("interrupt", "InjectSpotInterruption", s);
}

}  // namespace kiln::cli
