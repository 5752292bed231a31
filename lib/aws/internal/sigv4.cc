// AWS Signature Version 4 (see sigv4.h). HMAC and SHA-256 come from OpenSSL's
// libcrypto, the library libcurl already links for TLS.
#include "aws/internal/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kiln::aws::internal {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";
constexpr char kLowerHex[] = "0123456789abcdef";

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

std::string ToHex(const unsigned char* data, size_t n) {
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kLowerHex[data[i] >> 4];
    out[2 * i + 1] = kLowerHex[data[i] & 0xf];
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Trims the ends and collapses every run of spaces and tabs inside to one
// space (SigV4's header value rule).
std::string CanonicalHeaderValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (unsigned char c : s) {
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

std::string UriDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = HexValue(s[i + 1]);
      int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::string S3CanonicalUri(std::string_view path) {
  if (path.empty()) return "/";
  return UriEncode(path, /*keep_slash=*/true);
}

std::string NormalizedCanonicalUri(std::string_view path) {
  std::vector<std::string_view> segments;
  for (absl::string_view seg : absl::StrSplit(absl::string_view(path.data(), path.size()), '/')) {
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
      continue;
    }
    segments.emplace_back(seg.data(), seg.size());
  }
  std::string joined = "/";
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) joined.push_back('/');
    joined.append(segments[i]);
  }
  // A trailing slash of a non-root path stays ("/example/").
  if (!segments.empty() && path.size() > 1 && path.back() == '/') joined.push_back('/');
  return UriEncode(joined, /*keep_slash=*/true);
}

std::string AmzDate(absl::Time t) { return absl::FormatTime("%Y%m%dT%H%M%SZ", t, absl::UTCTimeZone()); }

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return ToHex(digest, sizeof(digest));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service) {
  std::string k = HmacSha256(absl::StrCat("AWS4", absl::string_view(secret.data(), secret.size())),
                             date);
  k = HmacSha256(k, region);
  k = HmacSha256(k, service);
  return HmacSha256(k, "aws4_request");
}

SigV4Result SignV4(const SigV4Request& request, const Credentials& credentials,
                   std::string_view region, std::string_view service, std::string_view amz_date) {
  const std::string key = SigningKey(credentials.secret_access_key,
                                     amz_date.substr(0, std::min<size_t>(8, amz_date.size())),
                                     region, service);
  return SignV4WithKey(request, credentials.access_key_id, key, region, service, amz_date);
}

SigV4Result SignV4WithKey(const SigV4Request& request, std::string_view access_key_id,
                          std::string_view signing_key, std::string_view region,
                          std::string_view service, std::string_view amz_date) {
  // Query: encoded names and values, sorted by name then value.
  std::vector<std::pair<std::string, std::string>> query;
  query.reserve(request.query.size());
  for (const auto& [name, value] : request.query) {
    query.emplace_back(UriEncode(name, false), UriEncode(value, false));
  }
  std::sort(query.begin(), query.end());
  std::string canonical_query;
  for (const auto& [name, value] : query) {
    if (!canonical_query.empty()) canonical_query.push_back('&');
    absl::StrAppend(&canonical_query, name, "=", value);
  }

  // Headers: lower-case names, sorted (stable, so repeated headers keep their
  // order), values joined with ','.
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(request.headers.size());
  for (const auto& [name, value] : request.headers) {
    headers.emplace_back(absl::AsciiStrToLower(name), CanonicalHeaderValue(value));
  }
  std::stable_sort(headers.begin(), headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers;
  std::string signed_headers;
  for (size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      absl::StrAppend(&canonical_headers, ",", headers[i].second);
      continue;
    }
    if (i > 0) canonical_headers.push_back('\n');
    absl::StrAppend(&canonical_headers, headers[i].first, ":", headers[i].second);
    if (!signed_headers.empty()) signed_headers.push_back(';');
    signed_headers.append(headers[i].first);
  }
  canonical_headers.push_back('\n');

  SigV4Result result;
  result.canonical_request = absl::StrCat(request.method, "\n", request.canonical_uri, "\n",
                                          canonical_query, "\n", canonical_headers, "\n",
                                          signed_headers, "\n", request.payload_hash);
  absl::string_view date(amz_date.data(), std::min<size_t>(8, amz_date.size()));
  std::string scope = absl::StrCat(date, "/", absl::string_view(region.data(), region.size()), "/",
                                   absl::string_view(service.data(), service.size()),
                                   "/aws4_request");
  result.string_to_sign =
      absl::StrCat("AWS4-HMAC-SHA256\n", absl::string_view(amz_date.data(), amz_date.size()),
                   "\n", scope, "\n", Sha256Hex(result.canonical_request));
  std::string sig = HmacSha256(signing_key, result.string_to_sign);
  result.signature = ToHex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
  result.signed_headers = signed_headers;
  result.authorization = absl::StrCat("AWS4-HMAC-SHA256 Credential=",
                                      absl::string_view(access_key_id.data(), access_key_id.size()),
                                      "/", scope, ", SignedHeaders=", signed_headers,
                                      ", Signature=", result.signature);
  return result;
}

}  // namespace kiln::aws::internal
