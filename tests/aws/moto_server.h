// A moto server (a real S3 endpoint) for tests: started on a free loopback
// port by the test itself, stopped with it. Reset() wipes every bucket and
// turns SigV4 checking on with a fresh IAM user, whose key it returns; the aws
// CLI (an independent client) seeds buckets and reads objects back.
//
// If python3 cannot import moto, Start() fails with the reason, and so do
// the tests (cmake/install-deps.sh installs the aws CLI and warns when moto,
// which Debian 12 does not package, is missing): they never pass silently.
#ifndef KILN_TESTS_AWS_MOTO_SERVER_H_
#define KILN_TESTS_AWS_MOTO_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "aws/internal/http.h"
#include "aws/internal/s3_client.h"
#include "aws/internal/sigv4.h"
#include "kiln/aws/s3.h"

#ifndef KILN_PYTHON3
#define KILN_PYTHON3 "python3"
#endif
#ifndef KILN_AWS_CLI
#define KILN_AWS_CLI "aws"
#endif

namespace kiln::aws::testing {

// A loopback port nothing listens on right now.
inline int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Quotes for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

class MotoServer {
 public:
  MotoServer() = default;
  MotoServer(const MotoServer&) = delete;
  MotoServer& operator=(const MotoServer&) = delete;
  ~MotoServer() { Stop(); }

  absl::Status Start() {
    if (std::system(absl::StrCat(KILN_PYTHON3, " -c 'import moto.server' 2>/dev/null").c_str()) !=
        0) {
      return absl::FailedPreconditionError(absl::StrCat(
          KILN_PYTHON3, " cannot import moto.server: the AWS tests need moto >= 5 (pip; Debian 12 has no package)"));
    }
    port_ = FreePort();
    char log_template[] = "/tmp/kiln-moto-XXXXXX";
    int log_fd = ::mkstemp(log_template);
    log_path_ = log_template;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      std::string port = std::to_string(port_);
      ::execlp(KILN_PYTHON3, KILN_PYTHON3, "-m", "moto.server", "-H", "127.0.0.1", "-p",
               port.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(log_fd);
    internal::HttpClient http({});
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      int wstatus = 0;
      if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::InternalError(absl::StrCat("moto exited at start: ", Log()));
      }
      auto r = http.Send({"GET", endpoint() + "/moto-api/", {}, {}});
      if (r.ok() && r->status == 200) return absl::OkStatus();
      absl::SleepFor(absl::Milliseconds(50));
    }
    return absl::DeadlineExceededError(absl::StrCat("moto did not answer in 60 s: ", Log()));
  }

  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (!log_path_.empty()) {
      ::unlink(log_path_.c_str());
      log_path_.clear();
    }
  }

  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }
  int port() const { return port_; }

  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Wipes all state, creates an IAM user allowed everything and its access
  // key, then turns signature checking on (unless `check_signatures` is
  // false). Returns the key.
  //
  // moto 5.2.1's check decodes the query string (and '+' in the path) before
  // it canonicalises the request, so it rejects correct signatures, the aws
  // CLI's included, of requests with an escaped '/' in the query (a listing
  // prefix "a/b/") or a '+' in a key. Tests that need those turn checking
  // off; the others keep it on.
  absl::StatusOr<AwsCredentials> Reset(bool check_signatures = true) {
    internal::HttpClient http({});
    auto post = [&](const std::string& path, const std::string& body) -> absl::Status {
      internal::HttpRequest r{"POST", endpoint() + path, {{"Content-Type", "text/plain"}}, body};
      auto resp = http.Send(r);
      if (!resp.ok()) return resp.status();
      if (resp->status != 200) {
        return absl::InternalError(absl::StrCat(path, ": HTTP ", resp->status, " ", resp->body));
      }
      return absl::OkStatus();
    };
    if (absl::Status s = post("/moto-api/reset", ""); !s.ok()) return s;
    // The next three requests are not checked: the IAM calls below.
    if (absl::Status s = post("/moto-api/reset-auth", check_signatures ? "3" : "inf"); !s.ok()) {
      return s;
    }
    std::string body;
    for (const std::string& action :
         {std::string("Action=CreateUser&UserName=kiln&Version=2010-05-08"),
          std::string("Action=PutUserPolicy&UserName=kiln&PolicyName=all&PolicyDocument=") +
              internal::UriEncode(
                  R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]})",
                  false) +
              "&Version=2010-05-08",
          std::string("Action=CreateAccessKey&UserName=kiln&Version=2010-05-08")}) {
      auto resp = SignedIam(http, action);
      if (!resp.ok()) return resp.status();
      body = *resp;
    }
    AwsCredentials key{internal::XmlText(body, "AccessKeyId"),
                       internal::XmlText(body, "SecretAccessKey"), ""};
    if (key.access_key_id.empty() || key.secret_access_key.empty()) {
      return absl::InternalError(absl::StrCat("CreateAccessKey: ", body));
    }
    return key;
  }

  // S3 options for this server with `key`: path-style, quick retries.
  S3Options Options(const AwsCredentials& key) const {
    S3Options o;
    o.region = "us-east-1";
    o.endpoint_url = endpoint();
    o.credentials = key;
    o.addressing_style = S3AddressingStyle::kPath;
    o.retry_base_delay = absl::Milliseconds(5);
    o.retry_max_delay = absl::Milliseconds(50);
    return o;
  }

  // Runs `aws --endpoint-url <this> ARGS...` with `key`; returns its exit
  // status, and its output (stdout and stderr) in `*output`.
  int Aws(const AwsCredentials& key, const std::vector<std::string>& args,
          std::string* output = nullptr) const {
    std::string cmd = absl::StrCat(
        "env AWS_ACCESS_KEY_ID=", ShellQuote(key.access_key_id),
        " AWS_SECRET_ACCESS_KEY=", ShellQuote(key.secret_access_key),
        " AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null ",
        KILN_AWS_CLI, " --endpoint-url ", endpoint());
    for (const auto& a : args) absl::StrAppend(&cmd, " ", ShellQuote(a));
    absl::StrAppend(&cmd, " 2>&1");
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return -1;
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    int status = ::pclose(p);
    if (output != nullptr) *output = out;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  // An IAM Query call, signed (with any key: moto does not check these).
  absl::StatusOr<std::string> SignedIam(internal::HttpClient& http, const std::string& body) {
    const std::string date = internal::AmzDate(absl::Now());
    const std::string host = absl::StrCat("127.0.0.1:", port_);
    internal::SigV4Request sr;
    sr.method = "POST";
    sr.canonical_uri = "/";
    sr.headers = {{"host", host},
                  {"x-amz-date", date},
                  {"content-type", "application/x-www-form-urlencoded; charset=utf-8"}};
    sr.payload_hash = internal::Sha256Hex(body);
    internal::Credentials anyone{"AKIDKILNSETUP", "setup", ""};
    internal::SigV4Result sig = internal::SignV4(sr, anyone, "us-east-1", "iam", date);
    internal::HttpRequest r{"POST", endpoint() + "/", sr.headers, body};
    r.headers.emplace_back("Authorization", sig.authorization);
    auto resp = http.Send(r);
    if (!resp.ok()) return resp.status();
    if (resp->status != 200) {
      return absl::InternalError(absl::StrCat("IAM ", body, ": HTTP ", resp->status, " ", resp->body));
    }
    return resp->body;
  }

  int port_ = 0;
  pid_t pid_ = -1;
  std::string log_path_;
};

}  // namespace kiln::aws::testing

#endif  // KILN_TESTS_AWS_MOTO_SERVER_H_
