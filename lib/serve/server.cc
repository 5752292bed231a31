// The server's transport (kiln/serve/server.h): HTTP/1.1 with Boost.Beast on
// Boost.Asio. Connections are read and written asynchronously on a few I/O
// threads, so a slow or idle client holds no thread; each whole request is
// handed to a pool of worker threads, which call the engine (a
// CreateTrainingJob may wait for the journal), and the response goes back to
// the connection's strand.
#include "kiln/serve/server.h"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "serve/api.h"

namespace kiln::serve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

using internal::Api;
using internal::HttpRequest;
using internal::HttpResponse;

class ServerImpl;

// One connection: requests read one at a time, each answered before the next
// is read (HTTP/1.1 keep-alive; no pipelining).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, ServerImpl& server);
  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }

 private:
  void Read();
  void OnRead(beast::error_code ec);
  // `answered`: the answer to a request Answer took (the server counts it
  // finished once written).
  void Write(HttpResponse response, bool close, bool answered);
  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  ServerImpl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
};

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(ServerOptions options)
      : options_(options),
        api_(std::move(options.accounts), std::move(options.engines), std::move(options.region),
             options.allow_fault_injection),
        ioc_(std::make_unique<net::io_context>(options_.io_threads)),
        acceptor_(std::make_unique<tcp::acceptor>(net::make_strand(*ioc_))),
        workers_(static_cast<size_t>(std::max(1, options_.worker_threads))) {}

  ~ServerImpl() override { Shutdown(); }

  absl::Status Listen() {
    beast::error_code ec;
    const net::ip::address address = net::ip::make_address(options_.host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("ServerOptions.host '", options_.host, "' is not an IPv4 or IPv6 address"));
    }
    const tcp::endpoint endpoint(address, options_.port);
    acceptor_->open(endpoint.protocol(), ec);
    if (!ec) acceptor_->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(endpoint, ec);
    if (!ec) acceptor_->listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
    }
    port_ = acceptor_->local_endpoint().port();
    Accept();
    for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
      threads_.emplace_back([this] { ioc_->run(); });
    }
    return absl::OkStatus();
  }

  uint16_t port() const override { return port_; }

  void Shutdown() override {
    if (shut_down_.exchange(true)) return;
    if (threads_.empty()) return;  // (never listened)
    net::dispatch(acceptor_->get_executor(), [this] {
      beast::error_code ec;
      acceptor_->close(ec);
    });
    // Requests being answered finish; then every connection goes.
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &in_flight_));
    }
    workers_.join();
    ioc_->stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    // The connections go with the handlers that hold them, destroyed with
    // the context.
    acceptor_.reset();
    ioc_.reset();
  }

  // A request handed to a worker, and its answer back on `connection`'s strand.
  template <typename Done>
  void Answer(HttpRequest request, Done done) {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    net::post(workers_, [this, request = std::move(request), done = std::move(done)]() mutable {
      done(api_.Handle(request, absl::Now()));
    });
  }

  // An answer Answer computed has been written (or could not be).
  void Answered() {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  const ServerOptions& options() const { return options_; }
  bool shutting_down() const { return shut_down_.load(); }

 private:
  void Accept() {
    acceptor_->async_accept(net::make_strand(*ioc_), [this](beast::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor_->is_open()) return;
      } else {
        std::make_shared<Connection>(std::move(s), *this)->Start();
      }
      Accept();
    });
  }

  const ServerOptions options_;
  const Api api_;
  std::unique_ptr<net::io_context> ioc_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  net::thread_pool workers_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  std::atomic<bool> shut_down_{false};
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

Connection::Connection(tcp::socket socket, ServerImpl& server)
    : stream_(std::move(socket)), server_(server) {}

void Connection::Read() {
  parser_.emplace();
  parser_->body_limit(server_.options().max_body_bytes);
  parser_->header_limit(16 * 1024);
  stream_.expires_after(
      std::chrono::milliseconds(absl::ToInt64Milliseconds(server_.options().request_timeout)));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

void Connection::OnRead(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    Write(internal::ErrorResponse(413, "ValidationException",
                                  absl::StrCat("the request body is larger than ",
                                               server_.options().max_body_bytes, " bytes")),
          /*close=*/true, /*answered=*/false);
    return;
  }
  if (ec) {
    Close();  // the client went, timed out, or sent what is not HTTP
    return;
  }
  http::request<http::string_body> req = parser_->release();
  version_ = req.version();
  keep_alive_ = req.keep_alive() && !server_.shutting_down();
  HttpRequest request;
  request.method = std::string(req.method_string());
  request.target = std::string(req.target());
  for (const auto& field : req) {
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  request.body = std::move(req.body());
  stream_.expires_never();  // (the worker's time is not the client's)
  server_.Answer(std::move(request), [self = shared_from_this()](HttpResponse response) {
    net::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
      self->Write(std::move(response), !self->keep_alive_, /*answered=*/true);
    });
  });
}

void Connection::Write(HttpResponse response, bool close, bool answered) {
  auto res = std::make_shared<http::response<http::string_body>>(
      static_cast<http::status>(response.status), version_);
  res->set(http::field::content_type, response.content_type);
  static std::atomic<uint64_t> next_id{0};
  res->set("x-amzn-RequestId", absl::StrCat("kiln-", next_id.fetch_add(1) + 1));
  res->keep_alive(!close);
  res->body() = std::move(response.body);
  res->prepare_payload();
  stream_.expires_after(
      std::chrono::milliseconds(absl::ToInt64Milliseconds(server_.options().request_timeout)));
  http::async_write(
      stream_, *res,
      [self = shared_from_this(), res, close, answered](beast::error_code ec, size_t) {
        if (answered) self->server_.Answered();
        if (ec || close) {
          self->Close();
          return;
        }
        self->Read();
      });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> StartServer(ServerOptions options) {
  if (options.accounts.empty()) {
    return absl::InvalidArgumentError("ServerOptions.accounts: at least one key is needed");
  }
  for (const Account& a : options.accounts) {
    auto it = options.engines.find(a.account_id);
    if (it == options.engines.end() || it->second == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("ServerOptions.engines: no engine for account ", a.account_id, " (key ",
                       a.access_key_id, ")"));
    }
  }
  auto server = std::make_unique<ServerImpl>(std::move(options));
  absl::Status s = server->Listen();
  if (!s.ok()) return s;
  return server;
}

}  // namespace kiln::serve
