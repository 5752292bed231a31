// AWS Signature Version 4: canonical request, string to sign, signing key and
// Authorization header, as AWS documents them ("Create a signed AWS API
// request"), with S3's rules for paths (each key byte encoded once, no
// normalisation) and the other services' (dot segments and repeated slashes
// removed). Checked against AWS's published test suite and S3's documented
// examples (tests/aws/sigv4_test.cc).
//
// Internal to kiln::aws: never installed. Every function is thread-safe.
#ifndef KILN_LIB_AWS_INTERNAL_SIGV4_H_
#define KILN_LIB_AWS_INTERNAL_SIGV4_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace kiln::aws::internal {

// Access key, secret key and, for temporary credentials, their token
// (AWS_SESSION_TOKEN).
struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none
};

// The payload hash of a request whose body is not signed.
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
// SHA-256 of the empty string, in hex.
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// One request, as far as the signature is concerned.
struct SigV4Request {
  std::string method;             // GET, PUT, ...
  std::string canonical_uri;      // S3CanonicalUri() or NormalizedCanonicalUri()
  HeaderList query;               // decoded names and values, any order
  HeaderList headers;             // as sent, any case and order; must include host and
                                  // x-amz-date; every one is signed
  std::string payload_hash;       // hex SHA-256 of the body, or kUnsignedPayload
};

struct SigV4Result {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;       // hex
  std::string signed_headers;  // "host;x-amz-date"
  std::string authorization;   // the Authorization header's value
};

// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - . _ ~ stay,
// every other byte is %XY (upper-case hex); '/' stays when `keep_slash`.
std::string UriEncode(std::string_view s, bool keep_slash);

// Decodes %XY escapes (others bytes as they are). Invalid escapes stay as
// they are.
std::string UriDecode(std::string_view s);

// S3's canonical URI for a decoded path ("/bucket/key"): every byte encoded
// once, '/' kept, nothing normalised ("/a/../b" stays, "//" stays).
std::string S3CanonicalUri(std::string_view path);

// The other services' canonical URI for a decoded path: "." and ".."
// segments resolved and empty segments dropped (a trailing '/' is kept), then
// encoded as S3CanonicalUri does. "" becomes "/".
std::string NormalizedCanonicalUri(std::string_view path);

// "20150830T123600Z" for `t` (UTC).
std::string AmzDate(absl::Time t);

// Hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// Raw HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(std::string_view key, std::string_view data);

// The signing key: HMAC chain over "AWS4"+secret, date (YYYYMMDD), region,
// service, "aws4_request". Raw bytes.
std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service);

// Signs `request` at `amz_date` ("YYYYMMDDTHHMMSSZ", which must equal the
// request's x-amz-date header). Header values are trimmed and their inner
// runs of spaces collapsed; repeated headers are joined with ',' in order.
SigV4Result SignV4(const SigV4Request& request, const Credentials& credentials,
                   std::string_view region, std::string_view service, std::string_view amz_date);

// SignV4 with the signing key given (SigningKey() of the secret, the date of
// `amz_date`, `region` and `service`), for a caller that keeps it: the key
// changes only with the day.
SigV4Result SignV4WithKey(const SigV4Request& request, std::string_view access_key_id,
                          std::string_view signing_key, std::string_view region,
                          std::string_view service, std::string_view amz_date);

}  // namespace kiln::aws::internal

#endif  // KILN_LIB_AWS_INTERNAL_SIGV4_H_
