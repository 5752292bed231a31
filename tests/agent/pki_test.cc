// kiln::agent's PKI (kiln/agent/pki.h): the CA and the controller's
// certificate made once, join tokens redeemed once, agent certificates that
// OpenSSL accepts under the CA and no other.
#include "kiln/agent/pki.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

using ::testing::HasSubstr;

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
using Cert = std::unique_ptr<X509, X509Free>;

Cert ParseCert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  Cert cert(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return cert;
}

// X509_verify_cert of `cert_pem` under `ca_pem`, for client authentication.
bool OpenSslVerifies(const std::string& ca_pem, const std::string& cert_pem, int purpose) {
  Cert ca = ParseCert(ca_pem);
  Cert cert = ParseCert(cert_pem);
  if (!ca || !cert) return false;
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, cert.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx, purpose);
  const bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class PkiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln_pki_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/pki";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<Pki> Open(const std::string& dir, PkiOptions options = {}) {
    auto pki = OpenOrCreatePki(dir, {"controller.example", "127.0.0.1"}, std::move(options));
    EXPECT_TRUE(pki.ok()) << pki.status();
    return pki.ok() ? std::move(*pki) : nullptr;
  }

  std::string root_;
  std::string dir_;
};

TEST_F(PkiTest, CaAndControllerCertificateAreMadeOnceAndReused) {
  auto first = Open(dir_);
  ASSERT_NE(first, nullptr);
  auto second = Open(dir_);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->ca_cert_pem(), second->ca_cert_pem());
  EXPECT_EQ(first->controller_cert_pem(), second->controller_cert_pem());
  EXPECT_EQ(first->controller_key_pem(), second->controller_key_pem());
  EXPECT_EQ(first->ca_cert_pem(), ReadAll(dir_ + "/ca.pem"));

  // The CA is a CA; the controller's certificate serves TLS and verifies under it.
  Cert ca = ParseCert(first->ca_cert_pem());
  ASSERT_TRUE(ca);
  EXPECT_EQ(X509_check_ca(ca.get()), 1);
  EXPECT_TRUE(
      OpenSslVerifies(first->ca_cert_pem(), first->controller_cert_pem(), X509_PURPOSE_SSL_SERVER));
  Cert controller = ParseCert(first->controller_cert_pem());
  ASSERT_TRUE(controller);
  EXPECT_EQ(X509_check_host(controller.get(), "controller.example", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(controller.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_host(controller.get(), "other.example", 0, 0, nullptr), 0);
}

TEST_F(PkiTest, ControllerCertificateIsMadeAgainForNamesItLacks) {
  auto pki = Open(dir_);
  ASSERT_NE(pki, nullptr);
  const std::string before = pki->controller_cert_pem();
  // Names it holds: nothing changes.
  ASSERT_TRUE(pki->CoverControllerNames({"127.0.0.1", "controller.example"}).ok());
  EXPECT_EQ(pki->controller_cert_pem(), before);

  ASSERT_TRUE(pki->CoverControllerNames({"10.77.0.1", "ctl.internal"}).ok());
  EXPECT_NE(pki->controller_cert_pem(), before);
  EXPECT_EQ(ReadAll(dir_ + "/controller.pem"), pki->controller_cert_pem());
  Cert controller = ParseCert(pki->controller_cert_pem());
  ASSERT_TRUE(controller);
  for (const char* name : {"controller.example", "ctl.internal"}) {
    EXPECT_EQ(X509_check_host(controller.get(), name, 0, 0, nullptr), 1) << name;
  }
  for (const char* ip : {"127.0.0.1", "10.77.0.1"}) {
    EXPECT_EQ(X509_check_ip_asc(controller.get(), ip, 0), 1) << ip;
  }
  EXPECT_TRUE(
      OpenSslVerifies(pki->ca_cert_pem(), pki->controller_cert_pem(), X509_PURPOSE_SSL_SERVER));
  // Same key, and a later open reads the new certificate.
  auto reopened = Open(dir_);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->controller_cert_pem(), pki->controller_cert_pem());
  EXPECT_EQ(reopened->controller_key_pem(), pki->controller_key_pem());

  absl::Status bad = pki->CoverControllerNames({"not a name"});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("'not a name'"));
}

