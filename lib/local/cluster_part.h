// A part of a cluster that spans hosts (kiln/local/local.h, ClusterPart):
// its checks, the whole cluster and hosts(5) file the part's containers are
// given, and the record that keeps the part beside its cluster's directory
// for a provider made later on the state directory (Reattach).
//
// Internal to kiln::local: never installed. Thread-safe (pure functions).
#ifndef KILN_LIB_LOCAL_CLUSTER_PART_H_
#define KILN_LIB_LOCAL_CLUSTER_PART_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/cluster_provider.h"
#include "kiln/local/local.h"

namespace kiln::local::internal {

// <cluster dir>/part.json: the ClusterPart a cluster was provisioned for
// (absent for a cluster of this host alone).
inline constexpr char kPartRecordFile[] = "part.json";
// Where a part's hosts file is below the container's /opt/ml, and the
// variable that names it.
inline constexpr char kHostsFileRel[] = "input/config/hosts";
inline constexpr char kHostsFileVariable[] = "KILN_HOSTS_FILE";

// What a checked part comes to.
struct PartLayout {
  // Every instance of the whole cluster, in host order (ids empty).
  Cluster whole;
  // The indices in whole.instances of the instances run here, in host order.
  std::vector<size_t> here;
  // The hosts(5) text: localhost lines, then "<address>\t<host>" for every
  // instance of the whole cluster.
  std::string hosts;
};

// Checks `part` (and that `spec.groups`, when not empty, are the whole
// cluster's) and lays it out. Errors: InvalidArgument naming the field and
// the rule (kiln/local/local.h, ProvisionPart).
absl::StatusOr<PartLayout> LayOutPart(const ClusterSpec& spec, const ClusterPart& part);

// The record of `part` (JSON), and the part read back from one. Errors:
// InvalidArgument naming what of the record is wrong.
std::string PartRecordText(const ClusterPart& part);
absl::StatusOr<ClusterPart> ParsePartRecord(std::string_view text);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_CLUSTER_PART_H_
