// The agents on loopback with the default timings (1 s heartbeats, 5 s
// silence timeout): how long a host takes to join (token to a connection
// with the hub that is up) next to an agent that has its certificate
// dialling again, and how long after its agent stops the hub says a host is
// lost, next to the silence timeout itself.
//
//   build/bench/agent_session_bench
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kiln/agent/agent.h"
#include "kiln/agent/hub.h"
#include "kiln/agent/pki.h"

namespace {

using kiln::agent::Agent;
using kiln::agent::AgentOptions;
using kiln::agent::HostStatus;
using kiln::agent::Hub;
using kiln::agent::HubListener;
using kiln::agent::HubOptions;
using kiln::agent::Pki;

class LostClock : public HubListener {
 public:
  void OnHostLost(const HostStatus& host) override {
    absl::MutexLock lock(&mu_);
    lost_ = absl::Now();
  }
  absl::Time WaitLost() {
    absl::MutexLock lock(&mu_);
    auto told = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return lost_ != absl::InfinitePast(); };
    mu_.AwaitWithTimeout(absl::Condition(&told), absl::Seconds(30));
    absl::Time at = lost_;
    lost_ = absl::InfinitePast();
    return at;
  }

 private:
  absl::Mutex mu_;
  absl::Time lost_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

struct Fixture {
  explicit Fixture(HubListener* listener) {
    char tmpl[] = "/tmp/kiln-agent-bench-XXXXXX";
    dir = mkdtemp(tmpl);
    pki = kiln::agent::OpenOrCreatePki(dir + "/pki", {"127.0.0.1"}).value();
    HubOptions options;
    options.pki = pki.get();
    options.listener = listener;
    hub = Hub::Start(options).value();
  }
  ~Fixture() {
    hub.reset();
    std::filesystem::remove_all(dir);
  }
  AgentOptions For(const std::string& host, bool with_token) {
    AgentOptions options;
    options.controller = "127.0.0.1:" + std::to_string(hub->port());
    options.ca_pem = pki->ca_cert_pem();
    options.state_dir = dir + "/" + host;
    options.host_name = host;
    if (with_token) options.token = pki->CreateJoinToken(absl::Minutes(5)).value();
    return options;
  }

  std::string dir;
  std::unique_ptr<Pki> pki;
  std::unique_ptr<Hub> hub;
};

// A new host each iteration: key, CSR, Join, certificate, connected stream.
void BM_JoinToSession(benchmark::State& state) {
  Fixture f(nullptr);
  int n = 0;
  for (auto _ : state) {
    AgentOptions options = f.For("host-" + std::to_string(++n), /*with_token=*/true);
    const absl::Time start = absl::Now();
    auto agent = Agent::Start(options).value();
    if (!agent->WaitConnected(absl::Seconds(10))) state.SkipWithError("never connected");
    state.SetIterationTime(absl::ToDoubleSeconds(absl::Now() - start));
  }
}
BENCHMARK(BM_JoinToSession)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

// The peer: an agent with its certificate dialling again.
void BM_RedialToSession(benchmark::State& state) {
  Fixture f(nullptr);
  AgentOptions options = f.For("host-r", /*with_token=*/true);
  Agent::Start(options).value().reset();
  options.token.clear();
  for (auto _ : state) {
    const absl::Time start = absl::Now();
    auto agent = Agent::Start(options).value();
    if (!agent->WaitConnected(absl::Seconds(10))) state.SkipWithError("never connected");
    state.SetIterationTime(absl::ToDoubleSeconds(absl::Now() - start));
  }
}
BENCHMARK(BM_RedialToSession)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

// From the agent's end to the hub's OnHostLost, default timings.
void BM_LostHostDetection(benchmark::State& state) {
  LostClock clock;
  Fixture f(&clock);
  AgentOptions options = f.For("host-l", /*with_token=*/true);
  Agent::Start(options).value().reset();
  options.token.clear();
  clock.WaitLost();
  for (auto _ : state) {
    state.PauseTiming();
    auto agent = Agent::Start(options).value();
    agent->WaitConnected(absl::Seconds(10));
    // Somewhere between two heartbeats, as a failure would fall.
    absl::SleepFor(absl::Milliseconds(1500 + 250 * (state.iterations() % 4)));
    state.ResumeTiming();
    const absl::Time stopped = absl::Now();
    agent.reset();
    const absl::Time lost = clock.WaitLost();
    state.SetIterationTime(absl::ToDoubleSeconds(lost - stopped));
  }
  state.counters["silence_timeout_s"] = absl::ToDoubleSeconds(HubOptions().silence_timeout);
}
BENCHMARK(BM_LostHostDetection)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(4);

}  // namespace

BENCHMARK_MAIN();
