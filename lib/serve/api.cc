// The server's answers (api.h).
#include "serve/api.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/civil_time.h"
#include "aws/internal/sigv4.h"
#include "kiln/json.h"
#include "kiln/plugin/json_value.h"
#include "kiln/service_error.h"
#include "kiln/v1/sagemaker.pb.h"
#include "serve/logs_api.h"

namespace kiln::serve::internal {
namespace {

namespace sig = ::kiln::aws::internal;

constexpr char kTargetPrefix[] = "SageMaker.";
constexpr char kKilnTargetPrefix[] = "Kiln.";
constexpr char kService[] = "sagemaker";
constexpr absl::Duration kMaxSkew = absl::Minutes(5);

// JSON string contents for `text` (quotes, backslashes and control
// characters escaped).
std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
  return out;
}

// absl's string_view for std's (Debian's Abseil has its own type).
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

std::string_view Header(const HttpRequest& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (absl::EqualsIgnoreCase(k, Av(name))) return v;
  }
  return {};
}

// The parts of "AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=a;b, Signature=hex".
struct Authorization {
  std::string key_id, date, region, service;
  std::vector<std::string> signed_headers;
  std::string signature;
};

bool ParseAuthorization(std::string_view header, Authorization& out) {
  absl::string_view text = Av(header);
  if (!absl::ConsumePrefix(&text, "AWS4-HMAC-SHA256 ")) return false;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, "Credential=")) {
      const std::vector<std::string> scope = absl::StrSplit(part, '/');
      if (scope.size() != 5 || scope[4] != "aws4_request") return false;
      out.key_id = scope[0];
      out.date = scope[1];
      out.region = scope[2];
      out.service = scope[3];
    } else if (absl::ConsumePrefix(&part, "SignedHeaders=")) {
      out.signed_headers = absl::StrSplit(part, ';');
    } else if (absl::ConsumePrefix(&part, "Signature=")) {
      out.signature = std::string(part);
    }
  }
  return !out.key_id.empty() && !out.signed_headers.empty() && !out.signature.empty();
}

// "20150830T123600Z" as a time; false when it is not one.
bool ParseAmzDate(std::string_view text, absl::Time& out) {
  if (text.size() != 16 || text[8] != 'T' || text[15] != 'Z') return false;
  int v[6];
  const int at[6] = {0, 4, 6, 9, 11, 13};
  const int len[6] = {4, 2, 2, 2, 2, 2};
  for (int i = 0; i < 6; ++i) {
    if (!absl::SimpleAtoi(Av(text.substr(at[i], len[i])), &v[i])) return false;
  }
  const absl::CivilSecond civil(v[0], v[1], v[2], v[3], v[4], v[5]);
  if (civil.year() != v[0] || civil.month() != v[1] || civil.day() != v[2] ||
      civil.hour() != v[3] || civil.minute() != v[4] || civil.second() != v[5]) {
    return false;  // (not a real date: the civil time normalised it)
  }
  out = absl::FromCivil(civil, absl::UTCTimeZone());
  return true;
}

// The query of a request target, decoded ("a=1&b=2").
std::vector<std::pair<std::string, std::string>> QueryOf(std::string_view target) {
  std::vector<std::pair<std::string, std::string>> query;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return query;
  for (absl::string_view kv : absl::StrSplit(Av(target.substr(q + 1)), '&', absl::SkipEmpty())) {
    const size_t eq = kv.find('=');
    query.emplace_back(sig::UriDecode(Sv(kv.substr(0, eq))),
                       eq == absl::string_view::npos ? "" : sig::UriDecode(Sv(kv.substr(eq + 1))));
  }
  return query;
}

HttpResponse Json(const google::protobuf::Message& message) {
  HttpResponse r;
  r.body = ToJson(message);
  return r;
}

HttpResponse Failure(std::string_view operation, const absl::Status& status) {
  const ServiceError e = ToServiceError(operation, status);
  return ErrorResponse(e.http_status, e.code, Sv(status.message()));
}

// Parses the body into `request`; the refusal on failure.
template <typename Request>
bool Parse(const HttpRequest& http, std::string_view operation, Request& request,
           HttpResponse& refusal) {
  absl::Status s = ParseJson(http.body.empty() ? std::string_view("{}") : http.body, request);
  if (s.ok()) return true;
  refusal = Failure(operation, s);
  return false;
}

template <typename Request, typename Fn>
HttpResponse Call(const HttpRequest& http, std::string_view operation, Fn call) {
  Request request;
  HttpResponse refusal;
  if (!Parse(http, operation, request, refusal)) return refusal;
  return call(request);
}

}  // namespace

