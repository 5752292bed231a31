// The AWS backend's S3 object store: s3:// URIs served by Amazon S3 or any
// S3-compatible endpoint, so that every backend (the local one included) reads
// s3:// channels, syncs checkpoints to s3:// and uploads models to s3://.
//
//   auto options = kiln::aws::ResolveS3Options({});   // environment, ~/.aws files
//   if (!options.ok()) { /* no credentials: say so before any job starts */ }
//   auto s3 = kiln::aws::NewS3ObjectStore(*options).value();
//   kiln::ObjectStores stores;
//   stores.Register("s3", s3.get());
//
// URIs are s3://<bucket>/<key>. List(prefix) returns every object whose URI
// starts with the prefix (ListObjectsV2 with that key prefix, every page).
// Put and PutFromFile of more than `multipart_threshold` bytes use a multipart
// upload with parts of `part_size` uploaded in parallel; a failed upload is
// aborted, and readers see the old object or the new one, never a part. A
// CompleteMultipartUpload answered 200 with a retryable error in its body
// (InternalError, SlowDown) is retried like a 5xx; another error there fails
// as it would with its own status (AccessDenied: PermissionDenied). When an
// answer is lost and a retry finds the upload gone (NoSuchUpload), or every
// retry fails too, the object is checked once: the upload succeeded if its
// ETag is the multipart ETag of the parts sent (the MD5 of their MD5s). If
// not, after NoSuchUpload the Put fails with Aborted (the object at the key
// is not the one uploaded: put it again), or with Unknown for parts whose
// ETags are not MD5s (SSE-KMS: the outcome cannot be told); when the retries
// ran out it fails with Unavailable, as without the check.
// GetToFile fetches objects larger than `part_size` as parallel ranged GETs
// into a temporary file beside the target (pinned to one version with
// If-Match), renamed over it at the end. Read streams the object to its sink
// as it arrives (chunks of at most 512 KiB). Every request is signed with
// AWS Signature Version 4 (the payload hash included); throttling, 5xx
// answers and failed exchanges are retried with capped exponential backoff
// and jitter, and a GET cut off midway resumes where it stopped.
//
// Errors name the object (s3://bucket/key) and the operation: NotFound for a
// missing object or bucket; PermissionDenied for 403 (bad credentials or
// signature, access denied); Unavailable once retries are exhausted (endpoint
// down, 5xx); Aborted when an object changed during a parallel download, or
// was not the one uploaded after a lost answer (above); InvalidArgument for a
// URI that is not s3://bucket/key, and for a request S3 refused (other 4xx).
//
// Threading: the store is thread-safe (ObjectStore's contract) and blocks;
// call it from worker threads. The functions here are thread-safe.
#ifndef KILN_AWS_S3_H_
#define KILN_AWS_S3_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/object_store.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln::aws {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials only
};

enum class S3AddressingStyle {
  kAuto,     // path-style with a custom endpoint, virtual-hosted on AWS
  kPath,     // https://endpoint/bucket/key
  kVirtual,  // https://bucket.endpoint/key (path-style for bucket names with '.')
};

struct S3Options {
  // Empty or unset members are filled by ResolveS3Options, the way the AWS
  // CLI and SDKs do it; set members are kept.
  //
  // The profile of the shared files: AWS_PROFILE, else "default".
  std::string profile;
  // AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in the config file
  // (AWS_CONFIG_FILE, else ~/.aws/config), else us-east-1.
  std::string region;
  // AWS_ENDPOINT_URL_S3 (the per-service override), AWS_ENDPOINT_URL, the
  // profile's `endpoint_url`, else https://s3.<region>.amazonaws.com. Scheme,
  // host and port only: requests go to the endpoint's root (a path is refused).
  std::string endpoint_url;
  // AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the
  // profile in the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else
  // ~/.aws/credentials), else the profile in the config file.
  std::optional<AwsCredentials> credentials;
  // kAuto resolves to kPath or kVirtual; the config file's
  // `s3 = addressing_style = path|virtual` is honoured.
  S3AddressingStyle addressing_style = S3AddressingStyle::kAuto;

  // Transfers. Parts of multipart uploads and of parallel downloads; at
  // least 5 MiB (S3's minimum part), raised when an object would need more
  // than 10,000 parts.
  int64_t part_size = int64_t{8} << 20;
  // Objects above this size are uploaded in parts.
  int64_t multipart_threshold = int64_t{16} << 20;
  // Parts transferred at once, over all calls of the store.
  int32_t max_concurrency = 8;
  // Keys per ListObjectsV2 page (1..1000).
  int32_t list_page_size = 1000;

  // Retries and timeouts. Attempts per request, the first one included.
  int32_t max_attempts = 5;
  absl::Duration retry_base_delay = absl::Milliseconds(100);
  absl::Duration retry_max_delay = absl::Seconds(5);
  absl::Duration connect_timeout = absl::Seconds(10);
  // A transfer that moves no byte for this long is abandoned (and retried).
  absl::Duration stall_timeout = absl::Seconds(30);
  // Seeds the retry jitter.
  uint64_t seed = 0x6b696c6e;
};

// Fills `options` from the environment and the shared AWS files (see
// S3Options). Errors: FailedPrecondition when no credentials are found, with
// a message that says where they were looked for; InvalidArgument for a
// malformed endpoint URL, or for an access key without its secret (or the
// reverse). Reads the environment and files only when called.
absl::StatusOr<S3Options> ResolveS3Options(S3Options options);

// Returns the S3 store. `options` must be resolved (ResolveS3Options), or
// have credentials, region and endpoint set. Errors: InvalidArgument for
// missing credentials, region or endpoint, a part size under 5 MiB or more
// than 5 GiB, or max_concurrency < 1. Makes no request.
absl::StatusOr<std::unique_ptr<ObjectStore>> NewS3ObjectStore(S3Options options);

}  // namespace kiln::aws

#endif  // KILN_AWS_S3_H_
