// FaultProxy: a TCP proxy on a free loopback port in front of an HTTP server
// (moto), one request per connection, that injects faults on command:
// answers with an error status (or any answer) instead of forwarding, cuts a
// response after some bytes (every response, or those of chosen requests),
// drops chosen requests unanswered, refuses everything (the endpoint is
// down), tampers with the request's signature, or calls a hook before
// forwarding.
#ifndef KILN_TESTS_AWS_FAULT_PROXY_H_
#define KILN_TESTS_AWS_FAULT_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <list>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kiln::aws::testing {

class FaultProxy {
 public:
  explicit FaultProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    ::listen(listen_fd_, 64);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~FaultProxy() {
    stop_.store(true);
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
    absl::MutexLock lock(&mu_);
    for (auto& t : workers_) t.join();
  }

  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }

  // The next `n` requests get `status` with an S3 error `code` (503 SlowDown,
  // 500 InternalError...) instead of being forwarded.
  void FailNext(int n, int status, std::string code) {
    absl::MutexLock lock(&mu_);
    fail_next_ = n;
    fail_status_ = status;
    fail_code_ = std::move(code);
  }
  // Every request whose head contains `needle` gets `status` with `code`
  // (empty `needle`: none).
  void FailMatching(std::string needle, int status, std::string code) {
    absl::MutexLock lock(&mu_);
    fail_needle_ = std::move(needle);
    needle_status_ = status;
    needle_code_ = std::move(code);
  }
  // The next forwarded response is cut after `bytes` bytes (headers
  // included); with `then_down`, every later connection is closed at once.
  void CutNextResponse(int64_t bytes, bool then_down) {
    absl::MutexLock lock(&mu_);
    cut_after_ = bytes;
    down_after_cut_ = then_down;
  }
  void SetDown(bool down) {
    absl::MutexLock lock(&mu_);
    down_ = down;
  }
  // Changes one character of the signature of every request from now on.
  void TamperSignatures(bool on) {
    absl::MutexLock lock(&mu_);
    tamper_ = on;
  }
  // Called with each request's head (request line and headers) before it is
  // forwarded, on the proxy's thread.
  void OnRequest(std::function<void(const std::string& head)> hook) {
    absl::MutexLock lock(&mu_);
    hook_ = std::move(hook);
  }
  // Rules for chosen requests: those whose head (request line and headers)
  // starts with `method` and a space and contains `needle` ("": any). A rule
  // serves the next `times` matching requests (-1: all of them). Rules apply
  // in the order added (a request takes the first matching rule with uses
  // left) and before FailNext, FailMatching and CutNextResponse.
  //
  // Forwards the request and cuts its response after `bytes` bytes (headers
  // included): the server has acted on the request, the client never learns
  // how it ended.
  void CutMatching(std::string method, std::string needle, int64_t bytes, int times = 1) {
    absl::MutexLock lock(&mu_);
    rules_.push_back({std::move(method), std::move(needle), times, bytes, 0, "", false});
  }
  // Resets the connection without forwarding the request: the server never
  // acted on it, and the client cannot tell this from a cut answer.
  void DropMatching(std::string method, std::string needle, int times = 1) {
    absl::MutexLock lock(&mu_);
    rules_.push_back({std::move(method), std::move(needle), times, -1, 0, "", true});
  }
  // Answers `status` with `body` (an XML document) instead of forwarding.
  void AnswerMatching(std::string method, std::string needle, int status, std::string body,
                      int times = 1) {
    absl::MutexLock lock(&mu_);
    rules_.push_back(
        {std::move(method), std::move(needle), times, -1, status, std::move(body), false});
  }
  void ClearRules() {
    absl::MutexLock lock(&mu_);
    rules_.clear();
  }
  // How many requests so far (forwarded or not) matched `method` and `needle`
  // as rules do.
  int RequestsMatching(const std::string& method, const std::string& needle) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const std::string& head : heads_) n += Matches(head, method, needle) ? 1 : 0;
    return n;
  }
  // An S3 error document with `code`.
  static std::string S3Error(const std::string& code) {
    return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>", code,
                        "</Code><Message>injected by the test</Message></Error>");
  }
  int requests() const { return requests_.load(); }

 private:
  struct Rule {
    std::string method;
    std::string needle;
    int times;
    int64_t cut;  // >= 0: forward and cut; else answer (or drop)
    int status;
    std::string body;
    bool drop;  // neither forward nor answer
  };

  static bool Matches(const std::string& head, const std::string& method,
                      const std::string& needle) {
    return head.compare(0, method.size() + 1, method + " ") == 0 &&
           head.find(needle) != std::string::npos;
  }

  void Accept() {
    while (!stop_.load()) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (stop_.load()) return;
        continue;
      }
      absl::MutexLock lock(&mu_);
      workers_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  static bool WriteAll(int fd, absl::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  void Serve(int client) {
    std::string request;
    char buf[65536];
    size_t head_end = std::string::npos;
    int64_t content_length = 0;
    while (true) {
      if (head_end == std::string::npos) {
        head_end = request.find("\r\n\r\n");
        if (head_end != std::string::npos) {
          std::string lower = absl::AsciiStrToLower(request.substr(0, head_end));
          size_t cl = lower.find("\r\ncontent-length:");
          if (cl != std::string::npos) {
            size_t eol = lower.find("\r\n", cl + 2);
            absl::SimpleAtoi(absl::StripAsciiWhitespace(
                                 absl::string_view(lower).substr(cl + 17, eol - cl - 17)),
                             &content_length);
          }
        }
      }
      if (head_end != std::string::npos &&
          static_cast<int64_t>(request.size()) >= static_cast<int64_t>(head_end) + 4 + content_length) {
        break;
      }
      ssize_t n = ::recv(client, buf, sizeof(buf), 0);
      if (n <= 0) {
        ::close(client);
        return;
      }
      request.append(buf, static_cast<size_t>(n));
    }
    requests_.fetch_add(1);
    int status = 0;
    std::string body;
    int64_t cut = -1;
    bool tamper = false;
    bool drop = false;
    std::function<void(const std::string&)> hook;
    {
      absl::MutexLock lock(&mu_);
      const std::string head = request.substr(0, head_end);
      heads_.push_back(head);
      if (down_) {
        ::close(client);
        return;
      }
      Rule* rule = nullptr;
      for (Rule& r : rules_) {
        if (r.times != 0 && Matches(head, r.method, r.needle)) {
          rule = &r;
          break;
        }
      }
      if (rule != nullptr) {
        if (rule->times > 0) --rule->times;
        if (rule->drop) {
          drop = true;
        } else if (rule->cut >= 0) {
          cut = rule->cut;
        } else {
          status = rule->status;
          body = rule->body;
        }
      } else if (!fail_needle_.empty() && head.find(fail_needle_) != std::string::npos) {
        status = needle_status_;
        body = S3Error(needle_code_);
      } else if (fail_next_ > 0) {
        --fail_next_;
        status = fail_status_;
        body = S3Error(fail_code_);
      } else if (cut_after_ >= 0) {
        cut = cut_after_;
        cut_after_ = -1;
        if (down_after_cut_) down_ = true;
      }
      tamper = tamper_;
      hook = hook_;
    }
    if (drop) {
      linger l{1, 0};  // an abortive close: the client sees a reset
      ::setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      ::close(client);
      return;
    }
    if (status != 0) {
      WriteAll(client, absl::StrCat("HTTP/1.1 ", status, " Injected\r\nContent-Type: application/xml\r\n"
                                    "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                                    body));
      ::close(client);
      return;
    }
    if (hook) hook(request.substr(0, head_end));
    if (tamper) {
      size_t sig = request.find("Signature=");
      if (sig != std::string::npos && sig < head_end) {
        char& c = request[sig + 10];
        c = c == '0' ? '1' : '0';
      }
    }
    int up = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        !WriteAll(up, request)) {
      ::close(up);
      ::close(client);
      return;
    }
    int64_t relayed = 0;
    while (true) {
      ssize_t n = ::recv(up, buf, sizeof(buf), 0);
      if (n <= 0) break;
      int64_t take = n;
      if (cut >= 0 && relayed + take > cut) take = cut - relayed;
      if (take > 0 && !WriteAll(client, absl::string_view(buf, static_cast<size_t>(take)))) break;
      relayed += take;
      if (cut >= 0 && relayed >= cut) break;
    }
    ::close(up);
    // An abortive close when cutting, so the client sees a reset.
    if (cut >= 0) {
      linger l{1, 0};
      ::setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    ::close(client);
  }

  const int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::list<std::thread> workers_ ABSL_GUARDED_BY(mu_);
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_status_ ABSL_GUARDED_BY(mu_) = 0;
  std::string fail_code_ ABSL_GUARDED_BY(mu_);
  std::string fail_needle_ ABSL_GUARDED_BY(mu_);
  int needle_status_ ABSL_GUARDED_BY(mu_) = 0;
  std::string needle_code_ ABSL_GUARDED_BY(mu_);
  int64_t cut_after_ ABSL_GUARDED_BY(mu_) = -1;
  bool down_after_cut_ ABSL_GUARDED_BY(mu_) = false;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  bool tamper_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(const std::string&)> hook_ ABSL_GUARDED_BY(mu_);
  std::list<Rule> rules_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> heads_ ABSL_GUARDED_BY(mu_);  // of every request, in order
};

}  // namespace kiln::aws::testing

#endif  // KILN_TESTS_AWS_FAULT_PROXY_H_