HttpResponse ErrorResponse(int status, std::string_view type, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = absl::StrCat("{\"__type\":\"", JsonEscape(type), "\",\"message\":\"",
                        JsonEscape(message), "\"}");
  return r;
}

Api::Api(std::vector<Account> accounts, std::map<std::string, Engine*> engines,
         std::map<std::string, const LogReader*> logs, std::string region,
         bool allow_fault_injection, std::function<JsonValue()> list_hosts)
    : engines_(std::move(engines)),
      logs_(std::move(logs)),
      region_(std::move(region)),
      allow_fault_injection_(allow_fault_injection),
      list_hosts_(std::move(list_hosts)) {
  for (Account& a : accounts) {
    std::string key = a.access_key_id;
    by_key_.emplace(std::move(key), std::move(a));
  }
}

const Account* Api::Authenticate(const HttpRequest& request, std::string_view service,
                                 absl::Time now, HttpResponse& refusal) const {
  const std::string_view authorization = Header(request, "Authorization");
  if (authorization.empty()) {
    refusal =
        ErrorResponse(400, "MissingAuthenticationTokenException", "Missing Authentication Token");
    return nullptr;
  }
  Authorization auth;
  if (!ParseAuthorization(authorization, auth)) {
    refusal =
        ErrorResponse(400, "IncompleteSignatureException",
                      "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' "
                      "parameters of the AWS4-HMAC-SHA256 algorithm");
    return nullptr;
  }
  auto it = by_key_.find(auth.key_id);
  if (it == by_key_.end()) {
    refusal = ErrorResponse(400, "UnrecognizedClientException",
                            "The security token included in the request is invalid.");
    return nullptr;
  }
  const std::string_view amz_date = Header(request, "X-Amz-Date");
  absl::Time signed_at;
  if (!ParseAmzDate(amz_date, signed_at) || amz_date.substr(0, 8) != auth.date) {
    refusal = ErrorResponse(400, "IncompleteSignatureException",
                            "The request must carry an X-Amz-Date header (YYYYMMDDTHHMMSSZ) "
                            "of the day its credential scope names");
    return nullptr;
  }
  if (signed_at < now - kMaxSkew || signed_at > now + kMaxSkew) {
    const std::string now_text = sig::AmzDate(now);
    refusal = ErrorResponse(
        400, "InvalidSignatureException",
        signed_at < now
            ? absl::StrCat("Signature expired: ", Av(amz_date), " is now earlier than ",
                           sig::AmzDate(now - kMaxSkew), " (", now_text, " - 5 min.)")
            : absl::StrCat("Signature not yet current: ", Av(amz_date), " is still later than ",
                           sig::AmzDate(now + kMaxSkew), " (", now_text, " + 5 min.)"));
    return nullptr;
  }
  if (auth.service != service || auth.region != region_) {
    refusal = ErrorResponse(
        400, "InvalidSignatureException",
        absl::StrCat("Credential should be scoped to a valid region and service: '", region_, "/",
                     Av(service), "', not '", auth.region, "/", auth.service, "'"));
    return nullptr;
  }
  // The request as the client signed it: the headers it names, the whole
  // body.
  sig::SigV4Request sr;
  sr.method = request.method;
  const std::string_view target = request.target;
  sr.canonical_uri = sig::NormalizedCanonicalUri(
      sig::UriDecode(target.substr(0, std::min(target.find('?'), target.size()))));
  sr.query = QueryOf(target);
  for (const std::string& name : auth.signed_headers) {
    bool found = false;
    for (const auto& [k, v] : request.headers) {
      if (absl::EqualsIgnoreCase(k, name)) {
        sr.headers.emplace_back(k, v);
        found = true;
      }
    }
    if (!found) sr.headers.emplace_back(name, "");
  }
  sr.payload_hash = sig::Sha256Hex(request.body);
  const Account& account = it->second;
  const sig::SigV4Result expected =
      sig::SignV4WithKey(sr, account.access_key_id,
                         SigningKey(account, auth.date, auth.region, auth.service), auth.region,
                         auth.service, amz_date);
  if (expected.signature.size() != auth.signature.size() ||
      CRYPTO_memcmp(expected.signature.data(), auth.signature.data(), auth.signature.size()) != 0) {
    refusal = ErrorResponse(
        400, "InvalidSignatureException",
        "The request signature we calculated does not match the signature you provided. Check "
        "your AWS Secret Access Key and signing method. Consult the service documentation for "
        "details.");
    return nullptr;
  }
  return &account;
}

