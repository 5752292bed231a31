// What the server answers, independent of the transport: an HTTP request in,
// an HTTP response out. Authentication (SigV4), then the operation named by
// X-Amz-Target on the caller's account's engine.
//
// Internal to kiln::serve: never installed. Thread-safe (Handle may run on
// several threads at once; the engines are).
#ifndef KILN_LIB_SERVE_API_H_
#define KILN_LIB_SERVE_API_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kiln/engine.h"
#include "kiln/log_reader.h"
#include "kiln/serve/server.h"

namespace kiln::serve::internal {

struct HttpRequest {
  std::string method;
  std::string target;                                        // path and query, as sent
  std::vector<std::pair<std::string, std::string>> headers;  // as sent
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/x-amz-json-1.1";
  std::string body;
};

// The error body of the JSON protocol.
HttpResponse ErrorResponse(int status, std::string_view type, std::string_view message);

class Api {
 public:
  Api(std::vector<Account> accounts, std::map<std::string, Engine*> engines,
      std::map<std::string, const LogReader*> logs, std::string region,
      bool allow_fault_injection = false, std::function<JsonValue()> list_hosts = nullptr);

  // Whether answering `request` may take long or wait for more than a step
  // of the engine's loop: a call that changes a job (it waits for the
  // journal), FilterLogEvents (it may read every stream), Kiln's own
  // operations. Describe, List, the other Logs reads and requests refused as
  // they stand do not.
  static bool MayWait(const HttpRequest& request);

  // Answers `request` as of `now` (the server's clock, for the signature's
  // date).
  HttpResponse Handle(const HttpRequest& request, absl::Time now) const;

 private:
  // The account of a request correctly signed for `service`, or the
  // refusal.
  const Account* Authenticate(const HttpRequest& request, std::string_view service, absl::Time now,
                              HttpResponse& refusal) const;

  // Kiln's own operations (X-Amz-Target "Kiln.<op>"): `op` without the
  // prefix, on the caller's engine.
  HttpResponse HandleKiln(const HttpRequest& request, std::string_view op, Engine& engine) const;

  // The SigV4 signing key of (access key, date, region, service), derived
  // once a day rather than once a request (four HMACs). Entries are only made
  // for a known key, today's or yesterday's date (within the allowed clock
  // skew) and this server's region, so the map stays small; it is emptied
  // when it grows past a bound all the same.
  std::string SigningKey(const Account& account, std::string_view date, std::string_view region,
                         std::string_view service) const;

  std::map<std::string, Account> by_key_;
  mutable absl::Mutex signing_keys_mu_;
  mutable absl::flat_hash_map<std::string, std::string> signing_keys_
      ABSL_GUARDED_BY(signing_keys_mu_);
  std::map<std::string, Engine*> engines_;
  std::map<std::string, const LogReader*> logs_;
  std::string region_;
  bool allow_fault_injection_ = false;
  std::function<JsonValue()> list_hosts_;
};

}  // namespace kiln::serve::internal

#endif  // KILN_LIB_SERVE_API_H_
