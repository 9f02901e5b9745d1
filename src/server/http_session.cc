// A connection's life: reading and checking each request, handing it to the handler,
// the keep-alive, pipelining and close watches, timeouts and closing.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "core/logging.h"
#include "server/http_session.h"
#include "server/http_wire.h"

namespace tachyon::server {

namespace {

constexpr size_t kMaxPipelinedBytes = 64u << 10;
constexpr size_t kHeaderReadBytes = 4096;

}  // namespace

Session::Session(tcp::socket socket, ServerShared* shared, bool reserve)
    : shared_(shared),
      reserve_(reserve),
      strand_(net::make_strand(*shared->ioc)),
      socket_(std::move(socket)),
      timer_(strand_) {
  ErrorCodeT ec;
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  shared_->connections.fetch_add(1);
}

Session::~Session() {
  if (state_ != State::kClosed) shared_->connections.fetch_sub(1);
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->sessions.erase(this);
}

void Session::start() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->sessions[this] = weak_from_this();
  }
  net::post(strand_, [self = shared_from_this()] { self->read_request(); });
}

void Session::shutdown_when_idle() {
  shutting_down_ = true;
  if (state_ == State::kReading && !got_some()) close();
}

void Session::force_close() {
  mark_peer_gone();
  close();
}

void Session::read_request() {
  if (state_ == State::kClosed) return;
  if (shutting_down_ || shared_->shutting_down.load()) {
    close();
    return;
  }
  state_ = State::kReading;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(shared_->options.max_header_bytes));
  parser_->body_limit(shared_->options.max_body_bytes);
  if (!pipelined_.empty()) {
    auto buf = buffer_.prepare(pipelined_.size());
    net::buffer_copy(buf, net::buffer(pipelined_));
    buffer_.commit(pipelined_.size());
    pipelined_.clear();
  }
  arm_timer(seq_ == 0 ? shared_->options.request_timeout : shared_->options.keep_alive_timeout);
  take_header();
}

void Session::take_header() {
  const auto bytes = buffer_.data();
  const std::string_view data(static_cast<const char*>(bytes.data()), bytes.size());
  const size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (data.size() > shared_->options.max_header_bytes)
      return reject(431, "request headers too large");
    socket_.async_read_some(
        buffer_.prepare(kHeaderReadBytes),
        net::bind_executor(strand_, [self = shared_from_this()](ErrorCodeT ec, size_t n) {
          if (self->state_ != State::kReading) return;
          if (ec)
            return self->read_failed(n == 0 && self->buffer_.size() == 0
                                         ? ec
                                         : ErrorCodeT(bhttp::error::partial_message));
          self->buffer_.commit(n);
          self->take_header();
        }));
    return;
  }
  if (has_obs_fold(data.substr(0, end + 2)))
    return reject(400, "obsolete line folding in a request header is not accepted");
  ErrorCodeT ec;
  buffer_.consume(parser_->put(buffer_.data(), ec));
  if (!ec && !parser_->is_header_done()) ec = bhttp::error::partial_message;
  on_header(ec);
}

void Session::on_header(ErrorCodeT ec) {
  if (state_ != State::kReading) return;
  if (ec) return read_failed(ec);
  const auto& req = parser_->get();
  if (std::string why = framing_error(req); !why.empty()) return reject(400, why);
  if (auto len = parser_->content_length(); len && *len > shared_->options.max_body_bytes)
    return reject(413, "request body larger than the limit of " +
                           std::to_string(shared_->options.max_body_bytes) + " bytes");
  if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
    // Small and sent before the body is read: a synchronous write is fine here.
    ErrorCodeT wec;
    net::write(socket_, net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), wec);
  }
  arm_timer(shared_->options.request_timeout);
  bhttp::async_read(socket_, buffer_, *parser_,
                    net::bind_executor(strand_, [self = shared_from_this()](ErrorCodeT ec, size_t) {
                      self->on_body(ec);
                    }));
}

void Session::on_body(ErrorCodeT ec) {
  if (state_ != State::kReading) return;
  if (ec) return read_failed(ec);
  cancel_timer();
  dispatch();
}

void Session::read_failed(ErrorCodeT ec) {
  if (ec == bhttp::error::body_limit)
    return reject(413, "request body larger than the limit of " +
                           std::to_string(shared_->options.max_body_bytes) + " bytes");
  if (ec == bhttp::error::header_limit) return reject(431, "request headers too large");
  if (ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message)
    return reject(400, "malformed HTTP request: " + ec.message());
  close();  // EOF, reset, timeout (socket closed by the timer) or cancellation
}

