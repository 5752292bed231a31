// S3Client (see s3_client.h).
#include "aws/internal/s3_client.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kiln/plugin/json_value.h"

namespace kiln::aws::internal {
namespace {

using ::kiln::PathForMessage;

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// At most this many exchanges for one GetObject, resumptions included (each
// resumption after progress starts a fresh count of max_attempts).
constexpr int kMaxGetExchanges = 1000;

std::string ShownUri(std::string_view bucket, std::string_view key) {
  return PathForMessage(absl::StrCat("s3://", Av(bucket), "/", Av(key)));
}

// Text of the server's (an error's code and message, an ETag) as the messages
// show it: escaped and cut like any input.
std::string ServerText(std::string_view text) { return ::kiln::TextForMessage(text); }

// "bytes 0-9/443" -> 443; -1 when absent or malformed.
int64_t TotalFromContentRange(std::string_view value) {
  size_t slash = value.rfind('/');
  int64_t total = -1;
  if (slash == std::string_view::npos ||
      !absl::SimpleAtoi(Av(value.substr(slash + 1)), &total)) {
    return -1;
  }
  return total;
}

// The HTTP status S3 sends an error `code` with (S3's error code table), so
// that an error in a 200's body maps as the same error with its own status
// does; 400 (the client's) for a code not listed here.
int HttpStatusOfS3Code(std::string_view code) {
  struct Entry {
    std::string_view code;
    int status;
  };
  static constexpr Entry kStatuses[] = {
      {"AccessDenied", 403}, {"AccountProblem", 403}, {"AllAccessDisabled", 403},
      {"InvalidAccessKeyId", 403}, {"InvalidObjectState", 403}, {"InvalidSecurity", 403},
      {"NotSignedUp", 403}, {"RequestTimeTooSkewed", 403}, {"SignatureDoesNotMatch", 403},
      {"NoSuchBucket", 404}, {"NoSuchKey", 404}, {"NoSuchUpload", 404}, {"NoSuchVersion", 404},
      {"MethodNotAllowed", 405}, {"PreconditionFailed", 412}, {"InvalidRange", 416},
      {"InternalError", 500}, {"NotImplemented", 501},
      {"ServiceUnavailable", 503}, {"SlowDown", 503},
  };
  for (const Entry& e : kStatuses) {
    if (e.code == code) return e.status;
  }
  return 400;
}

// The error of a failed answer: `status` with the S3 error `code` and
// `message` of its body. A 2xx status is an answer whose body is an <Error>
// (CompleteMultipartUpload): it is mapped as its code would be with the status
// S3 sends that code with (AccessDenied as a 403), so both kinds agree.
absl::Status ErrorFor(const std::string& what, int status, const std::string& code,
                      const std::string& message, bool if_match = false) {
  const bool ok_status = status >= 200 && status < 300;
  std::string text = absl::StrCat(what, ": HTTP ", status);
  if (ok_status) absl::StrAppend(&text, " with an error in the body:");
  if (!code.empty()) absl::StrAppend(&text, " ", ServerText(code));
  if (!message.empty()) absl::StrAppend(&text, ": ", ServerText(message));
  if (ok_status) status = HttpStatusOfS3Code(code);
  if (status == 404 || code == "NoSuchKey" || code == "NoSuchBucket" || code == "NoSuchUpload") {
    return absl::NotFoundError(text);
  }
  if (status == 403 || status == 401) return absl::PermissionDeniedError(text);
  if (status == 416) return absl::OutOfRangeError(text);
  if (status == 412) {
    // Only a read pinned to a version (If-Match) can tell why.
    if (!if_match) return absl::AbortedError(text);
    return absl::AbortedError(absl::StrCat(text, " (the object changed while it was read)"));
  }
  if (IsRetryableS3Error(status, code)) return absl::UnavailableError(text);
  if (status >= 400 && status < 500) return absl::InvalidArgumentError(text);
  return absl::UnknownError(text);
}

// Whether `body` is an XML document whose root is <Error>.
bool IsErrorDocument(std::string_view body) {
  size_t at = 0;
  while (true) {
    at = body.find_first_not_of(" \t\r\n", at);
    if (at == std::string_view::npos) return false;
    if (body.substr(at, 2) != "<?") break;
    at = body.find("?>", at);  // a declaration or processing instruction
    if (at == std::string_view::npos) return false;
    at += 2;
  }
  return body.substr(at, 7) == "<Error>" || body.substr(at, 7) == "<Error ";
}

}  // namespace

bool IsRetryableS3Error(int http_status, std::string_view code) {
  // 501 Not Implemented and 505 HTTP Version Not Supported never pass.
  if (http_status == 429 || (http_status >= 500 && http_status != 501 && http_status != 505)) {
    return true;
  }
  return code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" ||
         code == "ServiceUnavailable" || code == "Throttling" || code == "ThrottlingException" ||
         code == "RequestLimitExceeded" || code == "RequestThrottled";
}

std::string MultipartEtag(const std::vector<std::string>& part_etags) {
  if (part_etags.empty()) return "";
  std::string md5s;
  md5s.reserve(16 * part_etags.size());
  for (const std::string& part_etag : part_etags) {
    std::string_view hex = part_etag;
    if (hex.size() >= 2 && hex.front() == '"' && hex.back() == '"') {
      hex = hex.substr(1, hex.size() - 2);
    }
    if (hex.size() != 32 ||
        !std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
      return "";
    }
    md5s += absl::HexStringToBytes(Av(hex));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(md5s.data(), md5s.size(), digest, &length, EVP_md5(), nullptr) != 1) {
    return "";  // no MD5 here (a FIPS provider): the ETag cannot be told
  }
  return absl::StrCat(
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length)),
      "-", part_etags.size());
}

