// HttpClient over libcurl's easy interface (see http.h).
#include "aws/internal/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kiln/plugin/json_value.h"

namespace kiln::aws::internal {
namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  CURL* curl = nullptr;
  const BodySink* sink = nullptr;
  HttpResponse* response = nullptr;
  absl::Status sink_status;
  bool status_known = false;
  bool to_sink = false;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  if (line.substr(0, 5) == "HTTP/") {
    // A new response (after 100 Continue, for instance): forget the last.
    t->response->headers.clear();
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  absl::string_view name(line.data(), colon);
  absl::string_view value(line.data() + colon + 1, line.size() - colon - 1);
  t->response->headers.emplace_back(absl::AsciiStrToLower(name),
                                    std::string(absl::StripAsciiWhitespace(value)));
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (!t->status_known) {
    long code = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
    t->to_sink = t->sink != nullptr && code >= 200 && code < 300;
    t->status_known = true;
  }
  if (t->to_sink) {
    absl::Status s = (*t->sink)(std::string_view(data, len));
    if (!s.ok()) {
      t->sink_status = std::move(s);
      return 0;  // CURLE_WRITE_ERROR
    }
    return len;
  }
  std::string& body = t->response->body;
  if (t->sink == nullptr || body.size() < kMaxErrorBody) body.append(data, len);
  return len;
}

}  // namespace

std::string HttpResponse::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "";
}

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) { GlobalInit(); }

HttpClient::~HttpClient() {
  absl::MutexLock lock(&mu_);
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void HttpClient::Release(void* handle) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(handle);
}

absl::StatusOr<HttpResponse> HttpClient::Send(const HttpRequest& request, const BodySink* sink,
                                              bool* sink_failed, HttpResponse* partial) {
  if (sink_failed != nullptr) *sink_failed = false;
  CURL* curl = static_cast<CURL*>(Acquire());
  if (curl == nullptr) return absl::ResourceExhaustedError("libcurl: cannot create a handle");
  // curl_easy_reset keeps the handle's live connections and caches.
  curl_easy_reset(curl);
  HttpResponse response;
  Transfer t;
  t.curl = curl;
  t.sink = sink;
  t.response = &response;
  char error[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  // An S3 key may hold "." and ".." segments: sent as signed, not resolved.
  curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, static_cast<long>(options_.receive_buffer));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
  const long stall_s = std::max<long>(1, absl::ToInt64Seconds(options_.stall_timeout));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, stall_s);
  if (!options_.ca_bundle.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_bundle.c_str());
  }
  if (sink == nullptr && options_.request_timeout > absl::ZeroDuration()) {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(options_.request_timeout)));
  }

  const std::string& m = request.method;
  const bool has_body = m == "PUT" || m == "POST";
  if (m == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (m == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (has_body) {
    // The body from memory: libcurl rewinds it itself if it must resend.
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.empty() ? "" : request.body.data());
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, m.c_str());
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, m.c_str());
  }

  curl_slist* headers = nullptr;
  bool has_content_type = false;
  for (const auto& [name, value] : request.headers) {
    if (absl::EqualsIgnoreCase(name, "content-type")) has_content_type = true;
    headers = curl_slist_append(headers, absl::StrCat(name, ": ", value).c_str());
  }
  if (has_body) {
    // libcurl would say application/x-www-form-urlencoded, and wait for
    // 100 Continue before large bodies.
    if (!has_content_type) {
      headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    }
    headers = curl_slist_append(headers, "Expect:");
  }
  headers = curl_slist_append(headers, "Accept:");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  CURLcode rc = curl_easy_perform(curl);
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);

  if (rc != CURLE_OK) {
    // A failed transfer may leave the connection in any state: drop the
    // handle, and its connections with it.
    curl_easy_cleanup(curl);
    if (partial != nullptr) {
      response.status = static_cast<int>(code);
      *partial = std::move(response);
    }
    if (!t.sink_status.ok()) {
      if (sink_failed != nullptr) *sink_failed = true;
      return t.sink_status;
    }
    // The URL holds the bucket as given (virtual-hosted style) and the key,
    // which are input, and curl's text may quote either: both escaped and cut.
    return absl::UnavailableError(absl::StrCat(
        request.method, " ", ::kiln::PathForMessage(request.url), ": ",
        ::kiln::TextForMessage(error[0] != '\0' ? error : curl_easy_strerror(rc))));
  }
  Release(curl);
  response.status = static_cast<int>(code);
  return response;
}

}  // namespace kiln::aws::internal
