// A load generator for `kiln serve` and peers that speak the same protocol
// (botocore's JSON 1.1: POST / with X-Amz-Target), driven by serve_bench.py.
//
// Opens N keep-alive connections to 127.0.0.1:PORT from one epoll thread and
// sends requests built and SigV4-signed once up front (a signature stays valid
// for 5 minutes), one in flight per connection, in one of two modes:
//   closed loop (--rate 0): each connection sends its next request as soon as
//     the previous answer is in; latency is send to answer.
//   open loop (--rate R): R requests/s in all, each connection on a fixed
//     schedule of its own (R/N a second, staggered); latency is measured from
//     the time a request was due, not from when it could be sent, so a slow
//     answer that holds up the next request counts against the server
//     (no coordinated omission).
// With --once every body is sent once (for CreateTrainingJob) and the run ends
// when they are all answered.
//
//   serve_load --port P --op DescribeTrainingJob --bodies FILE
//              [--connections 32] [--seconds 10] [--rate 0] [--warmup 1]
//              [--key AKID] [--secret SECRET] [--region us-east-1] [--once]
//
// FILE holds one JSON body a line; connections take them round-robin. Prints
// one line of key=value: requests, seconds, rps, errors (non-200 answers),
// p50/p90/p99/max latency in microseconds, reconnects (new connections after
// a Connection: close).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "aws/internal/sigv4.h"

namespace {

namespace sig = ::kiln::aws::internal;

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Options {
  int port = 0;
  std::string op;
  std::string bodies;
  int connections = 32;
  double seconds = 10;
  double rate = 0;  // 0: closed loop
  double warmup = 1;
  std::string key = "AKID";
  std::string secret = "SECRET";
  std::string region = "us-east-1";
  bool once = false;
};

std::string Signed(const Options& o, const std::string& body, const std::string& date) {
  const sig::SigV4Request r{std::string("POST"),
                            std::string("/"),
                            {},
                            {{"host", absl::StrCat("127.0.0.1:", o.port)},
                             {"x-amz-date", date},
                             {"x-amz-target", absl::StrCat("SageMaker.", o.op)}},
                            sig::Sha256Hex(body)};
  const sig::SigV4Result s =
      sig::SignV4(r, sig::Credentials{o.key, o.secret, ""}, o.region, "sagemaker", date);
  return absl::StrCat("POST / HTTP/1.1\r\nHost: 127.0.0.1:", o.port, "\r\nX-Amz-Date: ", date,
                      "\r\nX-Amz-Target: SageMaker.", o.op,
                      "\r\nContent-Type: application/x-amz-json-1.1\r\nAuthorization: ",
                      s.authorization, "\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
}

struct Conn {
  int fd = -1;
  std::string in;
  size_t next_body = 0;
  bool busy = false;
  int64_t started = 0;  // when the request in flight was due (open) or sent (closed)
  int64_t due = 0;      // open loop: when the next request is due
};

// Parses one whole response at the front of `in`: returns its length (0: not
// whole yet, -1: malformed) and sets `status`, and `close` when the server
// closes the connection after it (Connection: close; moto's server, Werkzeug,
// answers one request a connection).
long ParseResponse(const std::string& in, int& status, bool& closes) {
  const size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  // Header names in any case (moto's server writes Content-Length, others may not).
  size_t length = 0;
  bool have_length = false;
  closes = false;
  size_t line = in.find("\r\n");
  while (line < end) {
    const size_t next = in.find("\r\n", line + 2);
    const size_t colon = in.find(':', line + 2);
    if (colon < next && colon - line - 2 == 14 &&
        strncasecmp(in.data() + line + 2, "content-length", 14) == 0) {
      char* stop = nullptr;
      length = std::strtoul(in.c_str() + colon + 1, &stop, 10);
      have_length = stop != in.c_str() + colon + 1;
    }
    if (colon < next && colon - line - 2 == 10 &&
        strncasecmp(in.data() + line + 2, "connection", 10) == 0) {
      closes = strncasecmp(in.data() + colon + 1, " close", 6) == 0;
    }
    line = next;
  }
  if (!have_length || in.size() < 12) return -1;
  if (in.size() < end + 4 + length) return 0;
  status = std::atoi(in.c_str() + 9);
  return static_cast<long>(end + 4 + length);
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

int Usage() {
  std::fprintf(stderr,
               "usage: serve_load --port P --op OP --bodies FILE [--connections N] [--seconds S]"
               " [--rate R] [--warmup S] [--key K] [--secret S] [--region R] [--once]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--once") {
      o.once = true;
      continue;
    }
    if (i + 1 >= argc) return Usage();
    const std::string v = argv[++i];
    bool ok = true;
    if (a == "--port") {
      ok = absl::SimpleAtoi(v, &o.port);
    } else if (a == "--op") {
      o.op = v;
    } else if (a == "--bodies") {
      o.bodies = v;
    } else if (a == "--connections") {
      ok = absl::SimpleAtoi(v, &o.connections) && o.connections > 0;
    } else if (a == "--seconds") {
      ok = absl::SimpleAtod(v, &o.seconds);
    } else if (a == "--rate") {
      ok = absl::SimpleAtod(v, &o.rate);
    } else if (a == "--warmup") {
      ok = absl::SimpleAtod(v, &o.warmup);
    } else if (a == "--key") {
      o.key = v;
    } else if (a == "--secret") {
      o.secret = v;
    } else if (a == "--region") {
      o.region = v;
    } else {
      ok = false;
    }
    if (!ok) return Usage();
  }
  if (o.port <= 0 || o.op.empty() || o.bodies.empty()) return Usage();

  std::vector<std::string> requests;
  {
    std::ifstream f(o.bodies);
    const std::string date = sig::AmzDate(absl::Now());
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) requests.push_back(Signed(o, line, date));
    }
  }
  if (requests.empty()) {
    std::fprintf(stderr, "serve_load: no bodies in %s\n", o.bodies.c_str());
    return 2;
  }

