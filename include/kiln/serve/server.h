// The SageMaker Training API over HTTP: a server that answers what boto3, the
// aws CLI and the SageMaker SDK send to SageMaker (botocore's model: the JSON
// 1.1 protocol, POST /, X-Amz-Target "SageMaker.<Operation>", requests signed
// with AWS Signature Version 4), driving Kiln engines. `kiln serve` is this
// server with the local backend.
//
//   kiln::serve::ServerOptions options;
//   options.accounts = kiln::serve::ReadCredentialsFile("keys").value();
//   options.engines["123456789012"] = engine.get();
//   auto server = kiln::serve::StartServer(std::move(options)).value();
//   // ... server->port() ...
//   server->Shutdown();
//
// Operations: CreateTrainingJob, DescribeTrainingJob, ListTrainingJobs,
// StopTrainingJob, UpdateTrainingJob, DeleteTrainingJob, with the service's
// JSON and errors ({"__type": "ValidationException", "message": ...}, with
// the HTTP status kiln/service_error.h gives). Another operation:
// UnknownOperationException.
//
// Logs: CloudWatch Logs' read API (X-Amz-Target "Logs_20140328.<Operation>",
// signed for service "logs") on the log group /aws/sagemaker/TrainingJobs of
// the caller's account (`logs`): DescribeLogStreams (by name or by last event
// time, with a name prefix, pages of up to 50), GetLogEvents (forward from the
// head or back from the end, within startTime/endTime, pages of up to 10,000
// events or 1 MiB, with the service's f/ and b/ tokens: a forward read that
// finds nothing new gives back its token) and FilterLogEvents (events of
// several streams in time order, by names or a name prefix, with a filter
// pattern of terms: words or "quoted phrases" that must all appear, ?terms of
// which one must, -terms that must not; JSON, space-delimited and regular-
// expression patterns are refused with InvalidParameterException). Another
// log group, or a stream that does not exist: ResourceNotFoundException.
//
// Kiln.ListHosts, only with `list_hosts` set: body {} (any member is a
// ValidationException naming it); answers what `list_hosts` gives, to every
// account (hosts are shared by the server's accounts).
//
// Kiln's own operation, only when `allow_fault_injection` is set (otherwise,
// and for any other "Kiln." target, UnknownOperationException): X-Amz-Target
// "Kiln.InjectSpotInterruption", body {"TrainingJobName": "NAME", "Host":
// "algo-K", "NoticeInSeconds": N}, signed and account-scoped as every call.
// It gives instance Host (default algo-1) of a running spot job a spot
// interruption notice N seconds (0 to 3600, default 120) before the instance
// is taken back, as the platform does (Engine::InjectInterruption): the job
// shows SecondaryStatus Interrupted, its containers get SIGTERM and sync
// their checkpoints, and a new attempt resumes from them. Answers {} (200);
// errors, each naming the field: ValidationException for a body without
// TrainingJobName or with another field, a job that is not InProgress, one
// without EnableManagedSpotTraining, a Host the job does not have, or a job
// that holds no instances yet; ResourceNotFound for a job the caller's
// account does not have (also another account's).
//
// Authentication: every request must carry a SigV4 Authorization header
// signed by a key of `accounts`, for service "sagemaker" ("logs" for the
// Logs operations) and the server's region, dated within 5 minutes of the
// server's clock, over the whole body.
// Refusals, before the body is parsed (HTTP 400, as the service's JSON
// protocol sends them): MissingAuthenticationTokenException (no
// Authorization), UnrecognizedClientException (a key the server does not
// have), InvalidSignatureException (a signature that does not match, or a
// date too far off: "Signature expired"), IncompleteSignatureException (an
// Authorization header that is not SigV4's).
//
// Isolation: each account has its own engine (`engines`): a caller sees,
// stops, updates and deletes only its account's jobs, and a name is unique
// per account, as on the service.
//
// TLS: with a certificate and its key (ServerOptions::tls_certificate_file),
// every connection is HTTPS (TLS 1.2 or later) and plain HTTP is refused. A
// connection whose handshake fails (a client that does not trust the
// certificate, plain HTTP, no handshake within `request_timeout`) is closed;
// the server goes on.
//
// Limits: a body over `max_body_bytes` is refused (413) without being read
// whole; a request that has not arrived whole within `request_timeout` closes
// its connection; waiting clients hold no thread.
//
// Threading: StartServer and Shutdown from any thread; the server runs on
// threads of its own.
#ifndef KILN_SERVE_SERVER_H_
#define KILN_SERVE_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/engine.h"
#include "kiln/log_reader.h"
#include "kiln/plugin/json_value.h"

