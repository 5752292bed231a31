// ClusterPart's checks, layout and record (cluster_part.h).
#include "local/cluster_part.h"

#include <arpa/inet.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/plugin/json_value.h"

namespace kiln::local::internal {
namespace {

bool IsIpAddress(const std::string& text) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, text.c_str(), buf) == 1 || inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

}  // namespace

absl::StatusOr<PartLayout> LayOutPart(const ClusterSpec& spec, const ClusterPart& part) {
  const size_t n = part.instances.size();
  if (n == 0) return Invalid("ClusterPart.instances is empty: it lists the whole cluster");
  if (part.addresses.size() != n) {
    return Invalid(absl::StrCat("ClusterPart.addresses has ", part.addresses.size(),
                                " addresses for ", n, " instances: one per instance"));
  }
  PartLayout layout;
  for (size_t k = 0; k < n; ++k) {
    const Instance& in = part.instances[k];
    const std::string host = absl::StrCat("algo-", k + 1);
    const std::string field = absl::StrCat("ClusterPart.instances[", k, "]");
    if (in.host_name != host) {
      return Invalid(absl::StrCat(field, ".host_name '", PathForMessage(in.host_name),
                                  "' must be '", host, "' (instances in host order)"));
    }
    if (in.group_name.empty() || in.instance_type.empty()) {
      return Invalid(absl::StrCat(field, " (", host, ") needs a group_name and an instance_type"));
    }
    if (!IsIpAddress(part.addresses[k])) {
      return Invalid(absl::StrCat("ClusterPart.addresses[", k, "] '",
                                  PathForMessage(part.addresses[k]), "' (", host,
                                  ") is not an IPv4 or IPv6 address"));
    }
    Instance whole;
    whole.host_name = in.host_name;
    whole.group_name = in.group_name;
    whole.instance_type = in.instance_type;
    layout.whole.instances.push_back(std::move(whole));
  }
  if (!spec.groups.empty()) {
    size_t k = 0;
    for (const InstanceGroupSpec& g : spec.groups) {
      for (int32_t i = 0; i < g.count; ++i, ++k) {
        if (k >= n) break;
        const Instance& in = part.instances[k];
        if (in.group_name != g.name || in.instance_type != g.instance_type) {
          return Invalid(absl::StrCat(
              "ClusterPart.instances[", k, "] (", in.host_name, ") is of group '",
              PathForMessage(in.group_name), "' (", PathForMessage(in.instance_type),
              "), where ClusterSpec.groups has group '", PathForMessage(g.name), "' (",
              PathForMessage(g.instance_type), "): the part must be the spec's whole cluster"));
        }
      }
    }
    if (k != n) {
      return Invalid(absl::StrCat("ClusterPart.instances has ", n,
                                  " instances, where ClusterSpec.groups asks for ", k));
    }
  }
  if (part.here.empty()) {
    return Invalid("ClusterPart.here is empty: a part runs at least one instance");
  }
  std::set<size_t> here;
  for (const std::string& name : part.here) {
    size_t k = 0;
    while (k < n && part.instances[k].host_name != name) ++k;
    if (k == n) {
      return Invalid(absl::StrCat("ClusterPart.here: '", PathForMessage(name),
                                  "' is not the host name of one of ClusterPart.instances"));
    }
    if (!here.insert(k).second) {
      return Invalid(absl::StrCat("ClusterPart.here names '", name, "' twice"));
    }
  }
  layout.here.assign(here.begin(), here.end());
  layout.whole.spot = spec.spot;
  layout.hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  for (size_t k = 0; k < n; ++k) {
    absl::StrAppend(&layout.hosts, part.addresses[k], "\t", part.instances[k].host_name, "\n");
  }
  return layout;
}

std::string PartRecordText(const ClusterPart& part) {
  JsonValue instances = JsonValue::Array();
  for (size_t k = 0; k < part.instances.size(); ++k) {
    const Instance& in = part.instances[k];
    JsonValue i = JsonValue::Object();
    i.Set("host_name", JsonValue::String(in.host_name))
        .Set("group_name", JsonValue::String(in.group_name))
        .Set("instance_type", JsonValue::String(in.instance_type))
        .Set("address", JsonValue::String(k < part.addresses.size() ? part.addresses[k] : ""));
    instances.Push(i);
  }
  JsonValue here = JsonValue::Array();
  for (const std::string& h : part.here) here.Push(JsonValue::String(h));
  JsonValue doc = JsonValue::Object();
  doc.Set("instances", instances).Set("here", here);
  return WriteJson(doc);
}

absl::StatusOr<ClusterPart> ParsePartRecord(std::string_view text) {
  absl::StatusOr<JsonValue> doc = ParseJsonValue(text);
  if (!doc.ok()) return Invalid(absl::StrCat("part record: ", doc.status().message()));
  const JsonValue* instances = doc->is_object() ? doc->Find("instances") : nullptr;
  const JsonValue* here = doc->is_object() ? doc->Find("here") : nullptr;
  if (instances == nullptr || !instances->is_array() || here == nullptr || !here->is_array()) {
    return Invalid("part record: it needs the arrays \"instances\" and \"here\"");
  }
  auto str = [](const JsonValue& o, std::string_view key) -> const std::string* {
    const JsonValue* v = o.Find(key);
    return v != nullptr && v->is_string() ? &v->string_value() : nullptr;
  };
  ClusterPart part;
  for (const JsonValue& i : instances->elements()) {
    const std::string* host = i.is_object() ? str(i, "host_name") : nullptr;
    const std::string* group = i.is_object() ? str(i, "group_name") : nullptr;
    const std::string* type = i.is_object() ? str(i, "instance_type") : nullptr;
    const std::string* address = i.is_object() ? str(i, "address") : nullptr;
    if (host == nullptr || group == nullptr || type == nullptr || address == nullptr) {
      return Invalid(
          "part record: an instance without host_name, group_name, instance_type "
          "or address");
    }
    Instance in;
    in.host_name = *host;
    in.group_name = *group;
    in.instance_type = *type;
    part.instances.push_back(std::move(in));
    part.addresses.push_back(*address);
  }
  for (const JsonValue& h : here->elements()) {
    if (!h.is_string()) return Invalid("part record: \"here\" holds a value that is not a name");
    part.here.push_back(h.string_value());
  }
  return part;
}

}  // namespace kiln::local::internal
