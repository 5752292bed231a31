// Links every Kiln component through the installed headers: runs a job on the
// simulated backend in virtual time, parses a document with the plugin kit's
// JSON value, resolves S3 options and links the local backend.
// consumer_test.cmake checks what it prints.
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kiln/aws/s3.h"
#include "kiln/clock.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/plugin/json_value.h"
#include "kiln/sim/sim.h"

int main() {
  absl::StatusOr<kiln::JsonValue> doc = kiln::ParseJsonValue(R"({"backends": ["sim", "local"]})");
  std::cout << "plugin kit: " << (doc.ok() ? kiln::WriteJson(*doc) : doc.status().ToString())
            << "\n";

  std::unique_ptr<kiln::EventLoop> loop = kiln::NewVirtualEventLoop();
  std::unique_ptr<kiln::sim::SimClusterProvider> sim = kiln::sim::NewSimClusterProvider(*loop);
  std::cout << "sim: " << (sim != nullptr ? "provider made" : "no provider") << "\n";

  // Linked, not run: the local backend wants a state directory of its own.
  auto* const new_local_provider = &kiln::local::NewLocalClusterProvider;
  std::cout << "local: " << (new_local_provider != nullptr ? "linked" : "missing") << "\n";

  kiln::aws::S3Options options;
  options.region = "eu-west-1";
  options.endpoint_url = "http://127.0.0.1:9";
  kiln::aws::AwsCredentials credentials;
  credentials.access_key_id = "AKIDEXAMPLE";
  credentials.secret_access_key = "secret";
  options.credentials = credentials;
  absl::StatusOr<kiln::aws::S3Options> resolved = kiln::aws::ResolveS3Options(options);
  std::cout << "aws: " << (resolved.ok() ? resolved->region : resolved.status().ToString())
            << "\n";
  return 0;
}