std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = absl::StrCat("<", Av(tag), ">");
  const std::string close = absl::StrCat("</", Av(tag), ">");
  size_t pos = 0;
  while (true) {
    size_t start = xml.find(open, pos);
    if (start == std::string_view::npos) break;
    start += open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    pos = end + close.size();
  }
  return out;
}

std::string XmlUnescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out.push_back(s[i]);
      continue;
    }
    std::string_view entity = s.substr(i + 1, semi - i - 1);
    if (entity == "amp") {
      out.push_back('&');
    } else if (entity == "lt") {
      out.push_back('<');
    } else if (entity == "gt") {
      out.push_back('>');
    } else if (entity == "quot") {
      out.push_back('"');
    } else if (entity == "apos") {
      out.push_back('\'');
    } else if (!entity.empty() && entity[0] == '#') {
      uint32_t cp = 0;
      bool ok = entity.size() > 1 && (entity[1] == 'x' || entity[1] == 'X')
                    ? absl::SimpleHexAtoi(Av(entity.substr(2)), &cp)
                    : absl::SimpleAtoi(Av(entity.substr(1)), &cp);
      if (!ok || cp > 0x10FFFF) {
        out.push_back(s[i]);
        continue;
      }
      ::kiln::AppendUtf8(cp, out);
    } else {
      out.push_back(s[i]);
      continue;
    }
    i = semi;
  }
  return out;
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string XmlText(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> e = XmlElements(xml, tag);
  return e.empty() ? std::string() : XmlUnescape(e.front());
}

S3Client::S3Client(S3ClientOptions options)
    : options_(std::move(options)), http_(options_.http), rng_(options_.seed) {
  std::string_view ep = options_.endpoint;
  size_t sep = ep.find("://");
  scheme_ = sep == std::string_view::npos ? "https" : std::string(ep.substr(0, sep));
  std::string_view rest = sep == std::string_view::npos ? ep : ep.substr(sep + 3);
  rest = rest.substr(0, rest.find('/'));
  // The default port is not part of the Host header.
  if ((scheme_ == "https" && absl::EndsWith(Av(rest), ":443")) ||
      (scheme_ == "http" && absl::EndsWith(Av(rest), ":80"))) {
    rest = rest.substr(0, rest.rfind(':'));
  }
  authority_ = std::string(rest);
}

S3ClientStats S3Client::stats() const {
  return {requests_.load(), retries_.load(), resumed_gets_.load()};
}

absl::Duration S3Client::Backoff(int attempt) {
  absl::Duration cap = options_.retry_base_delay * (int64_t{1} << std::min(attempt, 20));
  cap = std::min(cap, options_.retry_max_delay);
  absl::MutexLock lock(&mu_);
  std::uniform_int_distribution<int64_t> d(0, std::max<int64_t>(0, absl::ToInt64Microseconds(cap)));
  return absl::Microseconds(d(rng_));
}

