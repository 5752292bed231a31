// kiln::agent's PKI (kiln/agent/pki.h) on OpenSSL's libcrypto.
#include "kiln/agent/pki.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/state_files.h"

namespace kiln::agent {
namespace {

using internal::Exists;
using internal::MakeDir;
using internal::ReadFile;
using internal::WriteFileAtomically;

struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct ReqFree {
  void operator()(X509_REQ* p) const { X509_REQ_free(p); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
struct BnFree {
  void operator()(BIGNUM* p) const { BN_free(p); }
};
struct StoreFree {
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Req = std::unique_ptr<X509_REQ, ReqFree>;
using Ext = std::unique_ptr<X509_EXTENSION, ExtFree>;
using Bn = std::unique_ptr<BIGNUM, BnFree>;

constexpr char kTokenPrefix[] = "kiln1";
constexpr size_t kTokenIdBytes = 8;
constexpr size_t kTokenSecretBytes = 32;

// OpenSSL's queued errors as text (and the queue emptied).
std::string OpenSslErrors() {
  std::string text;
  unsigned long code;
  while ((code = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text.empty() ? "no detail" : text;
}

absl::Status SslError(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", OpenSslErrors()));
}

std::string ErrnoText(int err) { return std::strerror(err); }

// A DNS name as certificates hold it: labels of letters, digits and '-'
// (no leading or trailing '-'), at most 253 characters.
bool IsDnsName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
  }
  return true;
}

bool IsIpAddress(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  if (RAND_bytes(buf.data(), static_cast<int>(buf.size())) != 1) return "";
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()));
}

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr) != 1) return "";
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
}

// ---- PEM ----

std::string PemOfKey(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return "";
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

std::string PemOfCert(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return "";
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

std::string PemOfReq(X509_REQ* req) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), req) != 1) return "";
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

Bio MemBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

Cert ParseCert(const std::string& pem) {
  Bio bio = MemBio(pem);
  Cert cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  return cert;
}

Pkey ParseKey(const std::string& pem) {
  Bio bio = MemBio(pem);
  Pkey key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  return key;
}

// ---- Certificates ----

Pkey NewP256Key() { return Pkey(EVP_EC_gen("P-256")); }

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Ext ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return SslError(absl::StrCat("cannot add the extension ", OBJ_nid2sn(nid), " = ", value));
  }
  return absl::OkStatus();
}

struct CertSpec {
  std::string common_name;
  absl::Duration validity;
  bool is_ca = false;
  std::string key_usage;           // keyUsage's value
  std::string extended_key_usage;  // "" for none
  std::string subject_alt_names;   // "" for none
};

// A certificate of `subject_key` signed by `issuer_key`, whose certificate is
// `issuer` (nullptr: self-signed).
absl::StatusOr<Cert> MakeCert(const CertSpec& spec, EVP_PKEY* subject_key, X509* issuer,
                              EVP_PKEY* issuer_key) {
  Cert cert(X509_new());
  if (!cert) return SslError("cannot make a certificate");
  if (X509_set_version(cert.get(), 2) != 1) return SslError("cannot set the certificate's version");
  // A random positive serial number of 127 bits.
  Bn serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return SslError("cannot make a serial number");
  }
  // A minute back, for clocks a little behind.
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(spec.validity)) ==
          nullptr) {
    return SslError("cannot set the certificate's validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(spec.common_name.c_str()),
                                 -1, -1, 0) != 1) {
    return SslError("cannot set the certificate's subject");
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1 ||
      X509_set_pubkey(cert.get(), subject_key) != 1) {
    return SslError("cannot set the certificate's issuer or key");
  }
  absl::Status status = AddExtension(cert.get(), signer, NID_basic_constraints,
                                     spec.is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  if (status.ok())
    status = AddExtension(cert.get(), signer, NID_key_usage, "critical," + spec.key_usage);
  if (status.ok() && !spec.extended_key_usage.empty()) {
    status = AddExtension(cert.get(), signer, NID_ext_key_usage, spec.extended_key_usage);
  }
  if (status.ok()) status = AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash");
  if (status.ok())
    status = AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid:always");
  if (status.ok() && !spec.subject_alt_names.empty()) {
    status = AddExtension(cert.get(), signer, NID_subject_alt_name, spec.subject_alt_names);
  }
  if (!status.ok()) return status;
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) <= 0)
    return SslError("cannot sign the certificate");
  return cert;
}

// ---- Tokens ----

struct ParsedToken {
  std::string id;
  std::string secret;
};

