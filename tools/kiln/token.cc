// `kiln token create`: a one-time join token for an agent, from the PKI of a
// controller (kiln/agent/pki.h), which is made in DIR on first use.
//
//   kiln token create --pki DIR [--ttl SECONDS] [--controller-name NAME]...
//
// Prints the token ("kiln1.<id>.<secret>") alone on stdout. --ttl: how long
// it can be redeemed (default 3600 seconds). --controller-name: the DNS names
// or addresses of the controller's certificate when the PKI is new (default
// this machine's host name, localhost and 127.0.0.1); an existing PKI keeps
// its own. Exit status: 0; 1 when an argument is wrong or the PKI cannot be
// made, opened or written.
//
// Public headers only.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/time/time.h"
#include "cli.h"
#include "kiln/agent/pki.h"

namespace kiln::cli {
namespace {

constexpr char kUsage[] =
    "usage: kiln token create --pki DIR [--ttl SECONDS] [--controller-name NAME]...\n";
constexpr int kError = 1;

int TokenCreate(const std::vector<std::string>& args) {
  std::string pki_dir;
  absl::Duration ttl = absl::Hours(1);
  std::vector<std::string> controller_names;
  std::vector<std::string> operands;
  std::string error;
  const std::vector<Option> options = {ValueOption("--pki", pki_dir), SecondsOption("--ttl", ttl),
                                       RepeatedOption("--controller-name", controller_names)};
  if (ParseOptions(args, options, operands, error)) {
    if (!operands.empty()) {
      error = "unexpected argument '" + ShownPath(operands.front()) + "'";
    } else if (pki_dir.empty()) {
      error = "--pki DIR is required";
    } else if (ttl <= absl::ZeroDuration()) {
      error = "--ttl must be at least 1 second";
    }
  }
  if (!error.empty()) {
    std::cerr << "kiln token create: " << error << "\n" << kUsage;
    return kError;
  }
  if (controller_names.empty()) controller_names = DefaultControllerNames();
  auto pki = agent::OpenOrCreatePki(pki_dir, controller_names);
  if (!pki.ok()) {
    std::cerr << "kiln token create: " << pki.status().message() << "\n";
    return kError;
  }
  auto token = (*pki)->CreateJoinToken(ttl);
  if (!token.ok()) {
    std::cerr << "kiln token create: " << token.status().message() << "\n";
    return kError;
  }
  std::cout << *token << "\n";
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "kiln token create: cannot write the output\n";
    return kError;
  }
  return 0;
}

}  // namespace

int TokenCommand(const std::vector<std::string>& args) {
  if (args.empty() || args.front() != "create") {
    std::cerr << "kiln token: "
              << (args.empty() ? "give a subcommand"
                               : "unknown subcommand '" + ShownPath(args.front()) + "'")
              << "\n"
              << kUsage;
    return kError;
  }
  return TokenCreate(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace kiln::cli