absl::StatusOr<HttpResponse> S3Client::SendOnce(const Call& call, const BodySink* sink,
                                                bool* sink_failed, HttpResponse* partial) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  std::string host = authority_;
  std::string path;
  // Bucket names with dots break TLS wildcard certificates: path-style.
  if (options_.path_style || absl::StrContains(call.bucket, '.')) {
    path = absl::StrCat("/", call.bucket);
    if (!call.key.empty()) absl::StrAppend(&path, "/", call.key);
  } else {
    host = absl::StrCat(call.bucket, ".", authority_);
    path = absl::StrCat("/", call.key);
  }
  const std::string canonical_uri = S3CanonicalUri(path);

  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [n, v] : call.query) query.emplace_back(UriEncode(n, false), UriEncode(v, false));
  std::sort(query.begin(), query.end());
  std::string url = absl::StrCat(scheme_, "://", host, canonical_uri);
  for (size_t i = 0; i < query.size(); ++i) {
    absl::StrAppend(&url, i == 0 ? "?" : "&", query[i].first);
    if (!query[i].second.empty()) absl::StrAppend(&url, "=", query[i].second);
  }

  const std::string amz_date = AmzDate(absl::Now());
  const std::string payload_hash =
      call.body.empty() ? std::string(kEmptySha256) : Sha256Hex(call.body);
  SigV4Request sr;
  sr.method = call.method;
  sr.canonical_uri = canonical_uri;
  sr.query = call.query;
  sr.headers = {{"host", host}, {"x-amz-date", amz_date}, {"x-amz-content-sha256", payload_hash}};
  if (!options_.credentials.session_token.empty()) {
    sr.headers.emplace_back("x-amz-security-token", options_.credentials.session_token);
  }
  for (const auto& h : call.headers) sr.headers.push_back(h);
  sr.payload_hash = payload_hash;
  SigV4Result signature = SignV4(sr, options_.credentials, options_.region, "s3", amz_date);

  HttpRequest request;
  request.method = call.method;
  request.url = std::move(url);
  request.headers = std::move(sr.headers);
  request.headers.emplace_back("Authorization", signature.authorization);
  request.body = call.body;
  return http_.Send(request, sink, sink_failed, partial);
}

absl::StatusOr<HttpResponse> S3Client::Send(const Call& call, const ResponseCheck* check,
                                            SendTrace* trace) {
  SendTrace ignored;
  if (trace == nullptr) trace = &ignored;
  *trace = SendTrace();
  absl::Status last;
  const int attempts = std::max(1, options_.max_attempts);
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) {
      retries_.fetch_add(1, std::memory_order_relaxed);
      absl::SleepFor(Backoff(attempt));
    }
    absl::StatusOr<HttpResponse> r = SendOnce(call, nullptr, nullptr);
    if (!r.ok()) {
      last = r.status();
      trace->unanswered = true;
      trace->code.clear();
      continue;  // the exchange failed: retry
    }
    if (r->status >= 200 && r->status < 300) {
      absl::Status vetted = check != nullptr ? (*check)(*r) : absl::OkStatus();
      if (vetted.ok()) {
        trace->code.clear();
        return r;
      }
      trace->code = XmlText(r->body, "Code");
      if (!absl::IsUnavailable(vetted)) return vetted;
      last = vetted;
      continue;
    }
    std::string code = XmlText(r->body, "Code");
    trace->code = code;
    const bool if_match = std::any_of(call.headers.begin(), call.headers.end(),
                                      [](const auto& h) { return h.first == "if-match"; });
    absl::Status error =
        ErrorFor(call.what, r->status, code, XmlText(r->body, "Message"), if_match);
    if (!IsRetryableS3Error(r->status, code)) return error;
    last = error;
  }
  return absl::UnavailableError(absl::StrCat(call.what, ": failed after ", attempts,
                                             " attempts; last: ", last.message()));
}

absl::StatusOr<S3ObjectMeta> S3Client::HeadObject(std::string_view bucket, std::string_view key) {
  Call call{"HEAD", std::string(bucket), std::string(key), {}, {}, {},
            absl::StrCat("HEAD ", ShownUri(bucket, key))};
  absl::StatusOr<HttpResponse> r = Send(call);
  if (!r.ok()) return r.status();
  S3ObjectMeta meta;
  if (!absl::SimpleAtoi(r->Header("content-length"), &meta.size)) {
    return absl::InternalError(absl::StrCat(call.what, ": no Content-Length in the response"));
  }
  meta.etag = r->Header("etag");
  return meta;
}

