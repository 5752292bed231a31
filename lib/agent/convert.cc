#include "agent/convert.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kiln::agent {

HostFacts FromProto(const v1::HostFacts& facts) {
  HostFacts out;
  out.address = facts.address();
  out.cpus = facts.cpus();
  out.memory_bytes = facts.memory_bytes();
  out.gpus = facts.gpus();
  out.free_disk_bytes = facts.free_disk_bytes();
  out.runtime = facts.runtime();
  out.network_interface = facts.network_interface();
  for (const v1::Offer& offer : facts.offers()) {
    out.offers.push_back({.instance_type = offer.instance_type(), .count = offer.count()});
  }
  out.version = facts.version();
  return out;
}

void ToProto(const HostFacts& facts, v1::HostFacts* out) {
  out->set_address(facts.address);
  out->set_cpus(facts.cpus);
  out->set_memory_bytes(facts.memory_bytes);
  out->set_gpus(facts.gpus);
  out->set_free_disk_bytes(facts.free_disk_bytes);
  out->set_runtime(facts.runtime);
  out->set_network_interface(facts.network_interface);
  out->clear_offers();
  for (const Offer& offer : facts.offers) {
    v1::Offer* o = out->add_offers();
    o->set_instance_type(offer.instance_type);
    o->set_count(offer.count);
  }
  out->set_version(facts.version);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, std::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrCat(absl::string_view(what.data(), what.size()), ": ", status.error_message()));
}

}  // namespace kiln::agent