bool IsLowerHex(absl::string_view text, size_t size) {
  if (text.size() != size) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<ParsedToken> ParseToken(const std::string& token) {
  std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3 || parts[0] != kTokenPrefix || !IsLowerHex(parts[1], 2 * kTokenIdBytes) ||
      !IsLowerHex(parts[2], 2 * kTokenSecretBytes)) {
    return absl::InvalidArgumentError("not a join token (kiln1.<id>.<secret>)");
  }
  return ParsedToken{std::string(parts[1]), std::string(parts[2])};
}

std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

// ---- The PKI ----

class DirPki final : public Pki {
 public:
  DirPki(std::string dir, PkiOptions options)
      : dir_(std::move(dir)), options_(std::move(options)) {}

  absl::Status Open(const std::vector<std::string>& controller_names);

  const std::string& dir() const override { return dir_; }
  const std::string& ca_cert_pem() const override { return ca_cert_pem_; }
  const std::string& controller_cert_pem() const override { return controller_cert_pem_; }
  const std::string& controller_key_pem() const override { return controller_key_pem_; }

  absl::StatusOr<std::string> CreateJoinToken(absl::Duration ttl) override;
  absl::Status CoverControllerNames(const std::vector<std::string>& names) override;
  absl::StatusOr<std::string> RedeemJoinToken(const std::string& token, const std::string& csr_pem,
                                              const std::string& host_name) override;

 private:
  std::string Path(const char* name) const { return absl::StrCat(dir_, "/", name); }
  std::string TokenPath(const std::string& id) const { return absl::StrCat(dir_, "/tokens/", id); }
  absl::Time Now() const { return options_.now ? options_.now() : absl::Now(); }
  absl::Status Create(const std::vector<std::string>& controller_names);
  absl::Status Load();

  const std::string dir_;
  const PkiOptions options_;
  std::string ca_cert_pem_;
  std::string controller_cert_pem_;
  std::string controller_key_pem_;
  Cert ca_cert_;  // immutable after Open: OpenSSL reads it from several threads
  Pkey ca_key_;
};

constexpr const char* kPkiFiles[] = {"ca.key", "ca.pem", "controller.key", "controller.pem"};

absl::Status DirPki::Open(const std::vector<std::string>& controller_names) {
  absl::Status status = MakeDir(dir_);
  if (!status.ok()) return status;
  status = MakeDir(Path("tokens"));
  if (!status.ok()) return status;
  int present = 0;
  for (const char* name : kPkiFiles) present += Exists(Path(name)) ? 1 : 0;
  if (present == 0) {
    status = Create(controller_names);
    if (!status.ok()) return status;
  } else if (present < 4) {
    for (const char* name : kPkiFiles) {
      if (!Exists(Path(name))) {
        return absl::DataLossError(
            absl::StrCat(Path(name), " is missing but other files of the PKI exist (remove ", dir_,
                         " to start over)"));
      }
    }
  }
  return Load();
}

// subjectAltName's value for `names`: "DNS:a,IP:10.0.0.1".
absl::StatusOr<std::string> AltNames(const std::vector<std::string>& names) {
  std::string alt_names;
  for (const std::string& name : names) {
    if (!alt_names.empty()) alt_names += ",";
    if (IsIpAddress(name)) {
      alt_names += "IP:" + name;
    } else if (IsDnsName(name)) {
      alt_names += "DNS:" + name;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("controller name '", absl::CEscape(name),
                                                     "' is neither a DNS name nor an IP address"));
    }
  }
  return alt_names;
}

// Whether `cert` holds `name` (a DNS name or an IP address) as a subject
// alternative name.
bool CertHoldsName(X509* cert, const std::string& name) {
  if (IsIpAddress(name)) return X509_check_ip_asc(cert, name.c_str(), 0) == 1;
  return X509_check_host(cert, name.data(), name.size(), 0, nullptr) == 1;
}

// The DNS names and IP addresses of `cert`'s subjectAltName, in order.
std::vector<std::string> CertNames(X509* cert) {
  std::vector<std::string> names;
  auto* general =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (general == nullptr) return names;
  for (int i = 0; i < sk_GENERAL_NAME_num(general); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(general, i);
    if (g->type == GEN_DNS) {
      const ASN1_STRING* dns = g->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                         static_cast<size_t>(ASN1_STRING_length(dns)));
    } else if (g->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = g->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {0};
      const int length = ASN1_STRING_length(ip);
      const int family = length == 4 ? AF_INET : length == 16 ? AF_INET6 : 0;
      if (family != 0 &&
          inet_ntop(family, ASN1_STRING_get0_data(ip), text, sizeof text) != nullptr) {
        names.emplace_back(text);
      }
    }
  }
  GENERAL_NAMES_free(general);
  return names;
}

