// `kiln serve`: the SageMaker Training API over HTTP (kiln/serve/server.h) on
// this machine's local backend, for boto3, the aws CLI and the SageMaker SDK.
//
//   kiln serve --credentials FILE [--listen HOST:PORT] [--state-dir DIR]
//              [--region R] [--runtime process|bwrap] [--grace SECONDS]
//              [--reattach-lease SECONDS] [--file-root DIR]...
//              [--allow-fault-injection]
//              [--tls-cert FILE --tls-key FILE]
//              [--agents HOST:PORT --pki DIR [--agent-silence-timeout SECONDS]]
//
// Each account of the credentials file gets its own engine, journal and local
// backend in <state-dir>/accounts/<account-id>/, so accounts never see each
// other's jobs. Once it accepts requests it prints "listening on
// http://HOST:PORT" on stdout (port 0 picks a free one), or https:// with
// --tls-cert and --tls-key (a PEM certificate and its unencrypted key).
// SIGINT or SIGTERM: it stops accepting, answers the requests in flight, and
// exits 0, leaving the jobs in the journals and the running containers for
// the next start to take back (within --reattach-lease).
// --allow-fault-injection answers Kiln.InjectSpotInterruption
// (kiln/serve/server.h), for tests and drills.
// --agents: the controller of other hosts' agents (`kiln agent`,
// kiln/agent/hub.h) listens at HOST:PORT, over mutual TLS with the CA in
// --pki DIR (made on first use, as `kiln token create` makes it; the
// controller's certificate is made again when it lacks HOST). It prints
// "listening for agents at HOST:PORT", and Kiln.ListHosts (`kiln hosts`)
// lists the hosts that joined. A host silent for --agent-silence-timeout
// (default 5) seconds is lost.
//
// Public headers only.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cli.h"
#include "kiln/agent/hub.h"
#include "kiln/agent/pki.h"
#include "kiln/aws/s3.h"
#include "kiln/engine.h"
#include "kiln/journal_sqlite/sqlite_journal.h"
#include "kiln/json.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/serve/server.h"
#include "kiln/validation.h"

namespace kiln::cli {
namespace {

struct ServeOptions {
  std::string listen = "127.0.0.1:8080";
  std::string state_dir;
  std::string credentials;
  std::string region = "us-east-1";
  local::LocalRuntime runtime = local::LocalRuntime::kProcess;
  absl::Duration grace = absl::Seconds(120);
  absl::Duration reattach_lease = absl::Minutes(2);
  std::vector<std::string> file_roots;
  bool allow_fault_injection = false;
  std::string tls_cert;
  std::string tls_key;
  std::string agents;
  std::string pki;
  absl::Duration agent_silence_timeout = absl::Seconds(5);
};

// One account's engine and what it runs on.
// The soft limit of open files `kiln serve` runs with (when the hard limit
// allows): enough for thousands of running jobs.
constexpr rlim_t kOpenFiles = 65536;

struct AccountEngine {
  std::unique_ptr<Journal> journal;
  std::unique_ptr<ClusterProvider> provider;
  std::unique_ptr<DataChannel> channel;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<LogReader> logs;
};

// "HOST:PORT" or "[V6]:PORT".
bool SplitListen(const std::string& text, std::string& host, uint16_t& port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  uint32_t p = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &p) || p > 65535) return false;
  port = static_cast<uint16_t>(p);
  return true;
}

}  // namespace

