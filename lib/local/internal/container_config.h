// What a local container is given: the three config files of
// /opt/ml/input/config and its environment (the platform's variables, the
// job's Environment map and every SM_* variable the SageMaker training toolkit
// derives, with the toolkit's encodings).
//
// The toolkit (sagemaker-training-toolkit, environment.py and mapping.py)
// JSON-decodes each hyperparameter, falling back to the raw string, and writes
// each SM_* value as the raw string for strings, "" for None, and otherwise
// json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).
// PyJsonDumps, PyStr and PyRepr reproduce Python's output for JSON-decoded
// values, floats included (repr's shortest round-trip digits).
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_INTERNAL_CONTAINER_CONFIG_H_
#define KILN_LIB_LOCAL_INTERNAL_CONTAINER_CONFIG_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kiln/cluster_provider.h"
#include "kiln/plugin/json_value.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln::local::internal {

using kiln::JsonValue;

// json.loads(raw), or the raw string when it is not JSON (as the toolkit does).
JsonValue DecodeHyperparameter(std::string_view raw);

// json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).
std::string PyJsonDumps(const JsonValue& value);
// str(value) and repr(value) of the Python object json.loads would give.
std::string PyStr(const JsonValue& value);
std::string PyRepr(const JsonValue& value);
// repr(float(d)): "0.1", "1e+16", "100.0", "1e-05", "inf", "nan".
std::string PyFloatRepr(double d);
// The toolkit's value encoding for an environment variable (see above).
std::string ToEnvValue(const JsonValue& value);

struct ContainerConfigInput {
  const v1::CreateTrainingJobRequest* request = nullptr;
  std::string job_name;
  std::string job_arn;
  const Cluster* cluster = nullptr;
  const Instance* instance = nullptr;
  // SAGEMAKER_BASE_DIR as the container sees it ("/opt/ml" in a sandbox, the
  // instance tree for the process runtime): every SM_* path is below it.
  std::string base_dir;
  // The image's program directory as the container sees it (put first on
  // PATH).
  std::string program_dir;
  std::string tmp_dir;  // TMPDIR
  int cpu_count = 1;
  std::string network_interface_name = "lo";
  std::string host_path;  // the rest of PATH
  std::string home;       // HOME
};

struct ContainerConfig {
  std::string hyperparameters_json;
  std::string inputdataconfig_json;
  std::string resourceconfig_json;
  // The hosts(5) file of a part of a cluster that spans hosts, "" for none
  // (set by the provider, not by BuildContainerConfig).
  std::string hosts;
  // The channels this instance receives (InstanceGroupNames), sorted.
  std::vector<std::string> channels;
  // The complete environment of the entrypoint.
  std::map<std::string, std::string> env;
};

// Builds the files and environment of `in.instance`'s container.
// REQUIRES: request, cluster and instance are set; instance is in cluster.
ContainerConfig BuildContainerConfig(const ContainerConfigInput& in);

// Writes hyperparameters.json, inputdataconfig.json and resourceconfig.json
// of `config`, and `hosts` when it is not empty, into the directory `dir`,
// each through a temporary file renamed over it (internal::WriteFileAtomic).
// Errors: as ErrnoStatus, naming the config file (never its temporary file)
// and the system's reason; ResourceExhausted when the disk is full. A failed write leaves no
// temporary file; the files written before it stay.
absl::Status WriteConfigFiles(const ContainerConfig& config, const std::string& dir);

// The region of an ARN ("arn:aws:sagemaker:us-west-2:..." -> "us-west-2"),
// empty when there is none.
std::string RegionOfArn(std::string_view arn);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_CONTAINER_CONFIG_H_