absl::Status DirPki::Create(const std::vector<std::string>& controller_names) {
  if (controller_names.empty()) {
    return absl::InvalidArgumentError("a new PKI needs the controller's host name or address");
  }
  absl::StatusOr<std::string> alt_names_or = AltNames(controller_names);
  if (!alt_names_or.ok()) return alt_names_or.status();
  const std::string& alt_names = *alt_names_or;
  Pkey ca_key = NewP256Key();
  Pkey controller_key = NewP256Key();
  if (!ca_key || !controller_key) return SslError("cannot make an EC P-256 key");
  absl::StatusOr<Cert> ca = MakeCert({.common_name = "Kiln controller CA",
                                      .validity = kCaValidity,
                                      .is_ca = true,
                                      .key_usage = "keyCertSign,cRLSign",
                                      .extended_key_usage = "",
                                      .subject_alt_names = ""},
                                     ca_key.get(), nullptr, ca_key.get());
  if (!ca.ok()) return ca.status();
  absl::StatusOr<Cert> controller = MakeCert({.common_name = controller_names.front(),
                                              .validity = kControllerCertValidity,
                                              .is_ca = false,
                                              .key_usage = "digitalSignature",
                                              .extended_key_usage = "serverAuth,clientAuth",
                                              .subject_alt_names = alt_names},
                                             controller_key.get(), ca->get(), ca_key.get());
  if (!controller.ok()) return controller.status();
  // Keys first: a directory with a certificate always has its key.
  absl::Status status = WriteFileAtomically(Path("ca.key"), PemOfKey(ca_key.get()), 0600);
  if (status.ok())
    status = WriteFileAtomically(Path("controller.key"), PemOfKey(controller_key.get()), 0600);
  if (status.ok()) status = WriteFileAtomically(Path("ca.pem"), PemOfCert(ca->get()), 0644);
  if (status.ok())
    status = WriteFileAtomically(Path("controller.pem"), PemOfCert(controller->get()), 0644);
  return status;
}

absl::Status DirPki::Load() {
  std::string texts[4];
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::string> text = ReadFile(Path(kPkiFiles[i]));
    if (!text.ok()) return text.status();
    texts[i] = std::move(*text);
  }
  ca_key_ = ParseKey(texts[0]);
  if (!ca_key_)
    return absl::DataLossError(absl::StrCat(Path("ca.key"), " is not a PEM private key"));
  ca_cert_ = ParseCert(texts[1]);
  if (!ca_cert_)
    return absl::DataLossError(absl::StrCat(Path("ca.pem"), " is not a PEM certificate"));
  if (X509_check_private_key(ca_cert_.get(), ca_key_.get()) != 1) {
    ERR_clear_error();
    return absl::DataLossError(
        absl::StrCat(Path("ca.pem"), " does not match the key in ", Path("ca.key")));
  }
  Pkey controller_key = ParseKey(texts[2]);
  if (!controller_key) {
    return absl::DataLossError(absl::StrCat(Path("controller.key"), " is not a PEM private key"));
  }
  Cert controller = ParseCert(texts[3]);
  if (!controller) {
    return absl::DataLossError(absl::StrCat(Path("controller.pem"), " is not a PEM certificate"));
  }
  if (X509_check_private_key(controller.get(), controller_key.get()) != 1) {
    ERR_clear_error();
    return absl::DataLossError(absl::StrCat(Path("controller.pem"), " does not match the key in ",
                                            Path("controller.key")));
  }
  absl::Status verified = VerifyPeerCertificate(texts[1], texts[3]);
  if (!verified.ok()) {
    return absl::DataLossError(absl::StrCat(Path("controller.pem"), ": ", verified.message()));
  }
  ca_cert_pem_ = std::move(texts[1]);
  controller_key_pem_ = std::move(texts[2]);
  controller_cert_pem_ = std::move(texts[3]);
  return absl::OkStatus();
}

