// The server's transport (kiln/serve/server.h): HTTP/1.1 with Boost.Beast on
// Boost.Asio. Connections are read and written asynchronously on a few I/O
// threads, so a slow or idle client holds no thread. A whole request that
// waits for at most a step of the engine's loop (Describe, List, most Logs
// reads: Api::MayWait) is answered on its I/O thread; any other is handed to
// a pool of worker threads (a CreateTrainingJob may wait for the journal),
// and the response goes back to the connection's strand. With a certificate, every connection is TLS
// (Boost.Asio's OpenSSL stream under Beast's ssl_stream): the same connection
// code on another stream type, with a handshake before the first read.
#include "kiln/serve/server.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kiln/plugin/json_value.h"
#include "serve/api.h"

namespace kiln::serve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

using internal::Api;
using internal::HttpRequest;
using internal::HttpResponse;

class ServerImpl;

// One connection: requests read one at a time, each answered before the next
// is read (HTTP/1.1 keep-alive; no pipelining). `Stream` is beast::tcp_stream
// (plain HTTP) or TlsStream (HTTPS: a handshake first).
template <typename Stream>
class Connection : public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // `tls`: the server's TLS context (TlsStream only).
  template <typename... Tls>
  Connection(tcp::socket socket, ServerImpl& server, Tls&... tls)
      : stream_(std::move(socket), tls...), server_(server) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls) {
        self->Handshake();
      } else {
        self->Read();
      }
    });
  }

 private:
  void Handshake();
  void Read();
  void OnRead(beast::error_code ec);
  // `answered`: the answer to a request Answer took (the server counts it
  // finished once written).
  void Write(HttpResponse response, bool close, bool answered);
  // `graceful`: the server ends an exchange that went well (TLS: with a
  // close_notify, bounded by the request timeout); otherwise the connection
  // just goes.
  void Close(bool graceful);
  void ExpireAfterTimeout();

  Stream stream_;
  ServerImpl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
};

class ServerImpl final : public Server {
 public:
  ServerImpl(ServerOptions options, std::unique_ptr<ssl::context> tls)
      : options_(options),
        tls_(std::move(tls)),
        api_(std::move(options.accounts), std::move(options.engines), std::move(options.logs),
             std::move(options.region), options.allow_fault_injection,
             std::move(options.list_hosts)),
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

  // Answers `request` on the calling thread (an I/O thread: the request must
  // not wait, see Api::MayWait).
  HttpResponse AnswerHere(const HttpRequest& request) {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    return api_.Handle(request, absl::Now());
  }

  // A request handed to a worker; `done` gets the answer there.
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
        if (tls_ != nullptr) {
          std::make_shared<Connection<TlsStream>>(std::move(s), *this, *tls_)->Start();
        } else {
          std::make_shared<Connection<beast::tcp_stream>>(std::move(s), *this)->Start();
        }
      }
      Accept();
    });
  }

  const ServerOptions options_;
  // Shared by every connection's TlsStream (null: plain HTTP).
  const std::unique_ptr<ssl::context> tls_;
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

template <typename Stream>
void Connection<Stream>::ExpireAfterTimeout() {
  beast::get_lowest_layer(stream_).expires_after(
      std::chrono::milliseconds(absl::ToInt64Milliseconds(server_.options().request_timeout)));
}

template <typename Stream>
void Connection<Stream>::Handshake() {
  // (The handshake is part of the first request: the same timeout.)
  ExpireAfterTimeout();
  stream_.async_handshake(ssl::stream_base::server,
                          [self = this->shared_from_this()](beast::error_code ec) {
                            if (ec) {
                              // Not TLS (plain HTTP on this port), a certificate the
                              // client refused, a timeout: this connection only.
                              self->Close(/*graceful=*/false);
                              return;
                            }
                            self->Read();
                          });
}

template <typename Stream>
void Connection<Stream>::Close(bool graceful) {
  beast::error_code ec;
  if constexpr (kTls) {
    if (graceful) {
      ExpireAfterTimeout();
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        beast::error_code ignored;
        beast::get_lowest_layer(self->stream_)
            .socket()
            .shutdown(tcp::socket::shutdown_send, ignored);
        beast::get_lowest_layer(self->stream_).close();
      });
      return;
    }
  } else {
    (void)graceful;
  }
  beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_send, ec);
  beast::get_lowest_layer(stream_).close();
}