std::string Api::SigningKey(const Account& account, std::string_view date,
                            std::string_view region, std::string_view service) const {
  constexpr size_t kMaxSigningKeys = 1024;
  std::string id = absl::StrCat(account.access_key_id, "/", Av(date), "/", Av(region), "/",
                                Av(service));
  {
    absl::ReaderMutexLock lock(&signing_keys_mu_);
    if (auto it = signing_keys_.find(id); it != signing_keys_.end()) return it->second;
  }
  std::string key = sig::SigningKey(account.secret_access_key, date, region, service);
  absl::MutexLock lock(&signing_keys_mu_);
  if (signing_keys_.size() >= kMaxSigningKeys) signing_keys_.clear();
  signing_keys_.emplace(std::move(id), key);
  return key;
}

bool Api::MayWait(const HttpRequest& request) {
  absl::string_view target = Av(Header(request, "X-Amz-Target"));
  // (FilterLogEvents may read every stream of the group.)
  if (absl::ConsumePrefix(&target, kLogsTargetPrefix)) return target == "FilterLogEvents";
  if (absl::ConsumePrefix(&target, kTargetPrefix)) {
    return target != "DescribeTrainingJob" && target != "ListTrainingJobs";
  }
  return absl::StartsWith(target, kKilnTargetPrefix);
}

HttpResponse Api::Handle(const HttpRequest& request, absl::Time now) const {
  absl::string_view target = Av(Header(request, "X-Amz-Target"));
  const bool logs = absl::ConsumePrefix(&target, kLogsTargetPrefix);
  HttpResponse refusal;
  const Account* account = Authenticate(request, logs ? kLogsService : kService, now, refusal);
  if (account == nullptr) return refusal;
  if (request.method == "POST" && logs) {
    const auto reader = logs_.find(account->account_id);
    return HandleLogs(Sv(target), request.body, reader == logs_.end() ? nullptr : reader->second,
                      region_, account->account_id);
  }
  const bool kiln_op = absl::ConsumePrefix(&target, kKilnTargetPrefix);
  if (request.method != "POST" || (!kiln_op && !absl::ConsumePrefix(&target, kTargetPrefix))) {
    return ErrorResponse(400, "UnknownOperationException", "");
  }
  auto engine_it = engines_.find(account->account_id);
  if (engine_it == engines_.end()) {
    return ErrorResponse(500, "InternalFailure", "no engine serves this account");
  }
  Engine& engine = *engine_it->second;
  if (kiln_op) return HandleKiln(request, Sv(target), engine);
  const std::string_view op = Sv(target);
  if (op == "CreateTrainingJob") {
    return Call<v1::CreateTrainingJobRequest>(request, op, [&](const auto& r) {
      auto out = engine.CreateTrainingJob(r);
      return out.ok() ? Json(*out) : Failure(op, out.status());
    });
  }
  if (op == "DescribeTrainingJob") {
    return Call<v1::DescribeTrainingJobRequest>(request, op, [&](const auto& r) {
      auto out = engine.DescribeTrainingJob(r);
      return out.ok() ? Json(*out) : Failure(op, out.status());
    });
  }
  if (op == "ListTrainingJobs") {
    return Call<v1::ListTrainingJobsRequest>(request, op, [&](const auto& r) {
      auto out = engine.ListTrainingJobs(r);
      return out.ok() ? Json(*out) : Failure(op, out.status());
    });
  }
  if (op == "StopTrainingJob") {
    return Call<v1::StopTrainingJobRequest>(request, op, [&](const auto& r) {
      absl::Status s = engine.StopTrainingJob(r);
      return s.ok() ? HttpResponse{200, "application/x-amz-json-1.1", "{}"} : Failure(op, s);
    });
  }
  if (op == "UpdateTrainingJob") {
    return Call<v1::UpdateTrainingJobRequest>(request, op, [&](const auto& r) {
      auto out = engine.UpdateTrainingJob(r);
      return out.ok() ? Json(*out) : Failure(op, out.status());
    });
  }
  if (op == "DeleteTrainingJob") {
    return Call<v1::DeleteTrainingJobRequest>(request, op, [&](const auto& r) {
      absl::Status s = engine.DeleteTrainingJob(r);
      return s.ok() ? HttpResponse{200, "application/x-amz-json-1.1", "{}"} : Failure(op, s);
    });
  }
  return ErrorResponse(400, "UnknownOperationException", "");
}

// --- Kiln's own operations (server.h)

