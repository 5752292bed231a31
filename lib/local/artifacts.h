// Artifacts: a job's /opt/ml/model and /opt/ml/output/data, merged over its
// instances and uploaded through the object stores, as the service does it:
// <base>/model.tar.gz (or, uncompressed, each file below <base>/model/) and
// <base>/output.tar.gz.
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_ARTIFACTS_H_
#define KILN_LIB_LOCAL_ARTIFACTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/cluster_provider.h"
#include "kiln/object_store.h"
#include "local/internal/archive.h"
#include "local/log_stream.h"

namespace kiln::local::internal {

// One instance's part of the upload.
struct ArtifactsSource {
  std::string instance_dir;  // trusted: the trees are read below it by descriptor
  std::string host;          // algo-<k>, for messages
  std::shared_ptr<RunLog> log;  // its last run's log stream (what is left out is said there)
};

struct ArtifactsPlan {
  std::vector<ArtifactsSource> instances;  // later hosts overwrite files of the same name
  // <S3OutputPath>/<job>/output; `compress_model` false: CompressionType NONE.
  std::string base_uri;
  bool compress_model = true;
  // Scratch archives are <scratch_base>-model and <scratch_base>-output,
  // locked while they exist (state_dir.h).
  std::string scratch_base;
};

// The output prefix of a job: <S3OutputPath>/<job>/output.
std::string ArtifactsBaseUri(std::string_view s3_output_path, std::string_view job_name);

// Uploads the model and the output of `plan` through `stores`. Errors: the
// store's, naming the object; FailedPrecondition naming the tree (e.g.
// "algo-1:/opt/ml/model") when a container replaced it, or a directory on
// the way, by a link or a file. Blocking.
absl::StatusOr<ArtifactsResult> UploadArtifacts(ObjectStores& stores, const ArtifactsPlan& plan);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_ARTIFACTS_H_
