// Policy benchmarking in virtual time: a Scenario (models, workloads, the
// policies to compare) run through the real engine once per policy, and the
// report of what each policy costs and how long jobs wait.
//
//   KILN_ASSIGN_OR_RETURN(kiln::sim::Scenario scenario,  // kiln/plugin/status_macros.h
//                         kiln::sim::LoadScenario("examples/scenarios/hpo_warm_pools.json"));
//   KILN_ASSIGN_OR_RETURN(kiln::sim::SimulationReport report, kiln::sim::RunScenario(scenario));
//   std::cout << kiln::sim::FormatTable(report);
//
// Each policy run builds a fresh virtual loop, SimClusterProvider,
// SimDataChannel and engine (kiln/engine.h) with the policy's keep-alive
// policy and spot handler, starts the scenario's workload generators, and
// runs until every job has ended and every warm pool has expired. Workloads,
// provisioning latencies, failures and spot availability are drawn from the
// scenario's seed and keyed by job, so policies are compared on the same
// jobs and the same cloud. Same scenario and seed: byte-identical output.
//
// The scenario file format is documented in examples/scenarios/README.md.
//
// Threading: thread-compatible (a run uses only its own objects; runs of one
// Scenario may go on at once on different threads, RunScenario's own
// included, as long as nothing changes the Scenario meanwhile).
#ifndef KILN_SIM_SCENARIO_H_
#define KILN_SIM_SCENARIO_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/sim/models.h"
#include "kiln/sim/policies.h"
#include "kiln/sim/workload.h"

namespace kiln::sim {

struct WorkloadSpec {
  std::string name;
  std::string kind;  // "hpo", "nightly", "interactive", "trace"
  // Whether its jobs may run on spot (the slack sweep runs only these).
  bool spot_eligible = false;
  // A fresh generator for one run; `seed` is the scenario's. Called once per
  // run, from concurrent runs at once when RunScenario runs them on several
  // threads (RunOptions::threads): it must be safe to call so.
  std::function<std::unique_ptr<WorkloadGenerator>(uint64_t seed)> make;
};

struct PolicySpec {
  std::string name;  // unique within the scenario
  KeepAliveChoice keep_alive;
  SpotChoice spot;
};

struct Scenario {
  std::string name;
  std::string description;
  uint64_t seed = 1;
  // Workloads submit jobs during [start, start + horizon); the run goes on
  // until they have ended (jobs still there 30 days after the horizon are
  // stopped). At most kMaxSimDuration.
  absl::Duration horizon = absl::Hours(24);
  std::shared_ptr<const SimModels> models = std::make_shared<SimModels>(DefaultModels());
  std::vector<WorkloadSpec> workloads;
  std::vector<PolicySpec> policies;
  // The policy others are compared with; empty: the first.
  std::string baseline;
  // Deadline slacks (deadline = slack x work) for the report's spot savings
  // chart; empty: no sweep.
  std::vector<double> slack_sweep;
};

// The most bytes a scenario file may hold (LoadScenario): 16 MiB.
inline constexpr int64_t kMaxScenarioFileBytes = int64_t{16} << 20;
// The most bytes a trace file a scenario names may hold (a spot trace, a job
// trace): 256 MiB.
inline constexpr int64_t kMaxTraceFileBytes = int64_t{256} << 20;

// Parses a scenario file's text. Relative file names in it (spot traces,
// job traces) are resolved against `base_dir` (empty: as given). Everything
// a run would trip on is checked here: durations are finite and at most
// kMaxSimDuration; every job (template or trace line) makes a valid request
// whose instance types have a price and enough capacity to ever start; a job
// trace has a job arriving before the horizon.
// Errors: InvalidArgument naming the member and the problem (e.g.
// "scenario.workloads[1].job.instance_count: expected a positive integer";
// a trace's errors name its file and line); InvalidArgument for a trace
// file that cannot be read or parsed, naming the member that names it and
// why: one that is not a regular file (a directory, a FIFO, a device such
// as /dev/zero: refused without waiting on it or reading it), that holds
// more than kMaxTraceFileBytes, or that cannot be opened ("cannot read
// 'traces/a.json': No such file or directory").
absl::StatusOr<Scenario> ParseScenario(std::string_view json, std::string_view base_dir);

// Reads and parses a scenario file (base directory: the file's, "/" for a
// file in the root). The file must be a regular file (a symbolic link to one
// is followed) of at most kMaxScenarioFileBytes.
// Errors: as ParseScenario's, the message led by the file's name; for the
// scenario file itself, InvalidArgument when it is not a regular file or is
// too large ("cannot read 's.json': a FIFO, not a regular file; a scenario
// file must be a regular file"), and the errno's code (NotFound,
// PermissionDenied, ...) when it cannot be opened or read.
absl::StatusOr<Scenario> LoadScenario(const std::string& path);

// How one job ended, when PolicyRunOptions::keep_outcomes is set.
struct JobOutcome {
  std::string name;  // the job as submitted (before any resubmission)
  bool completed = false;
  bool has_deadline = false;
  bool met_deadline = false;
  absl::Duration startup;   // arrival until training first began (zero if never)
  absl::Duration duration;  // arrival until the end
};

// What one policy did.
struct PolicyResult {
  std::string policy;
  std::string keep_alive;  // KeepAliveChoice::Name()
  std::string spot;        // SpotChoice::Name()
  std::optional<absl::Duration> fixed_keep_alive;  // for Fixed(T)
  bool uses_spot = false;

  // jobs = completed + failed + stopped + rejected.
  int64_t jobs = 0;  // submitted (a resubmission is the same job)
  int64_t completed = 0;
  int64_t failed = 0;  // including jobs whose resubmission was refused
  int64_t stopped = 0;
  int64_t rejected = 0;     // CreateTrainingJob refused their first submission
  std::string first_error;  // the first refusal's message