  const int ep = epoll_create1(0);
  std::vector<Conn> conns(static_cast<size_t>(o.connections));
  for (size_t i = 0; i < conns.size(); ++i) {
    conns[i].fd = Connect(o.port);
    if (conns[i].fd < 0) {
      std::fprintf(stderr, "serve_load: cannot connect to port %d\n", o.port);
      return 1;
    }
    conns[i].next_body = i;
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &e);
  }

  const bool open_loop = o.rate > 0;
  const int64_t interval =
      open_loop ? static_cast<int64_t>(1e9 * static_cast<double>(o.connections) / o.rate) : 0;
  const int64_t t0 = NowNs();
  const int64_t measure_from = o.once ? t0 : t0 + static_cast<int64_t>(o.warmup * 1e9);
  const int64_t end = measure_from + static_cast<int64_t>(o.seconds * 1e9);
  for (size_t i = 0; i < conns.size(); ++i) {
    conns[i].due = t0 + interval * static_cast<int64_t>(i) / o.connections;
  }

  std::vector<int64_t> latencies;  // ns, measured requests only
  latencies.reserve(1 << 20);
  size_t errors = 0;
  size_t reconnects = 0;
  size_t sent_once = 0;
  size_t answered_once = 0;
  int64_t last_answer = t0;

  // Sends conn `c`'s next request; false when nothing is left to send.
  auto send = [&](Conn& c, int64_t started) {
    size_t index;
    if (o.once) {
      if (sent_once >= requests.size()) return false;
      index = sent_once++;
    } else {
      index = c.next_body % requests.size();
      c.next_body += conns.size();
    }
    const std::string& r = requests[index];
    size_t off = 0;
    while (off < r.size()) {
      const ssize_t n = write(c.fd, r.data() + off, r.size() - off);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        // The socket buffer is full (or the connection is not up yet): rare
        // for requests this small; wait until it drains.
        pollfd p{c.fd, POLLOUT, 0};
        poll(&p, 1, 1000);
      } else {
        std::fprintf(stderr, "serve_load: write: %s\n", std::strerror(errno));
        std::exit(1);
      }
    }
    c.busy = true;
    c.started = started;
    return true;
  };

  if (!open_loop) {
    for (Conn& c : conns) send(c, NowNs());
  }
  std::vector<epoll_event> events(conns.size());
  char buf[65536];
  while (true) {
    int64_t now = NowNs();
    if (o.once ? answered_once >= requests.size() : now >= end) break;
    int timeout_ms = 100;
    if (open_loop) {
      for (Conn& c : conns) {
        if (!c.busy && c.due <= now) {
          send(c, c.due);
          c.due += interval;
        }
      }
      int64_t next = end;
      for (const Conn& c : conns) {
        if (!c.busy) next = std::min(next, c.due);
      }
      now = NowNs();
      timeout_ms = next <= now ? 0 : static_cast<int>((next - now + 999'999) / 1'000'000);
      timeout_ms = std::min(timeout_ms, 100);
      // epoll's timeout is in ms: sleep short waits more finely.
      if (next > now && next - now < 1'000'000) {
        timespec ts{0, static_cast<long>(next - now)};
        nanosleep(&ts, nullptr);
        timeout_ms = 0;
      }
    }
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int k = 0; k < n; ++k) {
      Conn& c = conns[events[static_cast<size_t>(k)].data.u64];
      const ssize_t got = read(c.fd, buf, sizeof(buf));
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        std::fprintf(stderr, "serve_load: the server closed a connection\n");
        return 1;
      }
      if (got < 0) continue;
      c.in.append(buf, static_cast<size_t>(got));
      while (true) {
        int status = 0;
        bool closing = false;
        const long length = ParseResponse(c.in, status, closing);
        if (length < 0) {
          std::fprintf(stderr, "serve_load: malformed response: %.200s\n", c.in.c_str());
          return 1;
        }
        if (length == 0) break;
        if (status != 200) {
          if (errors < 3) {
            std::fprintf(stderr, "serve_load: status %d: %.300s\n", status,
                         c.in.substr(0, 300).c_str());
          }
          ++errors;
        }
        c.in.erase(0, static_cast<size_t>(length));
        const int64_t done = NowNs();
        last_answer = done;
        // Closed loop: the answers that arrive in the measured window (a
        // slow server's long requests count too); open loop: the requests
        // due in it.
        if (open_loop ? c.started >= measure_from && c.started < end
                      : done >= measure_from && (o.once || done < end)) {
          latencies.push_back(done - c.started);
        }
        c.busy = false;
        if (o.once) ++answered_once;
        if (closing) {
          // A new connection for the next request (its set-up counts in
          // that request's latency).
          epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
          close(c.fd);
          c.in.clear();
          c.fd = Connect(o.port);
          if (c.fd < 0) {
            std::fprintf(stderr, "serve_load: cannot connect to port %d\n", o.port);
            return 1;
          }
          ++reconnects;
          epoll_event e{};
          e.events = EPOLLIN;
          e.data.u64 = static_cast<uint64_t>(&c - conns.data());
          epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &e);
          if (!open_loop) send(c, NowNs());
          break;
        }
        if (!open_loop) send(c, done);
      }
    }
  }
  const int64_t stop = o.once ? last_answer : end;
  for (Conn& c : conns) close(c.fd);
  close(ep);

  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    if (latencies.empty()) return 0.0;
    const size_t i = std::min(latencies.size() - 1,
                              static_cast<size_t>(p * static_cast<double>(latencies.size())));
    return static_cast<double>(latencies[i]) / 1e3;
  };
  const double secs = static_cast<double>(stop - measure_from) / 1e9;
  std::printf(
      "requests=%zu seconds=%.3f rps=%.1f errors=%zu p50_us=%.1f p90_us=%.1f p99_us=%.1f "
      "max_us=%.1f reconnects=%zu\n",
      latencies.size(), secs, static_cast<double>(latencies.size()) / secs, errors, pct(0.50),
      pct(0.90), pct(0.99), latencies.empty() ? 0.0 : static_cast<double>(latencies.back()) / 1e3,
      reconnects);
  return errors == 0 ? 0 : 3;
}