namespace {

// The body of InjectSpotInterruption: {"TrainingJobName": ..., "Host": ...,
// "NoticeInSeconds": ...}, with the JSON protocol's wording for what is wrong.
struct InjectRequest {
  std::string job_name;
  std::string host = "algo-1";
  int64_t notice_seconds = 120;
};

absl::Status ParseInjectRequest(std::string_view body, InjectRequest& out) {
  absl::StatusOr<JsonValue> doc = ParseJsonValue(body.empty() ? std::string_view("{}") : body);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Invalid JSON: ", doc.status().message()));
  }
  if (!doc->is_object()) {
    return absl::InvalidArgumentError("Invalid JSON: the body must be an object");
  }
  bool named = false;
  for (const auto& [key, value] : doc->members()) {
    if (key == "TrainingJobName" || key == "Host") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Invalid type for parameter ", key, ", value type: ", Av(JsonKindName(value.kind())),
            ", valid types: string"));
      }
      if (key == "Host") {
        out.host = value.string_value();
      } else {
        out.job_name = value.string_value();
        named = true;
      }
    } else if (key == "NoticeInSeconds") {
      absl::StatusOr<int64_t> n = value.AsInt64();
      if (!n.ok() || *n < 0 || *n > 3600) {
        return absl::InvalidArgumentError(
            "Invalid value for parameter NoticeInSeconds: a whole number of seconds from 0 to "
            "3600");
      }
      out.notice_seconds = *n;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("Unknown parameter in input: \"", InputForMessage(key),
                       "\", must be one of: TrainingJobName, Host, NoticeInSeconds"));
    }
  }
  if (!named || out.job_name.empty()) {
    return absl::InvalidArgumentError("Missing required parameter in input: \"TrainingJobName\"");
  }
  return absl::OkStatus();
}

// A body with no members ({} or nothing), as ListHosts takes.
absl::Status ParseEmptyRequest(std::string_view body) {
  absl::StatusOr<JsonValue> doc = ParseJsonValue(body.empty() ? std::string_view("{}") : body);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Invalid JSON: ", doc.status().message()));
  }
  if (!doc->is_object()) {
    return absl::InvalidArgumentError("Invalid JSON: the body must be an object");
  }
  if (!doc->members().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Unknown parameter in input: \"",
                                                   InputForMessage(doc->members().front().first),
                                                   "\", this operation takes none"));
  }
  return absl::OkStatus();
}

absl::Status InjectSpotInterruption(Engine& engine, const InjectRequest& r) {
  v1::DescribeTrainingJobRequest describe;
  describe.set_training_job_name(r.job_name);
  absl::StatusOr<v1::DescribeTrainingJobResponse> d = engine.DescribeTrainingJob(describe);
  if (!d.ok()) return d.status();  // (NotFound: ResourceNotFound, as StopTrainingJob answers)
  const std::string shown = InputForMessage(r.job_name);
  if (!d->enable_managed_spot_training()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainingJobName: training job '", shown,
                     "' is not a spot job (EnableManagedSpotTraining is not set)"));
  }
  if (d->training_job_status() != "InProgress") {
    return absl::FailedPreconditionError(absl::StrCat("TrainingJobName: training job '", shown,
                                                      "' is not running (status ",
                                                      d->training_job_status(), ")"));
  }
  absl::Status s = engine.InjectInterruption(r.job_name, r.host, InterruptionKind::kSpotNotice,
                                             absl::Seconds(r.notice_seconds));
  if (absl::IsNotFound(s)) {
    // The job was there a moment ago: the host is what is not.
    return absl::InvalidArgumentError(absl::StrCat("Host: ", s.message()));
  }
  if (absl::IsFailedPrecondition(s)) {
    return absl::FailedPreconditionError(absl::StrCat("TrainingJobName: ", s.message()));
  }
  return s;
}

}  // namespace

HttpResponse Api::HandleKiln(const HttpRequest& request, std::string_view op,
                             Engine& engine) const {
  if (op == "InjectSpotInterruption" && allow_fault_injection_) {
    InjectRequest r;
    absl::Status s = ParseInjectRequest(request.body, r);
    if (s.ok()) s = InjectSpotInterruption(engine, r);
    return s.ok() ? HttpResponse{200, "application/x-amz-json-1.1", "{}"} : Failure(op, s);
  }
  if (op == "ListHosts" && list_hosts_) {
    absl::Status s = ParseEmptyRequest(request.body);
    if (!s.ok()) return Failure(op, s);
    return HttpResponse{200, "application/x-amz-json-1.1", WriteJson(list_hosts_())};
  }
  return ErrorResponse(400, "UnknownOperationException", "");
}

}  // namespace kiln::serve::internal
