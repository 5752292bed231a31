// `kiln list` and `kiln describe`: the jobs a state directory's journal holds,
// read-only (they work while a `kiln run` on that directory is running).
//
//   kiln list [--state-dir DIR | --endpoint URL] [--status STATUS] [--name-contains TEXT]
//   kiln describe [--state-dir DIR | --endpoint URL] NAME
//
// With --endpoint (or KILN_ENDPOINT) they ask a `kiln serve` (or any endpoint
// of the API) instead, signed with the AWS way's credentials.
//
// list prints one line per job, oldest first: name, TrainingJobStatus,
// SecondaryStatus and creation time, separated by tabs. describe prints the
// job's DescribeTrainingJob JSON. Both show jobs as last recorded. Exit
// status: 0; 1 when the journal cannot be read, the job does not exist, or an
// argument is wrong.
//
// Public headers only.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/service_error.h"

namespace kiln::cli {

namespace {

struct Args {
  std::string state_dir;
  std::string endpoint;
  std::string status;
  std::string name_contains;
  std::vector<std::string> names;
};

bool Parse(const std::vector<std::string>& args, bool list, Args& o, std::string& error) {
  std::vector<Option> options = {ValueOption("--state-dir", o.state_dir),
                                 ValueOption("--endpoint", o.endpoint)};
  if (list) {
    options.push_back(ValueOption("--status", o.status));
    options.push_back(ValueOption("--name-contains", o.name_contains));
  }
  if (!ParseOptions(args, options, o.names, error)) return false;
  if (list && !o.names.empty()) {
    error = "unexpected argument " + InputForMessage(o.names[0]);
    return false;
  }
  if (!list && o.names.size() != 1) {
    error = "give one job name";
    return false;
  }
  if (o.state_dir.empty()) o.state_dir = DefaultStateDir();
  o.endpoint = EndpointOr(o.endpoint);
  return true;
}

// Where the jobs are: a state directory's journal, or a server.
struct Jobs {
  std::optional<JournalView> view;
  std::unique_ptr<serve::Client> client;

  absl::StatusOr<v1::ListTrainingJobsResponse> List(const v1::ListTrainingJobsRequest& r) {
    return client ? client->ListTrainingJobs(r) : view->engine->ListTrainingJobs(r);
  }
  absl::StatusOr<v1::DescribeTrainingJobResponse> Describe(
      const v1::DescribeTrainingJobRequest& r) {
    return client ? client->DescribeTrainingJob(r) : view->engine->DescribeTrainingJob(r);
  }
};

absl::StatusOr<Jobs> OpenJobs(const Args& o) {
  Jobs jobs;
  if (!o.endpoint.empty()) {
    absl::StatusOr<std::unique_ptr<serve::Client>> client = ClientFor(o.endpoint);
    if (!client.ok()) return client.status();
    jobs.client = *std::move(client);
    return jobs;
  }
  absl::StatusOr<JournalView> view = OpenJournalView(o.state_dir);
  if (!view.ok()) return view.status();
  jobs.view = *std::move(view);
  return jobs;
}

}  // namespace

int ListCommand(const std::vector<std::string>& args) {
  Args o;
  std::string error;
  if (!Parse(args, /*list=*/true, o, error)) {
    std::cerr << "kiln list: " << error << "\n"
              << "usage: kiln list [--state-dir DIR | --endpoint URL] [--status STATUS]\n"
                 "                 [--name-contains TEXT]\n";
    return 1;
  }
  absl::StatusOr<Jobs> jobs = OpenJobs(o);
  if (!jobs.ok()) {
    std::cerr << "kiln list: " << jobs.status().message() << "\n";
    return 1;
  }
  v1::ListTrainingJobsRequest request;
  request.set_max_results(100);
  if (!o.status.empty()) request.set_status_equals(o.status);
  if (!o.name_contains.empty()) request.set_name_contains(o.name_contains);
  for (;;) {
    absl::StatusOr<v1::ListTrainingJobsResponse> page = jobs->List(request);
    if (!page.ok()) {
      std::cerr << "kiln list: " << ServiceErrorText("ListTrainingJobs", page.status()) << "\n";
      return 1;
    }
    for (const v1::TrainingJobSummary& s : page->training_job_summaries()) {
      const absl::Time created = absl::FromUnixSeconds(s.creation_time().seconds()) +
                                 absl::Nanoseconds(s.creation_time().nanos());
      std::cout << s.training_job_name() << "\t" << s.training_job_status() << "\t"
                << s.secondary_status() << "\t"
                << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", created, absl::UTCTimeZone()) << "\n";
    }
    if (page->next_token().empty()) break;
    request.set_next_token(page->next_token());
  }
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "kiln list: cannot write the output\n";
    return 1;
  }
  return 0;
}

int DescribeCommand(const std::vector<std::string>& args) {
  Args o;
  std::string error;
  if (!Parse(args, /*list=*/false, o, error)) {
    std::cerr << "kiln describe: " << error << "\n"
              << "usage: kiln describe [--state-dir DIR | --endpoint URL] NAME\n";
    return 1;
  }
  absl::StatusOr<Jobs> jobs = OpenJobs(o);
  if (!jobs.ok()) {
    std::cerr << "kiln describe: " << jobs.status().message() << "\n";
    return 1;
  }
  v1::DescribeTrainingJobRequest request;
  request.set_training_job_name(o.names[0]);
  absl::StatusOr<v1::DescribeTrainingJobResponse> described = jobs->Describe(request);
  if (!described.ok()) {
    std::cerr << "kiln describe: " << ServiceErrorText("DescribeTrainingJob", described.status())
              << "\n";
    return 1;
  }
  std::cout << ToJson(*described) << "\n";
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "kiln describe: cannot write the output\n";
    return 1;
  }
  return 0;
}

}  // namespace kiln::cli