absl::StatusOr<S3ObjectMeta> S3Client::GetObject(std::string_view bucket, std::string_view key,
                                                 int64_t first, int64_t last,
                                                 std::string_view if_match, const BodySink& sink) {
  const std::string what = absl::StrCat("GET ", ShownUri(bucket, key));
  S3ObjectMeta meta;
  meta.size = -1;
  meta.etag = std::string(if_match);
  int64_t delivered = 0;
  int64_t expected = -1;  // bytes this exchange should deliver
  absl::Status last_error;
  const int attempts = std::max(1, options_.max_attempts);
  int failures = 0;  // since the last progress
  for (int exchange = 0; exchange < kMaxGetExchanges; ++exchange) {
    if (failures >= attempts) break;
    if (failures > 0) {
      retries_.fetch_add(1, std::memory_order_relaxed);
      absl::SleepFor(Backoff(failures));
    }
    Call call{"GET", std::string(bucket), std::string(key), {}, {}, {}, what};
    const int64_t start = first + delivered;
    const bool whole = first == 0 && last < 0 && delivered == 0;
    if (!whole) {
      call.headers.emplace_back("range", last < 0 ? absl::StrCat("bytes=", start, "-")
                                                  : absl::StrCat("bytes=", start, "-", last));
    }
    if (!meta.etag.empty()) call.headers.emplace_back("if-match", meta.etag);
    int64_t got = 0;
    auto counting = [&](std::string_view chunk) -> absl::Status {
      got += static_cast<int64_t>(chunk.size());
      return sink(chunk);
    };
    const BodySink counting_sink = counting;
    bool sink_failed = false;
    HttpResponse partial;
    absl::StatusOr<HttpResponse> r = SendOnce(call, &counting_sink, &sink_failed, &partial);
    delivered += got;
    if (!r.ok()) {
      if (sink_failed) return r.status();
      last_error = r.status();
      if (got > 0) {
        failures = 0;
        resumed_gets_.fetch_add(1, std::memory_order_relaxed);
        // The rest must come from the object these bytes came from: pinned
        // to the ETag of this exchange, when it is the first to say one.
        if (meta.etag.empty() && partial.status >= 200 && partial.status < 300) {
          meta.etag = partial.Header("etag");
        }
      }
      ++failures;
      continue;
    }
    if (r->status < 200 || r->status >= 300) {
      std::string code = XmlText(r->body, "Code");
      absl::Status error = ErrorFor(what, r->status, code, XmlText(r->body, "Message"),
                                    /*if_match=*/!meta.etag.empty());
      if (!IsRetryableS3Error(r->status, code)) return error;
      last_error = error;
      ++failures;
      continue;
    }
    int64_t length = -1;
    absl::SimpleAtoi(r->Header("content-length"), &length);
    if (r->status == 206) {
      meta.size = TotalFromContentRange(r->Header("content-range"));
    } else {
      meta.size = length;
      if (!whole) {
        // The server ignored the range: the sink got the whole object.
        return absl::InternalError(absl::StrCat(what, ": the server ignored the Range header"));
      }
    }
    if (meta.etag.empty()) meta.etag = r->Header("etag");
    expected = length;
    if (expected >= 0 && got != expected) {
      last_error = absl::UnavailableError(
          absl::StrCat(what, ": body of ", got, " bytes where ", expected, " were announced"));
      if (got > 0) failures = 0;
      ++failures;
      continue;
    }
    return meta;
  }
  return absl::UnavailableError(absl::StrCat(what, ": failed after ", attempts,
                                             " attempts; last: ", last_error.message()));
}

absl::Status S3Client::PutObject(std::string_view bucket, std::string_view key,
                                 std::string_view data) {
  Call call{"PUT", std::string(bucket), std::string(key), {},
            {{"content-type", "application/octet-stream"}}, data,
            absl::StrCat("PUT ", ShownUri(bucket, key))};
  return Send(call).status();
}

absl::StatusOr<std::string> S3Client::CreateMultipartUpload(std::string_view bucket,
                                                            std::string_view key) {
  Call call{"POST", std::string(bucket), std::string(key), {{"uploads", ""}},
            {{"content-type", "application/octet-stream"}}, {},
            absl::StrCat("CreateMultipartUpload ", ShownUri(bucket, key))};
  absl::StatusOr<HttpResponse> r = Send(call);
  if (!r.ok()) return r.status();
  std::string id = XmlText(r->body, "UploadId");
  if (id.empty()) return absl::InternalError(absl::StrCat(call.what, ": no UploadId in the response"));
  return id;
}

