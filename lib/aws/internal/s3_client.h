// S3Client: the S3 REST operations Kiln needs (GetObject with ranges,
// HeadObject, PutObject, multipart upload, ListObjectsV2, DeleteObject),
// signed with SigV4, over HttpClient. Throttling (429, 503 SlowDown), server
// errors (5xx) and failed exchanges are retried with capped exponential
// backoff and full jitter; a GET that fails midway resumes where it stopped,
// pinned to the same object version by If-Match.
// CompleteMultipartUpload also retries a 200 whose body is a retryable
// <Error>, and checks the object when its answer was lost (see there). An
// error in a 200's body maps as its code would with the status S3 sends it
// with (AccessDenied: PermissionDenied).
//
// Errors name the object (s3://bucket/key) and the operation; the URI and the
// server's own text (its error code and message) are shown escaped and cut
// (TextForMessage), since keys are input:
//   NotFound            NoSuchKey, NoSuchBucket, NoSuchUpload
//   PermissionDenied    403 (AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId...)
//   OutOfRange          416 (a range past the end)
//   Aborted             412 (the object changed during a read: read it again)
//   Unavailable         retries exhausted (the message has the last failure)
//   InvalidArgument     other 4xx
//
// Internal to kiln::aws: never installed. Thread-safe.
#ifndef KILN_LIB_AWS_INTERNAL_S3_CLIENT_H_
#define KILN_LIB_AWS_INTERNAL_S3_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "aws/internal/http.h"
#include "aws/internal/sigv4.h"

namespace kiln::aws::internal {

struct S3ClientOptions {
  std::string endpoint;  // scheme://host[:port], no path
  std::string region = "us-east-1";
  Credentials credentials;
  bool path_style = true;  // /bucket/key rather than bucket.host/key
  int max_attempts = 5;    // per operation, the first included
  absl::Duration retry_base_delay = absl::Milliseconds(100);
  absl::Duration retry_max_delay = absl::Seconds(5);
  uint64_t seed = 0x6b696c6e;  // the backoff jitter's generator
  HttpOptions http;
};

struct S3ObjectMeta {
  int64_t size = 0;  // of the whole object
  std::string etag;
};

struct S3ListPage {
  struct Entry {
    std::string key;
    int64_t size = 0;
  };
  std::vector<Entry> objects;  // in key order
  bool truncated = false;
  std::string next_token;  // when truncated
};

// Counts of what the client did, for tests and benchmarks.
struct S3ClientStats {
  int64_t requests = 0;
  int64_t retries = 0;
  int64_t resumed_gets = 0;
};

class S3Client {
 public:
  explicit S3Client(S3ClientOptions options);

  absl::StatusOr<S3ObjectMeta> HeadObject(std::string_view bucket, std::string_view key);

  // Streams bytes [first, last] of the object (last < 0: to the end) to
  // `sink`, resuming after a failed exchange. An empty object with first == 0
  // is read whole (S3 refuses ranges of empty objects). `if_match` (an ETag)
  // pins the version. Returns the whole object's size and ETag.
  absl::StatusOr<S3ObjectMeta> GetObject(std::string_view bucket, std::string_view key,
                                         int64_t first, int64_t last, std::string_view if_match,
                                         const BodySink& sink);

  absl::Status PutObject(std::string_view bucket, std::string_view key, std::string_view data);

  // Multipart upload: the object appears only on Complete.
  absl::StatusOr<std::string> CreateMultipartUpload(std::string_view bucket, std::string_view key);
  // Returns the part's ETag. part_number counts from 1.
  absl::StatusOr<std::string> UploadPart(std::string_view bucket, std::string_view key,
                                         std::string_view upload_id, int part_number,
                                         std::string_view data);
  // Completes the upload of the parts with these ETags (part i + 1 has
  // part_etags[i]). A 200 whose body is an <Error> is retried like a 5xx
  // when its code is retryable (InternalError, SlowDown...); otherwise it is
  // the error its code is with its usual status (AccessDenied:
  // PermissionDenied, NoSuchUpload: NotFound, InvalidPart: InvalidArgument).
  //
  // A lost answer: when an attempt got no answer (the exchange failed), it
  // may have completed the upload. Then, if a later attempt gets
  // NoSuchUpload, or the attempts run out (Unavailable), the object is
  // HEADed (CheckUploadedObject: one HeadObject, retried as any request):
  // OK when its ETag is the multipart ETag of these parts (after the attempts
  // ran out, the upload is then aborted, best effort, in case it was not the
  // one that made the object). Otherwise, after NoSuchUpload: Aborted when
  // the object is another one, or there is none (the object at the key is
  // not the one uploaded: upload again); Unknown when the part ETags are not
  // MD5s (SSE-KMS), so the outcome cannot be told; the HEAD's error (its
  // code) when the HEAD fails otherwise. After the attempts ran out it stays
  // Unavailable, with what the check found in the message (an attempt may
  // still complete the upload: abort it, then retry). NoSuchUpload on the
  // first attempt, or after attempts that were all answered, stays NotFound.
  absl::Status CompleteMultipartUpload(std::string_view bucket, std::string_view key,
                                       std::string_view upload_id,
                                       const std::vector<std::string>& part_etags);
  // Aborts an upload; one already gone (NoSuchUpload) is OK, any other error is returned.
  absl::Status AbortMultipartUpload(std::string_view bucket, std::string_view key,
                                    std::string_view upload_id);

