// `kiln agent`: the agent of one host (kiln/agent/agent.h). It joins the
// controller that `kiln serve --agents` runs and keeps a session with it.
//
//   kiln agent --controller HOST:PORT --ca CA.pem --state-dir DIR
//              [--token TOKEN | --token-file FILE] [--host-name NAME]
//              [--offers TYPE:COUNT,...] [--runtime process|bwrap]
//              [--address ADDRESS] [--network-interface NAME]
//
// The first start needs a join token (`kiln token create` on the
// controller); the host's key and certificate are then kept in --state-dir
// and later starts need none. --offers: the instances the host stands for at
// once (TYPE * for any type; default *:1). --address: where peers reach this
// host (default: the address the controller sees the session come from).
// It prints "joined the controller at HOST:PORT as NAME" once, then a line
// each time a session comes up or ends, and runs until SIGINT or SIGTERM
// (exit 0). Exit status 1: an argument is wrong, or joining failed (a token
// refused, the controller unreachable, a certificate of another CA).
//
// Public headers only.
#include "kiln/agent/agent.h"

#include <pthread.h>
#include <signal.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "cli.h"
#include "kiln/agent/host.h"
#include "kiln/plugin/files.h"

namespace kiln::cli {
namespace {

constexpr char kUsage[] =
    "usage: kiln agent --controller HOST:PORT --ca CA.pem --state-dir DIR\n"
    "                  [--token TOKEN | --token-file FILE] [--host-name NAME]\n"
    "                  [--offers TYPE:COUNT,...] [--runtime process|bwrap]\n"
    "                  [--address ADDRESS] [--network-interface NAME]\n";
constexpr int kError = 1;
// The most a CA certificate or token file may hold.
constexpr int64_t kMaxPemBytes = int64_t{1} << 20;

}  // namespace

int AgentCommand(const std::vector<std::string>& args) {
  agent::AgentOptions options;
  std::string ca_file;
  std::string token_file;
  std::string offers = "*:1";
  local::LocalRuntime runtime = local::LocalRuntime::kProcess;
  std::vector<std::string> operands;
  std::string error;
  const std::vector<Option> parsers = {
      ValueOption("--controller", options.controller),
      ValueOption("--ca", ca_file),
      ValueOption("--state-dir", options.state_dir),
      ValueOption("--token", options.token),
      ValueOption("--token-file", token_file),
      ValueOption("--host-name", options.host_name),
      ValueOption("--offers", offers),
      RuntimeOption("--runtime", runtime),
      ValueOption("--address", options.facts.address),
      ValueOption("--network-interface", options.facts.network_interface)};
  if (ParseOptions(args, parsers, operands, error)) {
    if (!operands.empty()) {
      error = "unexpected argument '" + ShownPath(operands.front()) + "'";
    } else if (options.controller.empty()) {
      error = "--controller HOST:PORT is required";
    } else if (ca_file.empty()) {
      error = "--ca FILE is required";
    } else if (options.state_dir.empty()) {
      error = "--state-dir DIR is required";
    } else if (!options.token.empty() && !token_file.empty()) {
      error = "give --token or --token-file, not both";
    }
  }
  if (error.empty()) {
    absl::StatusOr<std::string> ca = ReadUserFile(ca_file, kMaxPemBytes, "a CA certificate file");
    if (ca.ok()) {
      options.ca_pem = *std::move(ca);
    } else {
      error = "--ca '" + ShownPath(ca_file) + "': " + std::string(ca.status().message());
    }
  }
  if (error.empty() && !token_file.empty()) {
    absl::StatusOr<std::string> token = ReadUserFile(token_file, kMaxPemBytes, "a token file");
    if (token.ok()) {
      options.token = std::string(absl::StripAsciiWhitespace(*token));
    } else {
      error =
          "--token-file '" + ShownPath(token_file) + "': " + std::string(token.status().message());
    }
  }
  if (error.empty()) {
    absl::StatusOr<std::vector<agent::Offer>> parsed = agent::ParseOffers(offers);
    if (parsed.ok()) {
      options.facts.offers = *std::move(parsed);
    } else {
      error = "--offers: " + std::string(parsed.status().message());
    }
  }
  if (!error.empty()) {
    std::cerr << "kiln agent: " << error << "\n" << kUsage;
    return kError;
  }
  options.facts.runtime = runtime == local::LocalRuntime::kBwrap ? "bwrap" : "process";
  const std::string controller = options.controller;
  options.on_session = [controller](const absl::Status& status) {
    if (status.ok()) {
      std::cout << "session with the controller at " << controller << " is up" << std::endl;
    } else {
      std::cerr << "kiln agent: " << status.message() << std::endl;
    }
  };

  // SIGINT and SIGTERM are taken by sigwait below, on this thread only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<agent::Agent>> started = agent::Agent::Start(options);
  if (!started.ok()) {
    std::cerr << "kiln agent: " << started.status().message() << "\n";
    return kError;
  }
  std::cout << "joined the controller at " << controller << " as " << (*started)->host_name()
            << std::endl;
  int sig = 0;
  while (sig != SIGINT && sig != SIGTERM) sigwait(&signals, &sig);
  started->reset();
  return 0;
}

}  // namespace kiln::cli