namespace kiln::serve {

// A key that may call the server, and the account whose jobs it reaches.
struct Account {
  std::string access_key_id;
  std::string secret_access_key;
  std::string account_id;  // 12 digits
};

// Reads a credentials file: one key a line, "ACCESS_KEY_ID SECRET_ACCESS_KEY
// ACCOUNT_ID" separated by spaces or tabs; '#' starts a comment; blank lines
// are skipped. Errors: NotFound / PermissionDenied naming the file;
// InvalidArgument naming the file and the line ("keys:3: ...") for a line
// that is not three fields, an account id that is not 12 digits, or a key id
// given twice.
absl::StatusOr<std::vector<Account>> ReadCredentialsFile(const std::string& path);

struct ServerOptions {
  // Where to listen: an IPv4 or IPv6 address (loopback by default) and a
  // port (0: a free one, see Server::port).
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  // The keys that may call, and each account's engine (every account of
  // `accounts` must have one; each engine's EngineOptions::account_id should
  // be its account, for its ARNs). The engines must outlive the server.
  std::vector<Account> accounts;
  std::map<std::string, Engine*> engines;
  // Each account's training logs, for CloudWatch Logs' read API (optional:
  // an account without one has no log group). The readers must outlive the
  // server.
  std::map<std::string, const LogReader*> logs;
  // The region requests are signed for.
  std::string region = "us-east-1";
  // The largest body accepted.
  size_t max_body_bytes = size_t{8} << 20;
  // How long a request may take to arrive whole, and how long an idle
  // connection is kept.
  absl::Duration request_timeout = absl::Seconds(30);
  // Threads that read and write connections, and threads that call the
  // engines (CreateTrainingJob may wait for the journal).
  int io_threads = 2;
  int worker_threads = 4;
  // Whether Kiln.InjectSpotInterruption is answered (see above); off, it is
  // an unknown operation. For tests and chaos drills, never for a server
  // whose callers should not be able to interrupt their own jobs.
  bool allow_fault_injection = false;
  // HTTPS: the server's certificate (PEM, the server's first, then any
  // intermediates) and its private key (PEM, not encrypted). Both or
  // neither; neither: plain HTTP.
  std::string tls_certificate_file;
  std::string tls_private_key_file;
  // Optional: the hosts whose agents joined this server's controller
  // (`kiln serve --agents`), for Kiln.ListHosts (see above): the response's
  // JSON object, {"Hosts": [...]}. Called on the server's threads, maybe
  // several at once. Unset: Kiln.ListHosts is an unknown operation.
  std::function<JsonValue()> list_hosts;
};

class Server {
 public:
  virtual ~Server() = default;  // Shutdown, if not done
  // The port it listens on.
  virtual uint16_t port() const = 0;
  // Stops accepting, lets requests in flight finish, closes the connections
  // and returns. Idempotent.
  virtual void Shutdown() = 0;
};

// Starts a server. Errors: InvalidArgument naming the option (no account, an
// account without an engine, a host that is not an address, one of the two
// TLS files without the other, a TLS file that is not PEM, a key that is not
// the certificate's); NotFound or PermissionDenied naming a TLS file that
// cannot be read; the system's error when the address cannot be bound (e.g.
// in use).
absl::StatusOr<std::unique_ptr<Server>> StartServer(ServerOptions options);

}  // namespace kiln::serve

#endif  // KILN_SERVE_SERVER_H_