absl::Status DirPki::CoverControllerNames(const std::vector<std::string>& names) {
  absl::StatusOr<std::string> checked = AltNames(names);
  if (!checked.ok()) return checked.status();
  Cert cert = ParseCert(controller_cert_pem_);
  Pkey key = ParseKey(controller_key_pem_);
  if (!cert || !key) return SslError("cannot read the controller's certificate");
  std::vector<std::string> all = CertNames(cert.get());
  bool missing = false;
  for (const std::string& name : names) {
    if (CertHoldsName(cert.get(), name)) continue;
    all.push_back(name);
    missing = true;
  }
  if (!missing) return absl::OkStatus();
  absl::StatusOr<std::string> alt_names = AltNames(all);
  if (!alt_names.ok()) return alt_names.status();
  absl::StatusOr<Cert> controller = MakeCert({.common_name = all.front(),
                                              .validity = kControllerCertValidity,
                                              .is_ca = false,
                                              .key_usage = "digitalSignature",
                                              .extended_key_usage = "serverAuth,clientAuth",
                                              .subject_alt_names = *alt_names},
                                             key.get(), ca_cert_.get(), ca_key_.get());
  if (!controller.ok()) return controller.status();
  std::string pem = PemOfCert(controller->get());
  absl::Status status = WriteFileAtomically(Path("controller.pem"), pem, 0644);
  if (!status.ok()) return status;
  controller_cert_pem_ = std::move(pem);
  return absl::OkStatus();
}

absl::StatusOr<std::string> DirPki::CreateJoinToken(absl::Duration ttl) {
  if (ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a join token's time to live must be positive");
  }
  const std::string id = RandomHex(kTokenIdBytes);
  const std::string secret = RandomHex(kTokenSecretBytes);
  if (id.empty() || secret.empty()) return SslError("cannot make random bytes");
  const absl::Time expires = Now() + ttl;
  const std::string record =
      absl::StrCat("sha256 ", Sha256Hex(secret), "\nexpires ", absl::ToUnixSeconds(expires), "\n");
  absl::Status status = WriteFileAtomically(TokenPath(id), record, 0600);
  if (!status.ok()) return status;
  return absl::StrCat(kTokenPrefix, ".", id, ".", secret);
}

// Checks a CSR's self-signature and key; returns its public key.
absl::StatusOr<Pkey> CheckCsr(const std::string& csr_pem) {
  Bio bio = MemBio(csr_pem);
  Req req(bio ? PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!req) {
    ERR_clear_error();
    return absl::InvalidArgumentError("CSR not valid: not a PEM certificate signing request");
  }
  EVP_PKEY* key = X509_REQ_get0_pubkey(req.get());
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("CSR not valid: no public key");
  }
  if (EVP_PKEY_is_a(key, "EC")) {
    char group[64] = {0};
    size_t size = 0;
    if (EVP_PKEY_get_group_name(key, group, sizeof group, &size) != 1 ||
        (std::strcmp(group, "prime256v1") != 0 && std::strcmp(group, "P-256") != 0)) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("CSR not valid: an EC key must be on P-256, not '", group, "'"));
    }
  } else if (EVP_PKEY_is_a(key, "RSA")) {
    if (EVP_PKEY_get_bits(key) < 2048) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CSR not valid: an RSA key of ", EVP_PKEY_get_bits(key), " bits (2048 or more wanted)"));
    }
  } else {
    return absl::InvalidArgumentError("CSR not valid: the key is neither EC P-256 nor RSA");
  }
  if (X509_REQ_verify(req.get(), key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("CSR not valid: its signature does not verify");
  }
  EVP_PKEY_up_ref(key);
  return Pkey(key);
}

