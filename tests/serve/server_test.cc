// kiln::serve's server from many connections at once (a TSan target): signed
// requests over raw sockets, keep-alive, against a simulated engine on a
// real-time loop run by a thread of its own; and shutdown with requests in
// flight; the TLS options, and a TLS round trip with kiln's client.
#include "kiln/serve/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "aws/internal/sigv4.h"
#include "core/requests.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/serve/client.h"
#include "kiln/sim/sim.h"

namespace kiln::serve {
namespace {

using ::testing::HasSubstr;

// A self-signed certificate for 127.0.0.1 (P-256) and its key, written as
// PEM to `cert_path` and `key_path`. Returns false on any failure.
bool WriteSelfSignedCertificate(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  bool ok = key != nullptr && cert != nullptr;
  if (ok) {
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
    X509_EXTENSION* san =
        X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    ok = san != nullptr && X509_add_ext(cert, san, -1) == 1 &&
         X509_sign(cert, key, EVP_sha256()) > 0;
    X509_EXTENSION_free(san);
  }
  if (ok) {
    FILE* c = fopen(cert_path.c_str(), "w");
    FILE* k = fopen(key_path.c_str(), "w");
    ok = c != nullptr && k != nullptr && PEM_write_X509(c, cert) == 1 &&
         PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    if (c != nullptr) fclose(c);
    if (k != nullptr) fclose(k);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return ok;
}

// One keep-alive connection to the server, sending signed JSON requests.
class Connection {
 public:
  explicit Connection(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Connection() { close(fd_); }

  // Sends operation `op` with `body`, signed by AKID/secret; returns the HTTP
  // status and sets `response` to the body (status 0: the connection failed).
  int Call(const std::string& op, const std::string& body, std::string& response) {
    if (!ok_) return 0;
    namespace sig = ::kiln::aws::internal;
    const std::string date = sig::AmzDate(absl::Now());
    // (A whole target when it has a '.': "Kiln.ListHosts".)
    const std::string target = op.find('.') != std::string::npos ? op : "SageMaker." + op;
    sig::SigV4Request r;
    r.method = "POST";
    r.canonical_uri = "/";
    r.headers = {{"host", "127.0.0.1"}, {"x-amz-date", date}, {"x-amz-target", target}};
    r.payload_hash = sig::Sha256Hex(body);
    const sig::SigV4Result s =
        sig::SignV4(r, sig::Credentials{"AKID", "secret", ""}, "us-east-1", "sagemaker", date);
    const std::string request = absl::StrCat(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Amz-Date: ", date, "\r\nX-Amz-Target: ", target,
        "\r\nContent-Type: application/x-amz-json-1.1\r\nAuthorization: ", s.authorization,
        "\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
    if (write(fd_, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
      return 0;
    }
    // The response: headers, then Content-Length bytes.
    while (true) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        const std::string head = buffer_.substr(0, end);
        const size_t cl = head.find("Content-Length: ");
        size_t length = 0;
        if (cl == std::string::npos ||
            !absl::SimpleAtoi(head.substr(cl + 16, head.find("\r\n", cl) - cl - 16), &length)) {
          return 0;
        }
        if (buffer_.size() >= end + 4 + length) {
          int status = 0;
          if (!absl::SimpleAtoi(head.substr(9, 3), &status)) return 0;
          response = buffer_.substr(end + 4, length);
          buffer_.erase(0, end + 4 + length);
          return status;
        }
      }
      char chunk[4096];
      const ssize_t n = read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return 0;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string buffer_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = NewRealTimeEventLoop();
    provider_ = sim::NewSimClusterProvider(*loop_);
    EngineOptions options;
    options.loop = loop_.get();
    options.cluster_provider = provider_.get();
    options.account_id = "111122223333";
    engine_ = NewEngine(std::move(options)).value();
    loop_thread_ = std::thread([this] { loop_->Run(); });
    ServerOptions server;
    server.port = 0;
    server.accounts = {Account{"AKID", "secret", "111122223333"}};
    server.engines["111122223333"] = engine_.get();
    server.max_body_bytes = 64 << 10;
    auto started = StartServer(std::move(server));
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    loop_->Stop();
    if (loop_thread_.joinable()) loop_thread_.join();
    engine_.reset();
    provider_.reset();
  }

  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<Engine> engine_;
  std::thread loop_thread_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, ManyConnectionsCreateDescribeAndListAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kJobsEach = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Connection c(server_->port());
      std::string body;
      for (int i = 0; i < kJobsEach; ++i) {
        const std::string name = absl::StrCat("job-", t, "-", i);
        if (c.Call("CreateTrainingJob", ToJson(tests::MinimalRequest(name)), body) != 200) {
          ++failures;
        }
        if (c.Call("DescribeTrainingJob", absl::StrCat("{\"TrainingJobName\":\"", name, "\"}"),
                   body) != 200 ||
            body.find("\"TrainingJobStatus\":\"InProgress\"") == std::string::npos) {
          ++failures;
        }
        if (c.Call("ListTrainingJobs", "{\"MaxResults\":5}", body) != 200) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  Connection c(server_->port());
  std::string body;
  ASSERT_EQ(c.Call("ListTrainingJobs", "{\"MaxResults\":100}", body), 200);
  size_t count = 0;
  for (size_t at = body.find("\"TrainingJobName\""); at != std::string::npos;
       at = body.find("\"TrainingJobName\"", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, size_t{kThreads * kJobsEach});
}

TEST_F(ServerTest, AnEngineErrorTravelsWithItsCodeAndStatus) {
  Connection c(server_->port());
  std::string body;
  EXPECT_EQ(c.Call("StopTrainingJob", "{\"TrainingJobName\":\"nobody\"}", body), 400);
  EXPECT_THAT(body, HasSubstr("\"__type\":\"ResourceNotFound\""));
  EXPECT_EQ(c.Call("CreateTrainingJob", std::string(70 << 10, ' '), body), 413);
}

TEST_F(ServerTest, ListHostsIsAnsweredOnlyWithAHostList) {
  Connection c(server_->port());
  std::string body;
  EXPECT_EQ(c.Call("Kiln.ListHosts", "{}", body), 400);
  EXPECT_THAT(body, HasSubstr("UnknownOperationException"));

  ServerOptions options;
  options.port = 0;
  options.accounts = {Account{"AKID", "secret", "111122223333"}};
  options.engines["111122223333"] = engine_.get();
  std::atomic<int> calls{0};
  options.list_hosts = [&calls] {
    ++calls;
    JsonValue host = JsonValue::Object();
    host.Set("HostName", JsonValue::String("host-1"));
    JsonValue hosts = JsonValue::Array();
    hosts.Push(std::move(host));
    JsonValue out = JsonValue::Object();
    out.Set("Hosts", std::move(hosts));
    return out;
  };
  auto with_hosts = StartServer(std::move(options));
  ASSERT_TRUE(with_hosts.ok()) << with_hosts.status();
  Connection d((*with_hosts)->port());
  EXPECT_EQ(d.Call("Kiln.ListHosts", "{}", body), 200);
  EXPECT_EQ(body, "{\"Hosts\":[{\"HostName\":\"host-1\"}]}");
  EXPECT_EQ(d.Call("Kiln.ListHosts", "", body), 200);
  EXPECT_EQ(d.Call("Kiln.ListHosts", "{\"MaxResults\":1}", body), 400);
  EXPECT_THAT(body, HasSubstr("ValidationException"));
  EXPECT_THAT(body, HasSubstr("Unknown parameter in input: \\\"MaxResults\\\""));
  EXPECT_EQ(calls.load(), 2);
  (*with_hosts)->Shutdown();
}

TEST_F(ServerTest, ShutdownWithConnectionsOpenReturns) {
  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<Connection>(server_->port()));
  std::string body;
  ASSERT_EQ(idle[0]->Call("ListTrainingJobs", "{}", body), 200);
  server_->Shutdown();
  server_->Shutdown();  // (idempotent)
  EXPECT_EQ(idle[1]->Call("ListTrainingJobs", "{}", body), 0);
}

class ServerTlsTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    char dir[] = "/tmp/kiln-server-tls-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    cert_ = dir_ + "/cert.pem";
    key_ = dir_ + "/key.pem";
    ASSERT_TRUE(WriteSelfSignedCertificate(cert_, key_));
  }
  void TearDown() override {
    ServerTest::TearDown();
    std::remove(cert_.c_str());
    std::remove(key_.c_str());
    std::remove((dir_ + "/other-cert.pem").c_str());
    std::remove((dir_ + "/other-key.pem").c_str());
    rmdir(dir_.c_str());
  }

  ServerOptions Options() {
    ServerOptions o;
    o.port = 0;
    o.accounts = {Account{"AKID", "secret", "111122223333"}};
    o.engines["111122223333"] = engine_.get();
    o.tls_certificate_file = cert_;
    o.tls_private_key_file = key_;
    return o;
  }

  std::unique_ptr<Client> ClientOf(uint16_t port, const std::string& ca_bundle) {
    ClientOptions o;
    o.endpoint = absl::StrCat("https://127.0.0.1:", port);
    o.credentials.access_key_id = "AKID";
    o.credentials.secret_access_key = "secret";
    o.ca_bundle = ca_bundle;
    o.timeout = absl::Seconds(10);
    return NewClient(std::move(o)).value();
  }

  std::string dir_, cert_, key_;
};

TEST_F(ServerTlsTest, OneFileWithoutTheOtherIsRefusedNamingTheMissingOption) {
  ServerOptions o = Options();
  o.tls_private_key_file.clear();
  absl::StatusOr<std::unique_ptr<Server>> s = StartServer(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("tls_private_key_file"));
  o = Options();
  o.tls_certificate_file.clear();
  s = StartServer(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("tls_certificate_file"));
}

TEST_F(ServerTlsTest, BadFilesAreRefusedNamingTheFile) {
  ServerOptions o = Options();
  o.tls_certificate_file = dir_ + "/missing.pem";
  absl::StatusOr<std::unique_ptr<Server>> s = StartServer(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("missing.pem"));
  // A key where the certificate should be, and the other way round.
  o = Options();
  o.tls_certificate_file = key_;
  s = StartServer(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("tls_certificate_file: '" + key_ + "'"));
  o = Options();
  o.tls_private_key_file = cert_;
  s = StartServer(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("tls_private_key_file: '" + cert_ + "'"));
  // Another certificate's key.
  ASSERT_TRUE(WriteSelfSignedCertificate(dir_ + "/other-cert.pem", dir_ + "/other-key.pem"));
  o = Options();
  o.tls_private_key_file = dir_ + "/other-key.pem";
  s = StartServer(std::move(o));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("is not the key of the certificate"));
}

TEST_F(ServerTlsTest, ClientsTrustingTheCertificateAreAnsweredOthersAreRefused) {
  absl::StatusOr<std::unique_ptr<Server>> started = StartServer(Options());
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<Server> server = *std::move(started);
  // Several TLS clients at once.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<Client> client = ClientOf(server->port(), cert_);
      for (int i = 0; i < 5; ++i) {
        v1::CreateTrainingJobRequest r = tests::MinimalRequest(absl::StrCat("tls-", t, "-", i));
        if (!client->CreateTrainingJob(r).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // Without the certificate, the system's authorities do not know it.
  absl::StatusOr<v1::ListTrainingJobsResponse> refused =
      ClientOf(server->port(), "")->ListTrainingJobs({});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  // Plain HTTP on the TLS port: that connection fails, the server goes on.
  Connection plain(server->port());
  std::string body;
  EXPECT_EQ(plain.Call("ListTrainingJobs", "{}", body), 0);
  v1::ListTrainingJobsRequest list;
  list.set_max_results(100);
  absl::StatusOr<v1::ListTrainingJobsResponse> listed =
      ClientOf(server->port(), cert_)->ListTrainingJobs(list);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->training_job_summaries_size(), 20);
  server->Shutdown();
}

}  // namespace
}  // namespace kiln::serve
