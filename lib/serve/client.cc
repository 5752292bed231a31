// The client of the API over HTTP (kiln/serve/client.h): libcurl through
// kiln::aws's HTTP client, SigV4 through its signer.
#include "kiln/serve/client.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "aws/internal/http.h"
#include "aws/internal/sigv4.h"
#include "kiln/json.h"
#include "kiln/plugin/json_value.h"

namespace kiln::serve {
namespace {

namespace aws_internal = ::kiln::aws::internal;

// The absl code that stands for the service's error `type` (the inverse of
// kiln/service_error.h's mapping).
absl::StatusCode CodeOf(std::string_view type, int http_status) {
  static const auto* const kCodes = new std::map<std::string_view, absl::StatusCode>{
      {"ValidationException", absl::StatusCode::kInvalidArgument},
      {"ResourceNotFound", absl::StatusCode::kNotFound},
      {"ResourceInUse", absl::StatusCode::kAlreadyExists},
      {"ResourceLimitExceeded", absl::StatusCode::kResourceExhausted},
      {"AccessDeniedException", absl::StatusCode::kPermissionDenied},
      {"MissingAuthenticationTokenException", absl::StatusCode::kUnauthenticated},
      {"UnrecognizedClientException", absl::StatusCode::kUnauthenticated},
      {"InvalidSignatureException", absl::StatusCode::kUnauthenticated},
      {"IncompleteSignatureException", absl::StatusCode::kUnauthenticated},
      {"UnknownOperationException", absl::StatusCode::kUnimplemented},
      {"ServiceUnavailable", absl::StatusCode::kUnavailable},
      {"ThrottlingException", absl::StatusCode::kUnavailable},
  };
  auto it = kCodes->find(type);
  if (it != kCodes->end()) return it->second;
  return http_status >= 500 ? absl::StatusCode::kUnavailable : absl::StatusCode::kUnknown;
}

aws_internal::HttpOptions HttpOptionsFor(const ClientOptions& options) {
  aws_internal::HttpOptions o;
  o.request_timeout = options.timeout;
  o.stall_timeout = options.timeout;
  o.ca_bundle = options.ca_bundle;
  return o;
}

class HttpApiClient final : public Client {
 public:
  explicit HttpApiClient(ClientOptions options)
      : options_(std::move(options)), http_(HttpOptionsFor(options_)) {
    while (!options_.endpoint.empty() && options_.endpoint.back() == '/') {
      options_.endpoint.pop_back();
    }
    // (NewClient checked that it starts with http:// or https://.)
    host_ = options_.endpoint.substr(options_.endpoint.find("://") + 3);
  }

  absl::StatusOr<std::string> Call(std::string_view operation, std::string_view body) override {
    const std::string date = aws_internal::AmzDate(absl::Now());
    const absl::string_view op(operation.data(), operation.size());
    const std::string target =
        absl::StrContains(op, '.') ? std::string(op) : absl::StrCat("SageMaker.", op);
    // (Built whole: assigning literals to its strings trips GCC 12's
    // -Wrestrict false positive, bug 105329.)
    aws_internal::SigV4Request sr{std::string("POST"),
                                  std::string(1, '/'),
                                  {},
                                  {{"host", host_},
                                   {"content-type", "application/x-amz-json-1.1"},
                                   {"x-amz-date", date},
                                   {"x-amz-target", target}},
                                  aws_internal::Sha256Hex(body)};
    if (!options_.credentials.session_token.empty()) {
      sr.headers.emplace_back("x-amz-security-token", options_.credentials.session_token);
    }
    const aws_internal::SigV4Result signature = aws_internal::SignV4(
        sr,
        aws_internal::Credentials{options_.credentials.access_key_id,
                                  options_.credentials.secret_access_key,
                                  options_.credentials.session_token},
        options_.region, absl::StartsWith(target, "Logs_20140328.") ? "logs" : "sagemaker", date);
    aws_internal::HttpRequest request;
    request.method = "POST";
    request.url = absl::StrCat(options_.endpoint, "/");
    request.headers = sr.headers;
    request.headers.emplace_back("authorization", signature.authorization);
    request.body = body;
    absl::StatusOr<aws_internal::HttpResponse> response = http_.Send(request);
    if (!response.ok()) {
      return absl::UnavailableError(
          absl::StrCat(options_.endpoint, ": ", response.status().message()));
    }
    if (response->status == 200) return std::move(response->body);
    // {"__type": "...", "message": "..."}
    std::string type = absl::StrCat("HTTP ", response->status);
    std::string message = response->body;
    if (absl::StatusOr<JsonValue> error = ParseJsonValue(response->body);
        error.ok() && error->is_object()) {
      if (const JsonValue* t = error->Find("__type"); t != nullptr && t->is_string()) {
        type = t->string_value();
        // (A qualified code: "com.amazonaws.sagemaker#ValidationException".)
        if (const size_t hash = type.rfind('#'); hash != std::string::npos) type.erase(0, hash + 1);
      }
      for (const char* key : {"message", "Message"}) {
        if (const JsonValue* m = error->Find(key); m != nullptr && m->is_string()) {
          message = m->string_value();
        }
      }
    }
    absl::Status status(CodeOf(type, response->status), message);
    status.SetPayload(kServiceErrorPayload, absl::Cord(type));
    return status;
  }

