// SigV4 against AWS's published vectors: the Signature Version 4 test suite
// (credentials AKIDEXAMPLE, region us-east-1, service "service", 20150830T123600Z)
// and the examples of the S3 API reference ("Signature Calculations for the
// Authorization Header", examplebucket, 20130524T000000Z).
#include "aws/internal/sigv4.h"

#include <string>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kiln::aws::internal {
namespace {

const Credentials kSuiteCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const Credentials kS3DocCredentials{"AKIAIOSFODNN7EXAMPLE",
                                    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
constexpr char kSuiteDate[] = "20150830T123600Z";
constexpr char kS3DocDate[] = "20130524T000000Z";

struct SuiteCase {
  const char* name;
  const char* method;
  const char* path;  // decoded, as on the request line of the .req file
  HeaderList query;
  HeaderList extra_headers;
  std::string body;
  const char* signed_headers;
  const char* signature;
};

SigV4Result SignSuite(const SuiteCase& c) {
  SigV4Request r;
  r.method = c.method;
  r.canonical_uri = NormalizedCanonicalUri(c.path);
  r.query = c.query;
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}};
  for (const auto& h : c.extra_headers) r.headers.push_back(h);
  r.payload_hash = Sha256Hex(c.body);
  return SignV4(r, kSuiteCredentials, "us-east-1", "service", kSuiteDate);
}

class SigV4SuiteTest : public ::testing::TestWithParam<SuiteCase> {};