int ServeCommand(const std::vector<std::string>& args) {
  ServeOptions o;
  std::vector<std::string> operands;
  std::string error;
  const std::vector<Option> options = {
      ValueOption("--listen", o.listen),
      ValueOption("--state-dir", o.state_dir),
      ValueOption("--credentials", o.credentials),
      ValueOption("--region", o.region),
      RuntimeOption("--runtime", o.runtime),
      SecondsOption("--grace", o.grace),
      SecondsOption("--reattach-lease", o.reattach_lease),
      RepeatedOption("--file-root", o.file_roots),
      FlagOption("--allow-fault-injection", o.allow_fault_injection),
      ValueOption("--tls-cert", o.tls_cert),
      ValueOption("--tls-key", o.tls_key),
      ValueOption("--agents", o.agents),
      ValueOption("--pki", o.pki),
      SecondsOption("--agent-silence-timeout", o.agent_silence_timeout),
  };
  serve::ServerOptions server_options;
  if (ParseOptions(args, options, operands, error) && !operands.empty()) {
    error = "unexpected argument '" + InputForMessage(operands[0]) + "'";
  }
  if (error.empty() && o.credentials.empty()) error = "--credentials FILE is required";
  if (error.empty() && !SplitListen(o.listen, server_options.host, server_options.port)) {
    error = "--listen takes HOST:PORT, not '" + InputForMessage(o.listen) + "'";
  }
  if (error.empty() && o.tls_cert.empty() != o.tls_key.empty()) {
    error =
        o.tls_cert.empty() ? "--tls-key needs --tls-cert FILE" : "--tls-cert needs --tls-key FILE";
  }
  std::string agents_host;
  uint16_t agents_port = 0;
  if (error.empty() && !o.agents.empty() && !SplitListen(o.agents, agents_host, agents_port)) {
    error = "--agents takes HOST:PORT, not '" + InputForMessage(o.agents) + "'";
  }
  if (error.empty() && o.agents.empty() != o.pki.empty()) {
    error = o.agents.empty() ? "--pki needs --agents HOST:PORT" : "--agents needs --pki DIR";
  }
  if (error.empty() && o.agent_silence_timeout < absl::Seconds(2)) {
    error = "--agent-silence-timeout must be at least 2 seconds";
  }
  if (!error.empty()) {
    std::cerr << "kiln serve: " << error << "\n"
              << "usage: kiln serve --credentials FILE [--listen HOST:PORT] [--state-dir DIR]\n"
                 "                  [--region R] [--runtime process|bwrap] [--grace SECONDS]\n"
                 "                  [--reattach-lease SECONDS] [--file-root DIR]...\n"
                 "                  [--allow-fault-injection] [--tls-cert FILE --tls-key FILE]\n"
                 "                  [--agents HOST:PORT --pki DIR [--agent-silence-timeout S]]\n";
    return 1;
  }
  server_options.tls_certificate_file = o.tls_cert;
  server_options.tls_private_key_file = o.tls_key;
  if (o.state_dir.empty()) o.state_dir = DefaultStateDir();
  absl::StatusOr<std::vector<serve::Account>> accounts = serve::ReadCredentialsFile(o.credentials);
  if (!accounts.ok()) {
    std::cerr << "kiln serve: " << accounts.status().message() << "\n";
    return 1;
  }

  // Each running job holds a few descriptors (its output pipe, its log
  // stream, its keeper): the soft limit many systems start with (1,024)
  // would refuse jobs after a few hundred, so it is raised, as far as the
  // hard limit allows, to kOpenFiles (the containers inherit it).
  if (struct rlimit files; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < kOpenFiles) {
    files.rlim_cur = std::min<rlim_t>(kOpenFiles, files.rlim_max);
    setrlimit(RLIMIT_NOFILE, &files);
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<ObjectStore>> files =
      o.file_roots.empty() ? absl::StatusOr<std::unique_ptr<ObjectStore>>(NewFileObjectStore())
                           : NewFileObjectStore(FileObjectStoreOptions{o.file_roots});
  if (!files.ok()) {
    std::cerr << "kiln serve: --file-root: " << files.status().message() << "\n";
    return 1;
  }
  ObjectStores stores;
  stores.Register("file", files->get());
  // s3:// when the AWS configuration allows it (AWS_* variables, the shared
  // files, AWS_ENDPOINT_URL).
  std::unique_ptr<ObjectStore> s3;
  if (auto s3_options = aws::ResolveS3Options({}); s3_options.ok()) {
    if (auto store = aws::NewS3ObjectStore(*s3_options); store.ok()) {
      s3 = *std::move(store);
      stores.Register("s3", s3.get());
    }
  }

  auto loop = NewRealTimeEventLoop();
  std::map<std::string, AccountEngine> engines;
  for (const serve::Account& account : *accounts) {
    if (engines.count(account.account_id) != 0) continue;
    AccountEngine& a = engines[account.account_id];
    const std::string dir = absl::StrCat(o.state_dir, "/accounts/", account.account_id);
    std::error_code made;
    std::filesystem::create_directories(dir, made);
    if (made) {
      std::cerr << "kiln serve: cannot make " << ShownPath(dir) << ": " << made.message() << "\n";
      return 1;
    }
    absl::StatusOr<std::unique_ptr<Journal>> journal =
        journal_sqlite::OpenSqliteJournal({.state_dir = dir});
    if (!journal.ok()) {
      std::cerr << "kiln serve: " << journal.status().message() << "\n";
      return 1;
    }
    a.journal = *std::move(journal);
    local::LocalOptions local_options;
    local_options.state_dir = dir;
    local_options.runtime = o.runtime;
    local_options.object_stores = &stores;
    local_options.reattach_lease = o.reattach_lease;
    auto provider = local::NewLocalClusterProvider(*loop, local_options);
    if (!provider.ok()) {
      std::cerr << "kiln serve: " << provider.status().message() << "\n";
      return 1;
    }
    a.provider = *std::move(provider);
    a.channel = local::NewLocalDataChannel(*loop, stores, {.state_dir = dir});
    EngineOptions engine_options;
    engine_options.loop = loop.get();
    engine_options.cluster_provider = a.provider.get();
    engine_options.data_channel = a.channel.get();
    engine_options.stop_grace_period = o.grace;
    engine_options.journal = a.journal.get();
    engine_options.region = o.region;
    engine_options.account_id = account.account_id;
    auto engine = NewEngine(std::move(engine_options));
    if (!engine.ok()) {
      std::cerr << "kiln serve: " << engine.status().message() << "\n";
      return 1;
    }
    a.engine = *std::move(engine);
    a.logs = local::NewLocalLogReader(absl::StrCat(dir, "/logs"));
    server_options.engines[account.account_id] = a.engine.get();
    server_options.logs[account.account_id] = a.logs.get();
  }
  server_options.accounts = *std::move(accounts);
  server_options.region = o.region;
  server_options.allow_fault_injection = o.allow_fault_injection;

  // The controller of the agents: its PKI, then the hub.
  std::unique_ptr<agent::Pki> pki;
  std::unique_ptr<agent::Hub> hub;
  if (!o.agents.empty()) {
    const bool wildcard = agents_host == "0.0.0.0" || agents_host == "::";
    std::vector<std::string> names = DefaultControllerNames();
    if (!wildcard) names.insert(names.begin(), agents_host);
    absl::StatusOr<std::unique_ptr<agent::Pki>> opened = agent::OpenOrCreatePki(o.pki, names);
    absl::Status status = opened.status();
    if (status.ok()) {
      pki = *std::move(opened);
      if (!wildcard) status = pki->CoverControllerNames({agents_host});
    }
    if (status.ok()) {
      agent::HubOptions hub_options;
      hub_options.listen = o.agents;
      hub_options.pki = pki.get();
      hub_options.silence_timeout = o.agent_silence_timeout;
      absl::StatusOr<std::unique_ptr<agent::Hub>> started = agent::Hub::Start(hub_options);
      status = started.status();
      if (status.ok()) hub = *std::move(started);
    }
    if (!status.ok()) {
      std::cerr << "kiln serve: --agents: " << status.message() << "\n";
      return 1;
    }
    server_options.list_hosts = [&hub] { return agent::HostsJson(hub->Hosts()); };
    std::cout << "listening for agents at " << o.agents.substr(0, o.agents.rfind(':')) << ":"
              << hub->port() << std::endl;
  }

  std::thread loop_thread([&loop] { loop->Run(); });
  absl::StatusOr<std::unique_ptr<serve::Server>> server =
      serve::StartServer(std::move(server_options));
  if (!server.ok()) {
    // (The TLS options' errors under the flags' names.)
    std::cerr << "kiln serve: "
              << absl::StrReplaceAll(server.status().message(),
                                     {{"ServerOptions.tls_certificate_file", "--tls-cert"},
                                      {"ServerOptions.tls_private_key_file", "--tls-key"}})
              << "\n";
    loop->Stop();
    loop_thread.join();
    return 1;
  }
  const std::string shown_host = o.listen.substr(0, o.listen.rfind(':'));
  std::cout << "listening on " << (o.tls_cert.empty() ? "http" : "https") << "://" << shown_host
            << ":" << (*server)->port() << std::endl;

  int sig = 0;
  while (sig != SIGINT && sig != SIGTERM) sigwait(&signals, &sig);
  std::cerr << "kiln serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
            << ": no more requests; the jobs stay in the journal\n";
  (*server)->Shutdown();
  loop->Stop();
  loop_thread.join();
  for (auto& [id, a] : engines) {
    if (absl::Status s = a.journal->Flush(); !s.ok()) {
      std::cerr << "kiln serve: account " << id << ": " << s.message() << "\n";
    }
  }
  return 0;
}

}  // namespace kiln::cli