  // One page of ListObjectsV2 (up to max_keys, at most 1000).
  absl::StatusOr<S3ListPage> ListObjectsV2(std::string_view bucket, std::string_view prefix,
                                           std::string_view continuation_token, int max_keys);

  // Creates the bucket in the client's region.
  absl::Status CreateBucket(std::string_view bucket);

  // Deleting a missing object is OK (S3 answers 204 either way; a NoSuchKey answer is taken
  // the same way). A missing bucket, or a 404 without NoSuchKey, is NotFound.
  absl::Status DeleteObject(std::string_view bucket, std::string_view key);

  S3ClientStats stats() const;
  const S3ClientOptions& options() const { return options_; }

 private:
  struct Call {
    std::string method;
    std::string bucket;
    std::string key;         // decoded; may be empty (bucket operations)
    HeaderList query;        // decoded
    HeaderList headers;      // extra headers (signed)
    std::string_view body;
    std::string what;        // "GET s3://b/k" for messages
  };

  // Vets a 2xx response: OK accepts it; Unavailable retries the call like a
  // 5xx (same attempts and backoff); another error is returned as it is.
  using ResponseCheck = absl::FunctionRef<absl::Status(const HttpResponse& response)>;

  // What Send saw besides its result.
  struct SendTrace {
    // Some attempt failed without an answer (the exchange failed: the
    // server may or may not have acted on the request).
    bool unanswered = false;
    // The S3 error code of the final answer, when it was an error ("" else).
    std::string code;
  };

  // One signed exchange (`partial`: as HttpClient::Send's).
  absl::StatusOr<HttpResponse> SendOnce(const Call& call, const BodySink* sink, bool* sink_failed,
                                        HttpResponse* partial = nullptr);
  // Sends with retries; returns a 2xx response (that `check`, if any,
  // accepted) or the final error. `trace`, if any, is filled in.
  absl::StatusOr<HttpResponse> Send(const Call& call, const ResponseCheck* check = nullptr,
                                    SendTrace* trace = nullptr);
  absl::Duration Backoff(int attempt);
  // Whether the object at the key is the one a multipart upload of parts
  // with these ETags makes (its ETag is their MultipartEtag): OK when it is;
  // Aborted when it is another one, or there is none; Unknown when the part
  // ETags are not MD5s; the HEAD's error when it fails. Messages say what was
  // found, without the operation's name.
  absl::Status CheckUploadedObject(std::string_view bucket, std::string_view key,
                                   const std::vector<std::string>& part_etags);

  const S3ClientOptions options_;
  std::string scheme_;     // "http" or "https"
  std::string authority_;  // host[:port]
  HttpClient http_;
  mutable absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> resumed_gets_{0};
};

// The ETag S3 gives the object a multipart upload of parts with these ETags
// makes: hex(MD5(the parts' binary MD5s, concatenated)) + "-" + the part
// count, without quotes. "" when there is no part, or a part's ETag (quotes
// allowed) is not an MD5 of 32 hex digits (SSE-KMS, SSE-C).
std::string MultipartEtag(const std::vector<std::string>& part_etags);

// Whether an S3 error response or HTTP status is worth retrying.
bool IsRetryableS3Error(int http_status, std::string_view code);

// The text of the first <tag>...</tag> in `xml`, entities decoded; "" when
// absent.
std::string XmlText(std::string_view xml, std::string_view tag);
// The raw inner text of every <tag>...</tag> in `xml`, in order.
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag);
// Replaces &amp; &lt; &gt; &quot; &apos; &#N; &#xN;.
std::string XmlUnescape(std::string_view s);
// Escapes & < > " ' for element text.
std::string XmlEscape(std::string_view s);

}  // namespace kiln::aws::internal

#endif  // KILN_LIB_AWS_INTERNAL_S3_CLIENT_H_