void Session::reject(int status, const std::string& message, bool linger) {
  cancel_timer();
  state_ = State::kHandling;
  ++seq_;
  reset_response_state();
  keep_alive_ = false;
  linger_ = linger;
  version_ = 11;
  begin_in_flight();
  Json err = {{"message", message},
              {"type", status == 408 ? "timeout_error" : "invalid_request_error"},
              {"param", nullptr},
              {"code", nullptr}};
  respond(seq_, status, "application/json", Json{{"error", err}}.dump(), {});
}

void Session::linger_close() {
  ErrorCodeT ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  state_ = State::kIdle;
  arm_timer(std::chrono::seconds(2));
  drain();
}

void Session::drain() {
  socket_.async_read_some(
      net::buffer(watch_buf_),
      net::bind_executor(strand_, [self = shared_from_this()](ErrorCodeT ec, size_t n) {
        self->drained_ += n;
        if (ec || self->drained_ > (4u << 20) || self->state_ == State::kClosed)
          return self->close();
        self->drain();
      }));
}

void Session::watch_for_close() {
  if (watching_ || state_ == State::kClosed) return;
  watching_ = true;
  socket_.async_read_some(
      net::buffer(watch_buf_),
      net::bind_executor(strand_, [self = shared_from_this()](ErrorCodeT ec, size_t n) {
        self->on_watch(ec, n);
      }));
}

void Session::on_watch(ErrorCodeT ec, size_t n) {
  watching_ = false;
  if (n > 0) pipelined_.append(watch_buf_.data(), n);
  if (state_ == State::kClosed) return;
  if (state_ == State::kIdle) {  // the response ended and cancelled this read
    if (ec && ec != net::error::operation_aborted) return close();
    return read_request();
  }
  if (ec) {
    if (ec == net::error::operation_aborted) return;
    mark_peer_gone();
    return close();
  }
  if (pipelined_.size() < kMaxPipelinedBytes) watch_for_close();
}

void Session::mark_peer_gone() {
  if (peer_gone_) return;
  peer_gone_ = true;
  peer_gone_atomic.store(true);
  if (state_ != State::kHandling || response_ended_) return;
  auto callbacks = std::move(close_callbacks_);
  close_callbacks_.clear();
  for (auto& fn : callbacks) {
    try {
      fn();
    } catch (const std::exception& e) {
      log_error("http: client-close callback failed: {}", e.what());
    }
  }
}

void Session::close() {
  if (state_ == State::kClosed) return;
  if (state_ == State::kHandling && !response_ended_) mark_peer_gone();
  set_direct(false);  // before the descriptor can be closed and reused
  state_ = State::kClosed;
  shared_->connections.fetch_sub(1);
  end_in_flight();
  cancel_timer();
  ErrorCodeT ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  queue_.clear();
}

void Session::arm_timer(std::chrono::milliseconds d) {
  uint64_t gen = ++timer_gen_;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), gen](ErrorCodeT ec) {
    if (ec || gen != self->timer_gen_ || self->state_ == State::kClosed) return;
    self->on_timeout();
  });
}

void Session::cancel_timer() {
  ++timer_gen_;
  timer_.cancel();
}

void Session::on_timeout() {
  if (state_ == State::kReading && got_some() && !writing_) {
    log_debug("http: request from {} timed out while reading", remote_);
    return reject(408, "request not received in time", /*linger=*/false);
  }
  if (writing_) log_warning("http: write to {} timed out", remote_);
  mark_peer_gone();
  close();
}

void Session::dispatch() {
  auto msg = parser_->release();
  parser_.reset();
  state_ = State::kHandling;
  ++seq_;
  reset_response_state();
  version_ = msg.version() == 10 ? 10 : 11;
  keep_alive_ = msg.keep_alive() && !reserve_ && !shutting_down_ && !shared_->shutting_down.load();
  begin_in_flight();
  if (reserve_ && !served_on_reserve(msg)) {
    respond(seq_, 503, "application/json", std::string(kBusyBody), {});
    return;
  }
  HttpRequest req = to_http_request(std::move(msg), remote_, version_);

  auto writer = make_session_writer(shared_from_this(), seq_, shared_->options.max_buffered_bytes);
  watch_for_close();
  try {
    shared_->handler(std::move(req), writer);
  } catch (const std::exception& e) {
    log_error("http: handler threw: {}", e.what());
    respond(
        seq_, 500, "application/json",
        R"({"error":{"message":"internal server error","type":"server_error","param":null,"code":500}})",
        {});
  }
}

void start_session(tcp::socket socket, ServerShared* shared, bool reserve) {
  std::make_shared<Session>(std::move(socket), shared, reserve)->start();
}

void session_shutdown_when_idle(const std::shared_ptr<Session>& s) {
  s->run([](Session& session) { session.shutdown_when_idle(); });
}

void session_force_close(const std::shared_ptr<Session>& s) {
  s->run([](Session& session) { session.force_close(); });
}

}  // namespace tachyon::server
