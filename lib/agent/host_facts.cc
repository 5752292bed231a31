// Offers and the facts a host reports about itself.
#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kiln/agent/host.h"

namespace kiln::agent {

absl::StatusOr<std::vector<Offer>> ParseOffers(std::string_view text) {
  std::vector<Offer> offers;
  std::set<std::string> types;
  for (absl::string_view item : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    const std::string shown(item);
    const size_t colon = item.rfind(':');
    if (item.empty() || colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("offer '", shown, "' is not TYPE:COUNT (TYPE may be * for any type)"));
    }
    Offer offer;
    offer.instance_type = std::string(item.substr(0, colon));
    if (offer.instance_type == "*") offer.instance_type.clear();
    int32_t count = 0;
    if (!absl::SimpleAtoi(item.substr(colon + 1), &count) || count < 1 || count > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("offer '", shown, "': the count must be a whole number from 1 to 1024"));
    }
    offer.count = count;
    if (!types.insert(offer.instance_type).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "offer '", shown, "': the type ", offer.instance_type.empty() ? "*" : offer.instance_type,
          " is offered twice"));
    }
    offers.push_back(std::move(offer));
  }
  return offers;
}

std::string FormatOffers(const std::vector<Offer>& offers) {
  std::string text;
  for (const Offer& offer : offers) {
    absl::StrAppend(&text, text.empty() ? "" : ",",
                    offer.instance_type.empty() ? "*" : offer.instance_type, ":", offer.count);
  }
  return text;
}

HostFacts LocalHostFacts(const std::string& dir) {
  HostFacts facts;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) facts.cpus = CPU_COUNT(&cpus);
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) facts.memory_bytes = int64_t{pages} * page_size;
  for (int i = 0; i < 64; ++i) {
    if (access(absl::StrCat("/dev/nvidia", i).c_str(), F_OK) != 0) break;
    ++facts.gpus;
  }
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) == 0) {
    facts.free_disk_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  }
  return facts;
}

}  // namespace kiln::agent