TEST_F(PkiTest, DirectoryAndKeysArePrivate) {
  ASSERT_NE(Open(dir_), nullptr);
  EXPECT_EQ(ModeOf(dir_), 0700u);
  EXPECT_EQ(ModeOf(dir_ + "/ca.key"), 0600u);
  EXPECT_EQ(ModeOf(dir_ + "/controller.key"), 0600u);
  EXPECT_EQ(ModeOf(dir_ + "/tokens"), 0700u);
}

TEST_F(PkiTest, NewPkiWithoutNamesIsRefused) {
  auto pki = OpenOrCreatePki(dir_, {});
  EXPECT_EQ(pki.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad = OpenOrCreatePki(dir_, {"a b,DNS:evil"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PkiTest, CorruptCaFileIsAnErrorNamingIt) {
  ASSERT_NE(Open(dir_), nullptr);
  const std::string good = ReadAll(dir_ + "/ca.pem");
  std::ofstream(dir_ + "/ca.pem") << "-----BEGIN CERTIFICATE-----\ngarbage\n";
  auto pki = OpenOrCreatePki(dir_, {"controller.example"});
  ASSERT_FALSE(pki.ok());
  EXPECT_EQ(pki.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(pki.status().message(), HasSubstr(dir_ + "/ca.pem"));
  // Never replaced.
  EXPECT_THAT(ReadAll(dir_ + "/ca.pem"), HasSubstr("garbage"));
}

TEST_F(PkiTest, HalfWrittenDirectoryIsAnErrorNamingTheMissingFile) {
  ASSERT_NE(Open(dir_), nullptr);
  std::filesystem::remove(dir_ + "/controller.pem");
  auto pki = OpenOrCreatePki(dir_, {"controller.example"});
  ASSERT_FALSE(pki.ok());
  EXPECT_EQ(pki.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(pki.status().message(), HasSubstr(dir_ + "/controller.pem"));
}

TEST_F(PkiTest, ControllerCertificateOfAnotherCaIsRefused) {
  ASSERT_NE(Open(dir_), nullptr);
  auto other = Open(root_ + "/other");
  ASSERT_NE(other, nullptr);
  std::filesystem::copy_file(root_ + "/other/controller.pem", dir_ + "/controller.pem",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(root_ + "/other/controller.key", dir_ + "/controller.key",
                             std::filesystem::copy_options::overwrite_existing);
  auto pki = OpenOrCreatePki(dir_, {"controller.example"});
  ASSERT_FALSE(pki.ok());
  EXPECT_THAT(pki.status().message(), HasSubstr(dir_ + "/controller.pem"));
}

TEST_F(PkiTest, TokenRedeemsOnceForACertificateOfTheHost) {
  auto pki = Open(dir_);
  ASSERT_NE(pki, nullptr);
  auto token = pki->CreateJoinToken(absl::Hours(1));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_THAT(*token, ::testing::MatchesRegex("kiln1\\.[0-9a-f]{16}\\.[0-9a-f]{64}"));
  // Only the hash is stored.
  const std::string id = token->substr(6, 16);
  const std::string secret = token->substr(23);
  EXPECT_THAT(ReadAll(dir_ + "/tokens/" + id), ::testing::Not(HasSubstr(secret)));
  EXPECT_EQ(ModeOf(dir_ + "/tokens/" + id), 0600u);

  auto mine = MakeKeyAndCsr("host-7.example");
  ASSERT_TRUE(mine.ok()) << mine.status();
  auto cert = pki->RedeemJoinToken(*token, mine->csr_pem, "host-7.example");
  ASSERT_TRUE(cert.ok()) << cert.status();

  EXPECT_TRUE(OpenSslVerifies(pki->ca_cert_pem(), *cert, X509_PURPOSE_SSL_CLIENT));
  EXPECT_FALSE(OpenSslVerifies(pki->ca_cert_pem(), *cert, X509_PURPOSE_SSL_SERVER));
  EXPECT_TRUE(VerifyPeerCertificate(pki->ca_cert_pem(), *cert).ok());
  Cert x509 = ParseCert(*cert);
  ASSERT_TRUE(x509);
  EXPECT_EQ(X509_check_host(x509.get(), "host-7.example", 0, 0, nullptr), 1);
  char cn[256] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(x509.get()), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "host-7.example");
  EXPECT_TRUE(X509_get_extended_key_usage(x509.get()) & XKU_SSL_CLIENT);
  // The certificate is for the key of the request.
  BIO* bio = BIO_new_mem_buf(mine->key_pem.data(), static_cast<int>(mine->key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(x509.get(), key), 1);
  EVP_PKEY_free(key);

  // Used up, also for another process opening the directory.
  auto again = Open(dir_)->RedeemJoinToken(*token, mine->csr_pem, "host-7.example");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(again.status().message(), HasSubstr("already used"));
}

TEST_F(PkiTest, RacingRedemptionsFromSeparateOpensGiveOneCertificate) {
  ASSERT_NE(Open(dir_), nullptr);
  auto token = Open(dir_)->CreateJoinToken(absl::Hours(1));
  ASSERT_TRUE(token.ok());
  auto mine = MakeKeyAndCsr("host-1");
  ASSERT_TRUE(mine.ok());
  constexpr int kRacers = 8;
  std::vector<std::unique_ptr<Pki>> pkis;
  for (int i = 0; i < kRacers; ++i) pkis.push_back(Open(dir_));
  std::atomic<int> granted{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kRacers; ++i) {
    threads.emplace_back([&, i] {
      auto cert = pkis[i]->RedeemJoinToken(*token, mine->csr_pem, "host-1");
      if (cert.ok()) {
        ++granted;
      } else if (absl::IsPermissionDenied(cert.status())) {
        ++refused;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(granted.load(), 1);
  EXPECT_EQ(refused.load(), kRacers - 1);
}

TEST_F(PkiTest, ExpiredTokenIsRefused) {
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto pki = Open(dir_, {.now = [&now] { return now; }});
  ASSERT_NE(pki, nullptr);
  auto token = pki->CreateJoinToken(absl::Minutes(10));
  ASSERT_TRUE(token.ok());
  now += absl::Minutes(10);
  auto mine = MakeKeyAndCsr("host-1");
  ASSERT_TRUE(mine.ok());
  auto cert = pki->RedeemJoinToken(*token, mine->csr_pem, "host-1");
  EXPECT_EQ(cert.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(cert.status().message(), HasSubstr("expired at 2027-01-15T08:10:00Z"));
}

TEST_F(PkiTest, TamperedOrUnknownTokenIsRefused) {
  auto pki = Open(dir_);
  ASSERT_NE(pki, nullptr);
  auto token = pki->CreateJoinToken(absl::Hours(1));
  ASSERT_TRUE(token.ok());
  auto mine = MakeKeyAndCsr("host-1");
  ASSERT_TRUE(mine.ok());
  std::string tampered = *token;
  tampered.back() = tampered.back() == '0' ? '1' : '0';
  auto cert = pki->RedeemJoinToken(tampered, mine->csr_pem, "host-1");
  EXPECT_EQ(cert.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(cert.status().message(), HasSubstr("secret does not match"));

  std::string unknown = *token;
  unknown[6] = unknown[6] == '0' ? '1' : '0';
  cert = pki->RedeemJoinToken(unknown, mine->csr_pem, "host-1");
  EXPECT_EQ(cert.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(cert.status().message(), HasSubstr("unknown join token"));

  cert = pki->RedeemJoinToken("kiln1.../etc/passwd", mine->csr_pem, "host-1");
  EXPECT_EQ(cert.status().code(), absl::StatusCode::kInvalidArgument);

  // The genuine token still works after those attempts.
  EXPECT_TRUE(pki->RedeemJoinToken(*token, mine->csr_pem, "host-1").ok());
}

TEST_F(PkiTest, CsrWithBrokenSignatureIsRefusedAndTheTokenKept) {
  auto pki = Open(dir_);
  ASSERT_NE(pki, nullptr);
  auto token = pki->CreateJoinToken(absl::Hours(1));
  ASSERT_TRUE(token.ok());
  auto mine = MakeKeyAndCsr("host-1");
  ASSERT_TRUE(mine.ok());
  // The last byte of the DER request is the signature's.
  BIO* in = BIO_new_mem_buf(mine->csr_pem.data(), static_cast<int>(mine->csr_pem.size()));
  X509_REQ* req = PEM_read_bio_X509_REQ(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  ASSERT_NE(req, nullptr);
  unsigned char* der = nullptr;
  const int size = i2d_X509_REQ(req, &der);
  X509_REQ_free(req);
  ASSERT_GT(size, 0);
  der[size - 1] ^= 0x01;
  const unsigned char* p = der;
  X509_REQ* broken = d2i_X509_REQ(nullptr, &p, size);
  OPENSSL_free(der);
  ASSERT_NE(broken, nullptr);
  BIO* out = BIO_new(BIO_s_mem());
  PEM_write_bio_X509_REQ(out, broken);
  X509_REQ_free(broken);
  char* data = nullptr;
  const long out_size = BIO_get_mem_data(out, &data);
  const std::string broken_pem(data, static_cast<size_t>(out_size));
  BIO_free(out);

  auto cert = pki->RedeemJoinToken(*token, broken_pem, "host-1");
  EXPECT_EQ(cert.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cert.status().message(), HasSubstr("CSR not valid"));
  cert = pki->RedeemJoinToken(*token, "not a CSR", "host-1");
  EXPECT_THAT(cert.status().message(), HasSubstr("CSR not valid"));
  EXPECT_TRUE(pki->RedeemJoinToken(*token, mine->csr_pem, "host-1").ok());
}

TEST_F(PkiTest, CertificateOfAnotherCaFailsVerification) {
  auto pki = Open(dir_);
  auto other = Open(root_ + "/other");
  ASSERT_NE(pki, nullptr);
  ASSERT_NE(other, nullptr);
  auto token = other->CreateJoinToken(absl::Hours(1));
  ASSERT_TRUE(token.ok());
  auto mine = MakeKeyAndCsr("intruder");
  ASSERT_TRUE(mine.ok());
  auto cert = other->RedeemJoinToken(*token, mine->csr_pem, "intruder");
  ASSERT_TRUE(cert.ok()) << cert.status();
  absl::Status verified = VerifyPeerCertificate(pki->ca_cert_pem(), *cert);
  EXPECT_EQ(verified.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(verified.message(), HasSubstr("not signed by this CA"));
  EXPECT_THAT(verified.message(), HasSubstr("intruder"));
  EXPECT_FALSE(OpenSslVerifies(pki->ca_cert_pem(), *cert, X509_PURPOSE_SSL_CLIENT));
  // Nor does the token of one PKI work on the other.
  auto token2 = other->CreateJoinToken(absl::Hours(1));
  ASSERT_TRUE(token2.ok());
  EXPECT_EQ(pki->RedeemJoinToken(*token2, mine->csr_pem, "intruder").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(PkiTest, BadTtlAndHostNameAreRefused) {
  auto pki = Open(dir_);
  ASSERT_NE(pki, nullptr);
  EXPECT_EQ(pki->CreateJoinToken(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeKeyAndCsr("bad host").status().code(), absl::StatusCode::kInvalidArgument);
  auto token = pki->CreateJoinToken(absl::Hours(1));
  ASSERT_TRUE(token.ok());
  auto mine = MakeKeyAndCsr("host-1");
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(pki->RedeemJoinToken(*token, mine->csr_pem, "host,DNS:evil").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::agent