  double cost = 0;  // dollars
  double billable_instance_hours = 0;  // instance time used by jobs (on-demand + spot)
  double spot_instance_hours = 0;      // of which on spot
  double warm_retained_instance_hours = 0;
  int64_t started = 0;    // jobs that began training
  int64_t warm_hits = 0;  // of which on a cluster reused from a warm pool
  double warm_hit_rate = 0;
  // Startup (arrival until training first began), seconds, nearest rank;
  // absent when no job began training.
  std::optional<double> startup_p50, startup_p90, startup_p99;
  int64_t spot_interruptions = 0;
  int64_t node_failures = 0;
  int64_t migrations = 0;  // moves between spot and on-demand (greedy, Uniform Progress)
  double lost_work_instance_hours = 0;
  int64_t deadline_jobs = 0;
  int64_t deadline_misses = 0;
  // The slack sweep's on-demand runs (PolicyRunOptions::deadline_slack, an
  // on-demand policy): the omniscient bound (kiln/sim/ideal.h) summed over
  // the spot-eligible jobs with a deadline, each job's changeover the time
  // it took to start in this run, what on-demand costs in the same model,
  // and the jobs no schedule could finish in time (counted at that on-demand
  // cost). Unset when a job's spot market is not a trace (or
  // "none"), or its instances are of more than one type.
  std::optional<double> ideal_cost;
  double ideal_on_demand_cost = 0;
  int64_t ideal_infeasible = 0;

  // Startup quantiles 0%, 1%, ..., 100% (seconds), for the CDF chart.
  std::vector<double> startup_quantiles;
  std::vector<JobOutcome> outcomes;  // with keep_outcomes only
  uint64_t events = 0;               // loop events run
};

struct PolicyRunOptions {
  // Overrides the deadline of spot-eligible jobs: slack x work.
  std::optional<double> deadline_slack;
  // Runs only the workloads whose jobs may use spot.
  bool spot_eligible_only = false;
  bool keep_outcomes = false;
  // Called now and then with the fraction of the horizon simulated.
  std::function<void(double fraction)> progress;
};

// Runs one policy of the scenario through the engine.
// REQUIRES: 0 < scenario.horizon <= kMaxSimDuration (RunScenario checks it).
PolicyResult RunPolicy(const Scenario& scenario, const PolicySpec& policy,
                       const PolicyRunOptions& options = {});

// The slack sweep's series of the omniscient bound (kiln/sim/ideal.h): its
// cost, against on-demand in the bound's own model, and as misses the jobs no
// schedule could finish in time.
inline constexpr char kIdealBoundName[] = "Omniscient bound";

// One point of the spot-savings-against-deadline-slack sweep.
struct SlackPoint {
  double slack = 0;
  std::string policy;
  double cost = 0;
  double on_demand_cost = 0;
  double savings = 0;  // 1 - cost / on_demand_cost
  int64_t deadline_misses = 0;
  int64_t on_demand_misses = 0;
};

struct SimulationReport {
  std::string scenario;
  std::string description;
  uint64_t seed = 0;
  absl::Duration horizon;
  std::vector<PolicyResult> results;  // in the scenario's order
  size_t baseline = 0;
  // The cheapest policy with startup P90, deadline misses and completions no
  // worse than the baseline's (the baseline itself when none is cheaper), cost
  // and P90 compared as FormatTable prints them (to the cent, to the second).
  // A policy under which no job began training has no P90, which is worse
  // than any.
  size_t best = 0;
  std::vector<SlackPoint> slack;
};

struct RunOptions {
  // Called now and then with the fraction of all runs done, never less than
  // the last time, on the thread that called RunScenario.
  std::function<void(double fraction)> progress;
  // Whether to run the scenario's slack sweep.
  bool slack_sweep = true;
  // How many runs (one per policy, and per slack and policy of the slack
  // sweep) go at once: 1, one after another on the calling thread; N > 1, on up to N
  // threads RunScenario starts and joins before it returns (memory: up to N
  // runs at once); 0, one thread per hardware thread
  // (std::thread::hardware_concurrency). The report is the same, byte for
  // byte once formatted, whatever the number.
  int threads = 1;
};

// SimulationReport::best for `results` against results[baseline].
// REQUIRES: baseline < results.size().
size_t BestPolicy(const std::vector<PolicyResult>& results, size_t baseline);

// Runs every policy (and the slack sweep). Errors: InvalidArgument for a
// scenario without workloads or policies, with a horizon not in
// (0, kMaxSimDuration], or with a baseline that names no policy;
// InvalidArgument for options.threads < 0.
// Threading: with options.threads != 1 the scenario is read, and its
// workloads' `make` called, from several threads at once: neither may change
// meanwhile (the scenarios ParseScenario makes are safe so).
absl::StatusOr<SimulationReport> RunScenario(const Scenario& scenario, const RunOptions& options = {});

// The report as a fixed-width table (one row per policy, then the best
// policy), JSON, CSV (one row per policy), or a self-contained HTML page with
// inline SVG charts, each policy in one colour throughout (startup latency
// CDF per policy; cost against startup P90; cost against Fixed(T) keep-alive;
// spot savings and deadline misses against deadline slack; a chart without
// data is left out). All deterministic.
std::string FormatTable(const SimulationReport& report);
std::string FormatJson(const SimulationReport& report);
std::string FormatCsv(const SimulationReport& report);
std::string FormatHtml(const SimulationReport& report);

}  // namespace kiln::sim

#endif  // KILN_SIM_SCENARIO_H_