template <typename Stream>
void Connection<Stream>::Read() {
  parser_.emplace();
  parser_->body_limit(server_.options().max_body_bytes);
  parser_->header_limit(16 * 1024);
  ExpireAfterTimeout();
  http::async_read(
      stream_, buffer_, *parser_,
      [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

template <typename Stream>
void Connection<Stream>::OnRead(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    Write(internal::ErrorResponse(413, "ValidationException",
                                  absl::StrCat("the request body is larger than ",
                                               server_.options().max_body_bytes, " bytes")),
          /*close=*/true, /*answered=*/false);
    return;
  }
  if (ec) {
    Close(/*graceful=*/false);  // the client went, timed out, or sent what is not HTTP
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
  if (!Api::MayWait(request)) {
    Write(server_.AnswerHere(request), !keep_alive_, /*answered=*/true);
    return;
  }
  beast::get_lowest_layer(stream_).expires_never();  // (the worker's time is not the client's)
  server_.Answer(std::move(request), [self = this->shared_from_this()](HttpResponse response) {
    net::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
      self->Write(std::move(response), !self->keep_alive_, /*answered=*/true);
    });
  });
}

template <typename Stream>
void Connection<Stream>::Write(HttpResponse response, bool close, bool answered) {
  auto res = std::make_shared<http::response<http::string_body>>(
      static_cast<http::status>(response.status), version_);
  res->set(http::field::content_type, response.content_type);
  static std::atomic<uint64_t> next_id{0};
  res->set("x-amzn-RequestId", absl::StrCat("kiln-", next_id.fetch_add(1) + 1));
  res->keep_alive(!close);
  res->body() = std::move(response.body);
  res->prepare_payload();
  ExpireAfterTimeout();
  http::async_write(
      stream_, *res,
      [self = this->shared_from_this(), res, close, answered](beast::error_code ec, size_t) {
        if (answered) self->server_.Answered();
        if (ec) {
          self->Close(/*graceful=*/false);
          return;
        }
        if (close) {
          self->Close(/*graceful=*/true);
          return;
        }
        self->Read();
      });
}

// A file's error as StartServer reports it: NotFound or PermissionDenied
// when it cannot be read, naming the option and the file.
absl::Status CheckReadable(const char* option, const std::string& path) {
  std::ifstream in(path);
  if (in) return absl::OkStatus();
  const int err = errno;
  const std::string why = absl::StrCat("ServerOptions.", option, ": '", PathForMessage(path),
                                       "': ", std::strerror(err));
  return err == EACCES ? absl::PermissionDeniedError(why) : absl::NotFoundError(why);
}

// OpenSSL's reason for a failure of Asio's context (Asio takes the first
// error off OpenSSL's queue into `ec`; the rest is dropped); `mismatch` set
// when it says a key is not its certificate's.
std::string OpenSslReason(const beast::error_code& ec, bool* mismatch = nullptr) {
  ERR_clear_error();
  if (ec.category() == net::error::get_ssl_category()) {
    const auto e = static_cast<unsigned long>(ec.value());
    if (mismatch != nullptr) {
      *mismatch = ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
    }
    if (const char* reason = ERR_reason_error_string(e); reason != nullptr) return reason;
  }
  return ec.message();
}

// The TLS context of `options` (TLS 1.2 or later), or null without TLS.
absl::StatusOr<std::unique_ptr<ssl::context>> NewTlsContext(const ServerOptions& options) {
  const bool has_cert = !options.tls_certificate_file.empty();
  const bool has_key = !options.tls_private_key_file.empty();
  if (!has_cert && !has_key) return nullptr;
  if (!has_key) {
    return absl::InvalidArgumentError(
        "ServerOptions.tls_private_key_file: needed with tls_certificate_file");
  }
  if (!has_cert) {
    return absl::InvalidArgumentError(
        "ServerOptions.tls_certificate_file: needed with tls_private_key_file");
  }
  if (absl::Status s = CheckReadable("tls_certificate_file", options.tls_certificate_file);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckReadable("tls_private_key_file", options.tls_private_key_file);
      !s.ok()) {
    return s;
  }
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  // An encrypted key fails to load rather than asking for a passphrase on
  // the terminal.
  context->set_password_callback(
      [](size_t, ssl::context::password_purpose) { return std::string(); });
  ERR_clear_error();
  beast::error_code ec;
  const std::string cert = PathForMessage(options.tls_certificate_file);
  const std::string key = PathForMessage(options.tls_private_key_file);
  context->use_certificate_chain_file(options.tls_certificate_file, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServerOptions.tls_certificate_file: '", cert,
                     "' is not a PEM certificate: ", OpenSslReason(ec)));
  }
  bool mismatch = false;
  context->use_private_key_file(options.tls_private_key_file, ssl::context::pem, ec);
  const std::string reason = ec ? OpenSslReason(ec, &mismatch) : std::string();
  if (mismatch || (!ec && SSL_CTX_check_private_key(context->native_handle()) != 1)) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("ServerOptions.tls_private_key_file: '", key,
                                                   "' is not the key of the certificate '", cert,
                                                   "'"));
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServerOptions.tls_private_key_file: '", key,
                     "' is not an unencrypted PEM private key: ", reason));
  }
  return context;
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
  absl::StatusOr<std::unique_ptr<ssl::context>> tls = NewTlsContext(options);
  if (!tls.ok()) return tls.status();
  auto server = std::make_unique<ServerImpl>(std::move(options), *std::move(tls));
  absl::Status s = server->Listen();
  if (!s.ok()) return s;
  return server;
}

}  // namespace kiln::serve