TEST_P(SigV4SuiteTest, SignatureMatchesThePublishedOne) {
  const SuiteCase& c = GetParam();
  SigV4Result result = SignSuite(c);
  EXPECT_EQ(result.signature, c.signature) << c.name << "\n" << result.canonical_request;
  EXPECT_EQ(result.authorization,
            std::string("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                        "aws4_request, SignedHeaders=") +
                c.signed_headers + ", Signature=" + c.signature);
}

// A row per case, laid out by hand.
// clang-format off
INSTANTIATE_TEST_SUITE_P(
    AwsTestSuite, SigV4SuiteTest,
    ::testing::Values(
        SuiteCase{"get-vanilla", "GET", "/", {}, {}, "", "host;x-amz-date",
                  "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        SuiteCase{"get-vanilla-query", "GET", "/", {}, {}, "", "host;x-amz-date",
                  "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        SuiteCase{"get-vanilla-empty-query-key", "GET", "/", {{"Param1", "value1"}}, {}, "",
                  "host;x-amz-date",
                  "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"},
        SuiteCase{"get-vanilla-query-order-key-case", "GET", "/",
                  {{"Param2", "value2"}, {"Param1", "value1"}}, {}, "", "host;x-amz-date",
                  "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
        SuiteCase{"get-vanilla-query-unreserved", "GET", "/",
                  {{"-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                    "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"}},
                  {}, "", "host;x-amz-date",
                  "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
        SuiteCase{"get-vanilla-utf8-query", "GET", "/", {{"\xe1\x88\xb4", "bar"}}, {}, "",
                  "host;x-amz-date",
                  "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
        SuiteCase{"get-unreserved", "GET",
                  "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", {}, {},
                  "", "host;x-amz-date",
                  "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
        SuiteCase{"get-utf8", "GET", "/\xe1\x88\xb4", {}, {}, "", "host;x-amz-date",
                  "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
        SuiteCase{"get-space", "GET", "/example space/", {}, {}, "", "host;x-amz-date",
                  "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
        SuiteCase{"get-relative", "GET", "/example/..", {}, {}, "", "host;x-amz-date",
                  "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        SuiteCase{"get-relative-relative", "GET", "/example1/example2/../..", {}, {}, "",
                  "host;x-amz-date",
                  "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        SuiteCase{"get-slash", "GET", "//", {}, {}, "", "host;x-amz-date",
                  "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        SuiteCase{"get-slash-dot-slash", "GET", "/./", {}, {}, "", "host;x-amz-date",
                  "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        SuiteCase{"get-slash-pointless-dot", "GET", "/./example", {}, {}, "", "host;x-amz-date",
                  "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5"},
        SuiteCase{"get-slashes", "GET", "//example//", {}, {}, "", "host;x-amz-date",
                  "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84"},
        SuiteCase{"get-header-key-duplicate", "GET", "/", {},
                  {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}},
                  "", "host;my-header1;x-amz-date",
                  "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
        SuiteCase{"get-header-value-order", "GET", "/", {},
                  {{"My-Header1", "value4"},
                   {"My-Header1", "value1"},
                   {"My-Header1", "value3"},
                   {"My-Header1", "value2"}},
                  "", "host;my-header1;x-amz-date",
                  "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
        SuiteCase{"get-header-value-trim", "GET", "/", {},
                  {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}}, "",
                  "host;my-header1;my-header2;x-amz-date",
                  "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
        SuiteCase{"post-vanilla", "POST", "/", {}, {}, "", "host;x-amz-date",
                  "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
        SuiteCase{"post-vanilla-query", "POST", "/", {{"Param1", "value1"}}, {}, "",
                  "host;x-amz-date",
                  "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
        SuiteCase{"post-header-key-sort", "POST", "/", {}, {{"My-Header1", "value1"}}, "",
                  "host;my-header1;x-amz-date",
                  "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
        SuiteCase{"post-header-value-case", "POST", "/", {}, {{"My-Header1", "VALUE1"}}, "",
                  "host;my-header1;x-amz-date",
                  "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
        SuiteCase{"post-x-www-form-urlencoded", "POST", "/", {},
                  {{"Content-Type", "application/x-www-form-urlencoded"}}, "Param1=value1",
                  "content-type;host;x-amz-date",
                  "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"}),
    [](const ::testing::TestParamInfo<SuiteCase>& p) {
      std::string name = p.param.name;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });
// clang-format on

// The suite's intermediate files for get-vanilla and get-header-value-trim.
TEST(SigV4Test, GetVanillaCanonicalRequestAndStringToSignAreThePublishedOnes) {
  SigV4Result r = SignSuite({"get-vanilla", "GET", "/", {}, {}, "", "", ""});
  EXPECT_EQ(r.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(r.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
}

TEST(SigV4Test, HeaderValuesAreTrimmedAndInnerSpacesCollapsed) {
  SigV4Result r = SignSuite({"get-header-value-trim", "GET", "/", {},
                             {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}},
                             "", "", ""});
  EXPECT_EQ(r.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\n"
            "x-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

// AWS's signing-key example ("Examples of how to derive a signing key"):
// secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, 20120215, us-east-1, iam.
TEST(SigV4Test, SigningKeyMatchesTheDocumentedDerivation) {
  std::string key =
      SigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
  std::string hex;
  for (unsigned char c : key) {
    static const char* digits = "0123456789abcdef";
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 0xf]);
  }
  EXPECT_EQ(hex, "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
}

SigV4Result SignS3Doc(const char* method, const char* path, HeaderList query, HeaderList headers,
                      const std::string& payload_hash) {
  SigV4Request r;
  r.method = method;
  r.canonical_uri = S3CanonicalUri(path);
  r.query = std::move(query);
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"}, {"x-amz-date", kS3DocDate}};
  for (auto& h : headers) r.headers.push_back(std::move(h));
  r.payload_hash = payload_hash;
  return SignV4(r, kS3DocCredentials, "us-east-1", "s3", kS3DocDate);
}

TEST(SigV4S3Test, GetObjectWithRange) {
  SigV4Result r = SignS3Doc("GET", "/test.txt", {},
                            {{"Range", "bytes=0-9"},
                             {"x-amz-content-sha256", std::string(kEmptySha256)}},
                            std::string(kEmptySha256));
  EXPECT_EQ(r.canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(r.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4S3Test, PutObjectWithSignedPayloadAndKeyNeedingEncoding) {
  const std::string body = "Welcome to Amazon S3.";
  const std::string hash = Sha256Hex(body);
  EXPECT_EQ(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Result r = SignS3Doc("PUT", "/test$file.text", {},
                            {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                             {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                             {"x-amz-content-sha256", hash}},
                            hash);
  EXPECT_NE(r.canonical_request.find("\n/test%24file.text\n"), std::string::npos);
  EXPECT_EQ(r.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4S3Test, GetBucketLifecycleWithValuelessQueryParameter) {
  SigV4Result r = SignS3Doc("GET", "/", {{"lifecycle", ""}},
                            {{"x-amz-content-sha256", std::string(kEmptySha256)}},
                            std::string(kEmptySha256));
  EXPECT_NE(r.canonical_request.find("\n/\nlifecycle=\n"), std::string::npos);
  EXPECT_EQ(r.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4S3Test, ListObjectsQuerySortedByName) {
  SigV4Result r = SignS3Doc("GET", "/", {{"prefix", "J"}, {"max-keys", "2"}},
                            {{"x-amz-content-sha256", std::string(kEmptySha256)}},
                            std::string(kEmptySha256));
  EXPECT_NE(r.canonical_request.find("\nmax-keys=2&prefix=J\n"), std::string::npos);
  EXPECT_EQ(r.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// The S3 reference's presigned-URL example signs UNSIGNED-PAYLOAD with the
// X-Amz-* parameters in the query and only host as a header.
TEST(SigV4S3Test, UnsignedPayloadPresignedGet) {
  SigV4Request req;
  req.method = "GET";
  req.canonical_uri = S3CanonicalUri("/test.txt");
  req.query = {{"X-Amz-Algorithm", "AWS4-HMAC-SHA256"},
               {"X-Amz-Credential", "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"},
               {"X-Amz-Date", kS3DocDate},
               {"X-Amz-Expires", "86400"},
               {"X-Amz-SignedHeaders", "host"}};
  req.headers = {{"Host", "examplebucket.s3.amazonaws.com"}};
  req.payload_hash = std::string(kUnsignedPayload);
  SigV4Result r = SignV4(req, kS3DocCredentials, "us-east-1", "s3", kS3DocDate);
  EXPECT_EQ(r.canonical_request,
            "GET\n/test.txt\nX-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
            "AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date="
            "20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\n"
            "host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD");
  EXPECT_EQ(r.signature, "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
}

// S3 signs the key as it is: no dot-segment or slash normalisation, each byte
// encoded once.
TEST(SigV4S3Test, S3PathsAreNotNormalized) {
  EXPECT_EQ(S3CanonicalUri("/bucket/a/../b//c/./d"), "/bucket/a/../b//c/./d");
  EXPECT_EQ(S3CanonicalUri("/bucket/x y+z%"), "/bucket/x%20y%2Bz%25");
  EXPECT_EQ(S3CanonicalUri("/bucket/\xc3\xa9"), "/bucket/%C3%A9");
  EXPECT_EQ(NormalizedCanonicalUri("/bucket/a/../b//c/./d"), "/bucket/b/c/d");
}

TEST(SigV4Test, UriDecodeReversesUriEncode) {
  const std::string s = "a b/c~d+e$\xc3\xa9%";
  EXPECT_EQ(UriEncode(s, true), "a%20b/c~d%2Be%24%C3%A9%25");
  EXPECT_EQ(UriDecode(UriEncode(s, false)), s);
  EXPECT_EQ(UriDecode("%zz%4"), "%zz%4");
}

TEST(SigV4Test, AmzDateIsUtc) {
  absl::Time t = absl::FromCivil(absl::CivilSecond(2015, 8, 30, 12, 36, 0), absl::UTCTimeZone());
  EXPECT_EQ(AmzDate(t), "20150830T123600Z");
}

}  // namespace
}  // namespace kiln::aws::internal