absl::StatusOr<std::string> DirPki::RedeemJoinToken(const std::string& token,
                                                    const std::string& csr_pem,
                                                    const std::string& host_name) {
  absl::StatusOr<ParsedToken> parsed = ParseToken(token);
  if (!parsed.ok()) return parsed.status();
  if (!IsDnsName(host_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host name '", absl::CEscape(host_name), "' is not a DNS name"));
  }
  const std::string path = TokenPath(parsed->id);
  absl::StatusOr<std::string> record = ReadFile(path);
  if (absl::IsNotFound(record.status())) {
    return absl::NotFoundError(absl::StrCat("unknown join token ", parsed->id));
  }
  if (!record.ok()) return record.status();
  std::string hash;
  int64_t expires_seconds = 0;
  bool have_expiry = false;
  for (absl::string_view line : absl::StrSplit(*record, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
    if (words.size() != 2) continue;
    if (words[0] == "sha256") hash = std::string(words[1]);
    if (words[0] == "expires") have_expiry = absl::SimpleAtoi(words[1], &expires_seconds);
  }
  if (hash.size() != 64 || !have_expiry) {
    return absl::InternalError(absl::StrCat(path, " is not a join token record"));
  }
  const std::string presented = Sha256Hex(parsed->secret);
  if (presented.size() != hash.size() ||
      CRYPTO_memcmp(presented.data(), hash.data(), hash.size()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("join token ", parsed->id, ": the secret does not match"));
  }
  const absl::Time expires = absl::FromUnixSeconds(expires_seconds);
  if (Now() >= expires) {
    return absl::PermissionDeniedError(
        absl::StrCat("join token ", parsed->id, " expired at ", TimeText(expires)));
  }
  const std::string used_path = path + ".used";
  if (Exists(used_path)) {
    return absl::PermissionDeniedError(
        absl::StrCat("join token ", parsed->id, " was already used"));
  }
  absl::StatusOr<Pkey> key = CheckCsr(csr_pem);
  if (!key.ok()) return key.status();
  absl::StatusOr<Cert> cert = MakeCert({.common_name = host_name,
                                        .validity = kAgentCertValidity,
                                        .is_ca = false,
                                        .key_usage = "digitalSignature",
                                        .extended_key_usage = "clientAuth",
                                        .subject_alt_names = "DNS:" + host_name},
                                       key->get(), ca_cert_.get(), ca_key_.get());
  if (!cert.ok()) return cert.status();
  std::string pem = PemOfCert(cert->get());
  if (pem.empty()) return SslError("cannot write the certificate");
  // Used up here, by whichever process makes the marker first.
  const int fd = open(used_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("join token ", parsed->id, " was already used"));
    }
    return absl::InternalError(absl::StrCat("cannot create ", used_path, ": ", ErrnoText(errno)));
  }
  const std::string note = absl::StrCat(host_name, " ", TimeText(Now()), "\n");
  const bool written = write(fd, note.data(), note.size()) == static_cast<ssize_t>(note.size());
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!written || !synced) {
    // The token stays used: a marker once made is never taken back.
    return absl::InternalError(absl::StrCat("cannot write ", used_path));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pki>> OpenOrCreatePki(
    const std::string& dir, const std::vector<std::string>& controller_names, PkiOptions options) {
  if (dir.empty()) return absl::InvalidArgumentError("the PKI directory is empty");
  auto pki = std::make_unique<DirPki>(dir, std::move(options));
  absl::Status status = pki->Open(controller_names);
  if (!status.ok()) return status;
  return pki;
}

absl::StatusOr<KeyAndCsr> MakeKeyAndCsr(const std::string& host_name) {
  if (!IsDnsName(host_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host name '", absl::CEscape(host_name), "' is not a DNS name"));
  }
  Pkey key = NewP256Key();
  if (!key) return SslError("cannot make an EC P-256 key");
  Req req(X509_REQ_new());
  if (!req) return SslError("cannot make a CSR");
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  if (X509_REQ_set_version(req.get(), 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(host_name.c_str()), -1, -1,
                                 0) != 1 ||
      X509_REQ_set_pubkey(req.get(), key.get()) != 1 ||
      X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0) {
    return SslError("cannot make a CSR");
  }
  KeyAndCsr out{PemOfKey(key.get()), PemOfReq(req.get())};
  if (out.key_pem.empty() || out.csr_pem.empty())
    return SslError("cannot write the key or the CSR");
  return out;
}

absl::StatusOr<std::string> CertificateCommonName(const std::string& cert_pem) {
  Cert cert = ParseCert(cert_pem);
  if (!cert) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the certificate is not PEM");
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) return absl::InvalidArgumentError("the certificate has no common name");
  const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(cn)),
                     static_cast<size_t>(ASN1_STRING_length(cn)));
}

absl::Status VerifyPeerCertificate(const std::string& ca_pem, const std::string& cert_pem) {
  Cert ca = ParseCert(ca_pem);
  if (!ca) return absl::InvalidArgumentError("the CA certificate is not a PEM certificate");
  Cert cert = ParseCert(cert_pem);
  if (!cert) return absl::InvalidArgumentError("the peer's certificate is not a PEM certificate");
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    return SslError("cannot set up the certificate check");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    char subject[256] = {0};
    X509_NAME_oneline(X509_get_subject_name(cert.get()), subject, sizeof subject);
    std::string why = X509_verify_cert_error_string(error);
    if (error == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
        error == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
        error == X509_V_ERR_CERT_SIGNATURE_FAILURE) {
      why = absl::StrCat("not signed by this CA (", why, ")");
    }
    return absl::UnauthenticatedError(absl::StrCat("certificate '", subject, "' refused: ", why));
  }
  return absl::OkStatus();
}

}  // namespace kiln::agent