absl::StatusOr<std::string> S3Client::UploadPart(std::string_view bucket, std::string_view key,
                                                 std::string_view upload_id, int part_number,
                                                 std::string_view data) {
  Call call{"PUT", std::string(bucket), std::string(key),
            {{"partNumber", absl::StrCat(part_number)}, {"uploadId", std::string(upload_id)}},
            {{"content-type", "application/octet-stream"}}, data,
            absl::StrCat("UploadPart ", part_number, " of ", ShownUri(bucket, key))};
  absl::StatusOr<HttpResponse> r = Send(call);
  if (!r.ok()) return r.status();
  std::string etag = r->Header("etag");
  if (etag.empty()) return absl::InternalError(absl::StrCat(call.what, ": no ETag in the response"));
  return etag;
}

absl::Status S3Client::CompleteMultipartUpload(std::string_view bucket, std::string_view key,
                                               std::string_view upload_id,
                                               const std::vector<std::string>& part_etags) {
  std::string body = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < part_etags.size(); ++i) {
    absl::StrAppend(&body, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>",
                    XmlEscape(part_etags[i]), "</ETag></Part>");
  }
  body += "</CompleteMultipartUpload>";
  Call call{"POST", std::string(bucket), std::string(key), {{"uploadId", std::string(upload_id)}},
            {{"content-type", "application/xml"}}, body,
            absl::StrCat("CompleteMultipartUpload ", ShownUri(bucket, key))};
  // S3 may answer 200 and report a failure in the body (it sends the status
  // before it is done): retried like a 5xx when its code says so.
  auto error_in_body = [&call](const HttpResponse& response) -> absl::Status {
    if (!IsErrorDocument(response.body)) return absl::OkStatus();
    return ErrorFor(call.what, response.status, XmlText(response.body, "Code"),
                    XmlText(response.body, "Message"));
  };
  const ResponseCheck check = error_in_body;
  SendTrace trace;
  absl::StatusOr<HttpResponse> r = Send(call, &check, &trace);
  if (r.ok()) return absl::OkStatus();
  if (!trace.unanswered) return r.status();

  // Some attempt got no answer: the server may have acted on it and completed
  // the upload. The object tells (CheckUploadedObject).
  if (absl::IsUnavailable(r.status())) {
    // The retries ran out (every attempt unanswered, or the last answers
    // retryable errors). Only the exact ETag of these parts makes it a
    // success; otherwise the upload may or may not complete later (an
    // attempt may still be under way): still Unavailable.
    const absl::Status check_object = CheckUploadedObject(bucket, key, part_etags);
    if (check_object.ok()) {
      // Completed, or the key already held these very bytes, split the same
      // way, and no attempt got through: then the parts would stay stored
      // (and billed) until aborted. (A completed upload answers NoSuchUpload.)
      AbortMultipartUpload(bucket, key, upload_id).IgnoreError();
      return absl::OkStatus();
    }
    return absl::UnavailableError(absl::StrCat(r.status().message(), "; ",
                                               check_object.message()));
  }
  if (!absl::IsNotFound(r.status()) || trace.code != "NoSuchUpload") return r.status();
  // A later attempt found the upload gone: the unanswered one completed it,
  // or it was aborted; the object is ours only if the check says so.
  const absl::Status check_object = CheckUploadedObject(bucket, key, part_etags);
  if (check_object.ok()) return absl::OkStatus();
  return absl::Status(check_object.code(),
                      absl::StrCat(call.what,
                                   ": an attempt got no answer and a retry found the upload gone "
                                   "(NoSuchUpload); ",
                                   check_object.message()));
}

