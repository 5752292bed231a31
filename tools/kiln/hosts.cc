// `kiln hosts`: the hosts whose agents joined a server's controller (`kiln
// serve --agents`), from Kiln.ListHosts.
//
//   kiln hosts [--endpoint URL] [--json]
//
// Prints one line per host: NAME STATE ADDRESS OFFERS CPUS MEMORY FREE-DISK
// SILENT-FOR (seconds since its last message); --json prints the server's
// answer as it came. Needs --endpoint URL or KILN_ENDPOINT and credentials
// the AWS way. Exit status: 0; 1 on an error; 2 when the server refused
// (e.g. UnknownOperationException from a server without --agents).
//
// Public headers only.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli.h"
#include "kiln/plugin/json_value.h"
#include "kiln/serve/client.h"

namespace kiln::cli {
namespace {

constexpr char kUsage[] = "usage: kiln hosts [--endpoint URL] [--json]\n";

std::string Text(const JsonValue* v) {
  return v != nullptr && v->is_string() ? v->string_value() : "-";
}
int64_t Number(const JsonValue* v) {
  if (v == nullptr) return 0;
  absl::StatusOr<int64_t> n = v->AsInt64();
  return n.ok() ? *n : 0;
}
std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1fGiB", static_cast<double>(bytes) / (1 << 30));
}

}  // namespace

int HostsCommand(const std::vector<std::string>& args) {
  std::string endpoint;
  bool json = false;
  std::vector<std::string> operands;
  std::string error;
  ParseOptions(args, {ValueOption("--endpoint", endpoint), FlagOption("--json", json)}, operands,
               error);
  if (error.empty() && !operands.empty()) {
    error = "unexpected argument '" + ShownPath(operands.front()) + "'";
  }
  endpoint = EndpointOr(endpoint);
  if (error.empty() && endpoint.empty())
    error = "no server: give --endpoint URL or set KILN_ENDPOINT";
  if (!error.empty()) {
    std::cerr << "kiln hosts: " << error << "\n" << kUsage;
    return 1;
  }
  absl::StatusOr<std::unique_ptr<serve::Client>> client = ClientFor(endpoint);
  if (!client.ok()) {
    std::cerr << "kiln hosts: " << client.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::string> body = (*client)->Call("Kiln.ListHosts", "{}");
  if (!body.ok()) {
    std::cerr << "kiln hosts: " << ServiceErrorText("ListHosts", body.status()) << "\n";
    return serve::ServiceErrorCode(body.status()).empty() ? 1 : 2;
  }
  if (json) {
    std::cout << *body << "\n";
    return std::cout ? 0 : 1;
  }
  absl::StatusOr<JsonValue> doc = ParseJsonValue(*body);
  const JsonValue* hosts = doc.ok() ? doc->Find("Hosts") : nullptr;
  if (hosts == nullptr || !hosts->is_array()) {
    std::cerr << "kiln hosts: the server's answer has no Hosts list\n";
    return 1;
  }
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  std::cout << absl::StrFormat("%-24s %-12s %-16s %-24s %5s %9s %10s %s\n", "NAME", "STATE",
                               "ADDRESS", "OFFERS", "CPUS", "MEMORY", "FREE-DISK", "SILENT-FOR");
  for (const JsonValue& h : hosts->elements()) {
    std::string offers;
    if (const JsonValue* list = h.Find("Offers"); list != nullptr && list->is_array()) {
      for (const JsonValue& offer : list->elements()) {
        absl::StrAppend(&offers, offers.empty() ? "" : ",", Text(offer.Find("InstanceType")), ":",
                        Number(offer.Find("Count")));
      }
    }
    const JsonValue* heard = h.Find("LastHeardTime");
    double silent = 0;
    if (heard != nullptr && heard->is_number()) silent = now - heard->AsDouble().value_or(now);
    std::cout << absl::StrFormat("%-24s %-12s %-16s %-24s %5d %9s %10s %.1fs\n",
                                 Text(h.Find("HostName")), Text(h.Find("State")),
                                 Text(h.Find("Address")), offers.empty() ? "-" : offers,
                                 Number(h.Find("Cpus")), GiB(Number(h.Find("MemoryBytes"))),
                                 GiB(Number(h.Find("FreeDiskBytes"))), silent < 0 ? 0 : silent);
  }
  std::cout.flush();
  return std::cout ? 0 : 1;
}

}  // namespace kiln::cli
