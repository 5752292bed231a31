// HttpClient: HTTP/1.1 requests over libcurl with a pool of reusable easy
// handles (each keeps its connections alive, so consecutive requests to the
// same endpoint reuse a connection), connect and stall timeouts, in-memory
// request bodies and streamed response bodies.
//
// Internal to kiln::aws: never installed. Thread-safe: any number of threads
// may call Send at once; each call takes a handle of its own.
#ifndef KILN_LIB_AWS_INTERNAL_HTTP_H_
#define KILN_LIB_AWS_INTERNAL_HTTP_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "aws/internal/sigv4.h"

namespace kiln::aws::internal {

struct HttpOptions {
  // Time to establish a TCP (and TLS) connection.
  absl::Duration connect_timeout = absl::Seconds(10);
  // A transfer that moves no byte for this long is abandoned (Unavailable).
  absl::Duration stall_timeout = absl::Seconds(30);
  // Bound on a whole request without a body sink (0: none). Requests that
  // stream a body are bounded by the stall timeout only.
  absl::Duration request_timeout = absl::Minutes(5);
  // libcurl's receive buffer: the largest chunk a body sink gets.
  int32_t receive_buffer = 512 * 1024;
  // HTTPS: a PEM file of the certificates to trust instead of the system's
  // ("": the system's).
  std::string ca_bundle;
};

struct HttpRequest {
  std::string method;   // GET, HEAD, PUT, POST, DELETE
  std::string url;      // absolute, already percent-encoded
  HeaderList headers;   // sent as given (a Host header replaces libcurl's)
  std::string_view body;  // PUT and POST: sent with Content-Length; must outlive Send
};

struct HttpResponse {
  int status = 0;
  HeaderList headers;  // names in lower case, in order
  std::string body;    // the body, unless a sink took it
  // The first header of that name (lower case), or "".
  std::string Header(std::string_view name) const;
};

// Receives a 2xx response's body in order, in chunks of at most
// HttpOptions::receive_buffer bytes. A non-OK status stops the transfer.
using BodySink = absl::FunctionRef<absl::Status(std::string_view chunk)>;

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `request` and returns the response, whatever its status. With
  // `sink`, a 2xx response's body goes to the sink instead of
  // HttpResponse::body (other statuses keep their body, up to 64 KiB).
  // Errors: Unavailable when the exchange fails (connection refused or
  // reset, timeout, truncated body: retrying may help; the message is
  // libcurl's); when the sink fails, its status, and `*sink_failed` is set.
  // With `partial`, a failed exchange leaves there what had arrived of the
  // response: its status and headers (e.g. the ETag of a body cut midway).
  // The request's URL path is sent as it is (no removal of "." and ".."
  // segments: they are part of an S3 key, and of what was signed).
  absl::StatusOr<HttpResponse> Send(const HttpRequest& request, const BodySink* sink = nullptr,
                                    bool* sink_failed = nullptr, HttpResponse* partial = nullptr);

 private:
  void* Acquire();
  void Release(void* handle);

  const HttpOptions options_;
  absl::Mutex mu_;
  std::vector<void*> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::aws::internal

#endif  // KILN_LIB_AWS_INTERNAL_HTTP_H_