 private:
  ClientOptions options_;
  std::string host_;
  aws_internal::HttpClient http_;
};

template <typename Response>
absl::StatusOr<Response> Typed(Client& client, std::string_view operation,
                               const google::protobuf::Message& request) {
  absl::StatusOr<std::string> json = client.Call(operation, ToJson(request));
  if (!json.ok()) return json.status();
  Response response;
  if (absl::Status s = ParseJson(*json, response); !s.ok()) {
    return absl::InternalError(
        absl::StrCat(absl::string_view(operation.data(), operation.size()),
                     ": the server's response does not parse: ", s.message()));
  }
  return response;
}

absl::Status CheckEndpoint(const std::string& endpoint) {
  if (!absl::StartsWith(endpoint, "http://") && !absl::StartsWith(endpoint, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the endpoint must be an http:// or https:// URL, not '", InputForMessage(endpoint), "'"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ServiceErrorCode(const absl::Status& status) {
  auto payload = status.GetPayload(kServiceErrorPayload);
  return payload.has_value() ? std::string(*payload) : std::string();
}

absl::StatusOr<ClientOptions> ResolveClientOptions(std::string endpoint) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  // (The AWS configuration's endpoint is S3's; this client's is the one given.)
  aws::S3Options found;
  found.endpoint_url = "http://unused.invalid";
  absl::StatusOr<aws::S3Options> resolved = aws::ResolveS3Options(found);
  if (!resolved.ok()) return resolved.status();
  ClientOptions options;
  options.endpoint = std::move(endpoint);
  options.region = resolved->region;
  options.credentials = *resolved->credentials;
  if (const char* bundle = std::getenv("AWS_CA_BUNDLE"); bundle != nullptr && *bundle != '\0') {
    std::ifstream in(bundle);
    if (!in) {
      const int err = errno;
      const std::string why =
          absl::StrCat("AWS_CA_BUNDLE '", PathForMessage(bundle), "': ", std::strerror(err));
      return err == EACCES ? absl::PermissionDeniedError(why) : absl::NotFoundError(why);
    }
    options.ca_bundle = bundle;
  }
  return options;
}

absl::StatusOr<std::unique_ptr<Client>> NewClient(ClientOptions options) {
  if (absl::Status s = CheckEndpoint(options.endpoint); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.endpoint: ", s.message()));
  }
  if (options.credentials.access_key_id.empty() || options.credentials.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions.credentials: a key id and a secret are needed");
  }
  return std::unique_ptr<Client>(new HttpApiClient(std::move(options)));
}

absl::StatusOr<v1::CreateTrainingJobResponse> Client::CreateTrainingJob(
    const v1::CreateTrainingJobRequest& request) {
  return Typed<v1::CreateTrainingJobResponse>(*this, "CreateTrainingJob", request);
}
absl::StatusOr<v1::DescribeTrainingJobResponse> Client::DescribeTrainingJob(
    const v1::DescribeTrainingJobRequest& request) {
  return Typed<v1::DescribeTrainingJobResponse>(*this, "DescribeTrainingJob", request);
}
absl::StatusOr<v1::ListTrainingJobsResponse> Client::ListTrainingJobs(
    const v1::ListTrainingJobsRequest& request) {
  return Typed<v1::ListTrainingJobsResponse>(*this, "ListTrainingJobs", request);
}
absl::Status Client::StopTrainingJob(const v1::StopTrainingJobRequest& request) {
  return Call("StopTrainingJob", ToJson(request)).status();
}
absl::StatusOr<v1::UpdateTrainingJobResponse> Client::UpdateTrainingJob(
    const v1::UpdateTrainingJobRequest& request) {
  return Typed<v1::UpdateTrainingJobResponse>(*this, "UpdateTrainingJob", request);
}
absl::Status Client::DeleteTrainingJob(const v1::DeleteTrainingJobRequest& request) {
  return Call("DeleteTrainingJob", ToJson(request)).status();
}
absl::Status Client::InjectSpotInterruption(std::string_view job_name, std::string_view host,
                                            absl::Duration notice) {
  JsonValue body = JsonValue::Object();
  body.Set("TrainingJobName", JsonValue::String(std::string(job_name)))
      .Set("Host", JsonValue::String(std::string(host)))
      .Set("NoticeInSeconds", JsonValue::Int(absl::ToInt64Seconds(notice)));
  return Call("Kiln.InjectSpotInterruption", WriteJson(body)).status();
}

}  // namespace kiln::serve