absl::Status S3Client::CheckUploadedObject(std::string_view bucket, std::string_view key,
                                           const std::vector<std::string>& part_etags) {
  const std::string uri = ShownUri(bucket, key);
  const std::string expected = MultipartEtag(part_etags);
  if (expected.empty()) {
    return absl::UnknownError(absl::StrCat(
        "the parts' ETags are not MD5s (as under SSE-KMS), so whether ", uri,
        " is the object uploaded cannot be told: the outcome is unknown"));
  }
  absl::StatusOr<S3ObjectMeta> meta = HeadObject(bucket, key);
  if (absl::IsNotFound(meta.status())) {
    return absl::AbortedError(
        absl::StrCat("there is no object at ", uri, ", so it is not the one uploaded"));
  }
  if (!meta.ok()) {
    return absl::Status(meta.status().code(),
                        absl::StrCat("checking the object failed, so the outcome is unknown: ",
                                     meta.status().message()));
  }
  std::string_view etag = meta->etag;
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  if (!absl::EqualsIgnoreCase(Av(etag), expected)) {
    return absl::AbortedError(absl::StrCat("the object at ", uri,
                                           " is not the one uploaded (its ETag is ",
                                           ServerText(meta->etag),
                                           ", the upload's would be \"", expected, "\")"));
  }
  return absl::OkStatus();
}

absl::Status S3Client::AbortMultipartUpload(std::string_view bucket, std::string_view key,
                                            std::string_view upload_id) {
  Call call{"DELETE", std::string(bucket), std::string(key), {{"uploadId", std::string(upload_id)}},
            {}, {}, absl::StrCat("AbortMultipartUpload ", ShownUri(bucket, key))};
  // Only the upload being gone (completed or aborted already) is what an abort wants; a
  // missing bucket, or a 404 from something that is not S3, is an error.
  SendTrace trace;
  absl::Status s = Send(call, nullptr, &trace).status();
  return absl::IsNotFound(s) && trace.code == "NoSuchUpload" ? absl::OkStatus() : s;
}

absl::StatusOr<S3ListPage> S3Client::ListObjectsV2(std::string_view bucket,
                                                   std::string_view prefix,
                                                   std::string_view continuation_token,
                                                   int max_keys) {
  Call call{"GET", std::string(bucket), "", {{"list-type", "2"}, {"prefix", std::string(prefix)},
            {"max-keys", absl::StrCat(std::clamp(max_keys, 1, 1000))}},
            {}, {}, absl::StrCat("ListObjectsV2 ", ShownUri(bucket, prefix))};
  if (!continuation_token.empty()) {
    call.query.emplace_back("continuation-token", std::string(continuation_token));
  }
  absl::StatusOr<HttpResponse> r = Send(call);
  if (!r.ok()) return r.status();
  S3ListPage page;
  for (std::string_view entry : XmlElements(r->body, "Contents")) {
    S3ListPage::Entry e;
    e.key = XmlText(entry, "Key");
    if (!absl::SimpleAtoi(XmlText(entry, "Size"), &e.size)) {
      return absl::InternalError(
          absl::StrCat(call.what, ": no Size for key '", PathForMessage(e.key), "'"));
    }
    page.objects.push_back(std::move(e));
  }
  page.truncated = XmlText(r->body, "IsTruncated") == "true";
  page.next_token = XmlText(r->body, "NextContinuationToken");
  if (page.truncated && page.next_token.empty()) {
    return absl::InternalError(absl::StrCat(call.what, ": truncated page without a token"));
  }
  return page;
}

absl::Status S3Client::CreateBucket(std::string_view bucket) {
  std::string body;
  if (options_.region != "us-east-1") {
    body = absl::StrCat("<CreateBucketConfiguration><LocationConstraint>", XmlEscape(options_.region),
                        "</LocationConstraint></CreateBucketConfiguration>");
  }
  Call call{"PUT", std::string(bucket), "", {}, {{"content-type", "application/xml"}}, body,
            absl::StrCat("CreateBucket ", PathForMessage(absl::StrCat("s3://", Av(bucket))))};
  return Send(call).status();
}

absl::Status S3Client::DeleteObject(std::string_view bucket, std::string_view key) {
  Call call{"DELETE", std::string(bucket), std::string(key), {}, {}, {},
            absl::StrCat("DELETE ", ShownUri(bucket, key))};
  // S3 answers 204 for a missing key; a server that answers NoSuchKey instead means the same.
  // Any other 404 (NoSuchBucket, or a code-less one from something that is not S3) is an
  // error: the code decides, not words in the message, which quote the key.
  SendTrace trace;
  absl::Status s = Send(call, nullptr, &trace).status();
  return absl::IsNotFound(s) && trace.code == "NoSuchKey" ? absl::OkStatus() : s;
}

}  // namespace kiln::aws::internal
