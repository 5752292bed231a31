// The public-key infrastructure of Kiln's controller and its per-host agents:
// the controller keeps a certificate authority (CA) in a directory, signs its
// own server certificate with it, and signs the certificate of each agent that
// joins with a one-time join token (the model is the kubelet's TLS
// bootstrap). Both ends of the mutually authenticated connection then accept
// only certificates of that CA (VerifyPeerCertificate).
//
//   auto pki = kiln::agent::OpenOrCreatePki("/var/lib/kiln/pki", {"ctl.example", "10.0.0.1"});
//   std::string token = (*pki)->CreateJoinToken(absl::Hours(1)).value();
//   // On the host that joins:
//   kiln::agent::KeyAndCsr mine = kiln::agent::MakeKeyAndCsr("host-7").value();
//   // On the controller, given the token and the request from that host:
//   std::string cert = (*pki)->RedeemJoinToken(token, mine.csr_pem, "host-7").value();
//
// The directory holds (0700; private keys 0600, every file written whole and
// renamed into place):
//   ca.pem, ca.key                  the CA (EC P-256, 10 years)
//   controller.pem, controller.key  the controller's certificate (1 year)
//   tokens/<id>                     a join token: the SHA-256 of its secret and
//                                   when it expires; never the secret itself
//   tokens/<id>.used                made once, when the token is redeemed
//
// Threading: a Pki is thread-safe; several processes may create and redeem
// tokens of one directory at once, and a token is redeemed at most once.
#ifndef KILN_AGENT_PKI_H_
#define KILN_AGENT_PKI_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kiln::agent {

// How long what the PKI signs is valid.
inline constexpr absl::Duration kCaValidity = absl::Hours(24 * 3650);
inline constexpr absl::Duration kControllerCertValidity = absl::Hours(24 * 365);
inline constexpr absl::Duration kAgentCertValidity = absl::Hours(24 * 90);

struct PkiOptions {
  // The time that token expiry is measured against (absl::Now when empty).
  std::function<absl::Time()> now;
};

class Pki {
 public:
  virtual ~Pki() = default;

  // The directory given to OpenOrCreatePki.
  virtual const std::string& dir() const = 0;
  // PEM text of the CA's certificate (what agents trust), and of the
  // controller's certificate and private key (what it serves with).
  virtual const std::string& ca_cert_pem() const = 0;
  virtual const std::string& controller_cert_pem() const = 0;
  virtual const std::string& controller_key_pem() const = 0;

  // A new one-time join token, "kiln1.<id>.<secret>" (<id> 16 and <secret>
  // 64 lowercase hex digits; 256 random bits of secret), valid for `ttl` from
  // now. Only the id, the secret's SHA-256 and the expiry are stored. Errors:
  // InvalidArgument for a ttl that is not positive; Internal naming the file
  // when the token cannot be written.
  virtual absl::StatusOr<std::string> CreateJoinToken(absl::Duration ttl) = 0;

  // Redeems `token` for a certificate of the key in `csr_pem` (a PEM
  // certificate signing request, EC P-256 or RSA of at least 2048 bits, its
  // self-signature valid): returns the PEM certificate, signed by the CA,
  // whose subject CN and only DNS name are `host_name`, for TLS client
  // authentication, valid for kAgentCertValidity. What the request asks for
  // besides its key (subject, extensions) is ignored. On success the token
  // is used up, also for other processes. Errors:
  //   InvalidArgument  the token is not of the form above, `host_name` is not
  //                    a DNS name, or the CSR is not valid (saying why); the
  //                    token is not used up
  //   NotFound         unknown token
  //   PermissionDenied the secret does not match, the token expired (at the
  //                    time given), or it was already used
  //   Internal         a token file cannot be read or written (naming it)
  // Makes sure the controller's certificate holds every name of `names`
  // (DNS names or IP addresses agents dial): when one is missing, the
  // certificate is made again, with the same key, for its names and the
  // missing ones, signed by the CA and written to controller.pem. Agents
  // trust the CA, so they accept the new certificate. Not to be called while
  // another thread uses controller_cert_pem(). Errors: InvalidArgument naming
  // a name that is neither; Internal naming the file when it cannot be
  // written.
  virtual absl::Status CoverControllerNames(const std::vector<std::string>& names) = 0;

  virtual absl::StatusOr<std::string> RedeemJoinToken(const std::string& token,
                                                      const std::string& csr_pem,
                                                      const std::string& host_name) = 0;
};

// Opens the PKI in `dir`, making it first when `dir` is missing or empty: a
// new CA, and a controller certificate for `controller_names` (each a DNS
// name or an IPv4/IPv6 address, the certificate's subject alternative names;
// the first is also its CN), for TLS server and client authentication. An
// existing PKI is used as it is: `controller_names` are then not checked
// against its certificate. Errors: InvalidArgument when a new PKI gets no
// name or a name that is neither; DataLoss naming the file when the directory
// holds some of the PKI's files but not all, or one that does not parse or
// does not match its key or the CA (it is never replaced: remove the
// directory to start over); Internal naming the path when it cannot be made
// or read. The result is owned by the caller.
absl::StatusOr<std::unique_ptr<Pki>> OpenOrCreatePki(
    const std::string& dir, const std::vector<std::string>& controller_names,
    PkiOptions options = {});

// What an agent makes to join: a new EC P-256 private key and a certificate
// signing request for it, CN `host_name`, both PEM. Errors: InvalidArgument
// when `host_name` is not a DNS name; Internal when OpenSSL fails.
struct KeyAndCsr {
  std::string key_pem;
  std::string csr_pem;
};
absl::StatusOr<KeyAndCsr> MakeKeyAndCsr(const std::string& host_name);

// The subject common name of the PEM certificate `cert_pem` (an agent's is
// its host name). Errors: InvalidArgument when it does not parse or has no
// common name.
absl::StatusOr<std::string> CertificateCommonName(const std::string& cert_pem);

// OK when `cert_pem` (the peer's certificate, PEM) was signed by the CA whose
// certificate is `ca_pem` and is valid now. Errors: InvalidArgument when
// either does not parse; Unauthenticated saying why the certificate is
// refused (signed by another CA, expired, ...).
absl::Status VerifyPeerCertificate(const std::string& ca_pem, const std::string& cert_pem);

}  // namespace kiln::agent

#endif  // KILN_AGENT_PKI_H_
