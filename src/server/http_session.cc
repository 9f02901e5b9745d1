#include <sys/socket.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/logging.h"
#include "server/http_internal.h"
#include "server/http_wire.h"

namespace tachyon::server {

namespace {

constexpr size_t kWatchBufferBytes = 4096;
constexpr size_t kMaxPipelinedBytes = 64u << 10;
constexpr size_t kHeaderReadBytes = 4096;

}  // namespace

// One connection. Everything but the atomics runs on strand_.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerShared* shared, bool reserve)
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
  ~Session() {
    if (state_ != State::kClosed) shared_->connections.fetch_sub(1);
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->sessions[this] = weak_from_this();
    }
    net::post(strand_, [self = shared_from_this()] { self->read_request(); });
  }

  template <typename F>
  void run(F&& fn) {
    net::post(strand_,
              [self = shared_from_this(), fn = std::forward<F>(fn)]() mutable { fn(*self); });
  }

  // Server shutdown: close if idle; otherwise close once the current response ends.
  void shutdown_when_idle() {
    shutting_down_ = true;
    if (state_ == State::kReading && !got_some()) close();
  }
  void force_close() {
    mark_peer_gone();
    close();
  }

  // --- called (on the strand) for the writer of request `seq` ---
  void respond(uint64_t seq, int status, std::string_view content_type, std::string body,
               const Headers& headers) {
    if (!current(seq) || response_started_) return;
    response_started_ = true;
    response_ended_ = true;
    std::string head = format_head(status, content_type, headers, body.size());
    queue(std::move(head));
    if (!body.empty()) queue(std::move(body));
  }
  void start_stream(uint64_t seq, int status, std::string_view content_type,
                    const Headers& headers) {
    if (!current(seq) || response_started_) return;
    response_started_ = true;
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;
    queue(format_head(status, content_type, headers, std::nullopt));
  }
  void write(uint64_t seq, std::string data) {
    if (!current(seq) || !response_started_ || response_ended_ || data.empty()) return;
    queue(chunked_ ? frame_chunk(data) : std::move(data));
  }
  // Bytes already framed (the rest of a direct write that did not go out whole).
  void write_framed(uint64_t seq, std::string bytes) {
    if (current(seq) && response_started_ && !response_ended_) queue(std::move(bytes));
  }

  // Direct writes: a streamed body part is sent from the writer's thread with one
  // non-blocking send() when nothing else is queued or in flight for the connection,
  // saving a hop to the IO thread per event. Whatever does not go out at once, and
  // everything while writes are pending, takes the IO thread's path in order.
  enum class Direct { kSent, kQueue, kGone };
  Direct try_direct_write(uint64_t seq, const std::string& data) {
    std::lock_guard<std::mutex> lock(direct_mu_);
    if (!direct_writable_ || direct_pending_ > 0 || direct_seq_ != seq) {
      ++direct_pending_;
      return Direct::kQueue;
    }
    std::string framed = direct_chunked_ ? frame_chunk(data) : data;
    ssize_t n = ::send(direct_fd_, framed.data(), framed.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(framed.size())) return Direct::kSent;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      direct_writable_ = false;
      return Direct::kGone;
    }
    direct_writable_ = false;
    ++direct_pending_;
    framed.erase(0, n > 0 ? static_cast<size_t>(n) : 0);
    direct_rest_ = std::move(framed);
    return Direct::kQueue;
  }
  // Called on the strand for each write that took the queued path. The pending count
  // drops only once the bytes are queued: were it dropped first, the writer thread could
  // send its next part directly ahead of this one.
  void write_queued(uint64_t seq, std::string data) {
    std::string rest;
    {
      std::lock_guard<std::mutex> lock(direct_mu_);
      rest = std::exchange(direct_rest_, std::string());
    }
    if (!rest.empty()) {
      write_framed(seq, std::move(rest));  // the unsent end of a direct write
    } else {
      write(seq, std::move(data));
    }
    std::lock_guard<std::mutex> lock(direct_mu_);
    --direct_pending_;
  }

  void end_stream(uint64_t seq) {
    if (!current(seq) || !response_started_ || response_ended_) return;
    set_direct(false);
    response_ended_ = true;
    if (chunked_) {
      queue("0\r\n\r\n");
    } else if (!writing_ && queue_.empty()) {
      response_done();
    }
  }
  void on_client_close(uint64_t seq, std::function<void()> fn) {
    if (seq != seq_ || response_ended_) return;
    if (peer_gone_) {
      fn();
      return;
    }
    close_callbacks_.push_back(std::move(fn));
  }
  void abandon(uint64_t seq) {
    if (!current(seq)) return;
    if (!response_started_) {
      log_error("http: handler for {} dropped its request without answering", remote_);
      respond(
          seq, 500, "application/json",
          R"({"error":{"message":"the request was not answered","type":"server_error","param":null,"code":500}})",
          {});
    } else if (!response_ended_) {
      keep_alive_ = false;  // an unterminated body: the client must see the connection end
      close();
    }
  }
  void stalled(uint64_t seq) {
    if (seq != seq_) return;
    log_warning("http: client {} stopped reading; closing the connection", remote_);
    force_close();
  }

  std::atomic<bool> peer_gone_atomic{false};
  std::atomic<size_t> buffered{0};
  net::strand<net::io_context::executor_type>& strand() { return strand_; }

 private:
  enum class State { kReading, kHandling, kIdle, kClosed };

  bool current(uint64_t seq) const { return seq == seq_ && state_ == State::kHandling; }

  void read_request() {
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

  // The header is parsed once all of it has arrived, so that its raw bytes can be
  // checked first for what the parser would quietly accept: obsolete line folding
  // (RFC 9112 lets a server refuse it; a proxy may read a folded header differently).
  void take_header() {
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

  void on_header(ErrorCodeT ec) {
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
    bhttp::async_read(
        socket_, buffer_, *parser_,
        net::bind_executor(
            strand_, [self = shared_from_this()](ErrorCodeT ec, size_t) { self->on_body(ec); }));
  }

  void on_body(ErrorCodeT ec) {
    if (state_ != State::kReading) return;
    if (ec) return read_failed(ec);
    cancel_timer();
    dispatch();
  }

  void read_failed(ErrorCodeT ec) {
    if (ec == bhttp::error::body_limit)
      return reject(413, "request body larger than the limit of " +
                             std::to_string(shared_->options.max_body_bytes) + " bytes");
    if (ec == bhttp::error::header_limit) return reject(431, "request headers too large");
    if (ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message)
      return reject(400, "malformed HTTP request: " + ec.message());
    close();  // EOF, reset, timeout (socket closed by the timer) or cancellation
  }

  // Answers a request that could not be read, then closes the connection.
  // `linger`: the client may still be sending (an unread body); read and drop what it
  // sends for a moment after answering, so that closing does not reset the connection
  // before the client has read the answer.
  void reject(int status, const std::string& message, bool linger = true) {
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

  void linger_close() {
    ErrorCodeT ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    state_ = State::kIdle;
    arm_timer(std::chrono::seconds(2));
    drain();
  }
  void drain() {
    socket_.async_read_some(
        net::buffer(watch_buf_),
        net::bind_executor(strand_, [self = shared_from_this()](ErrorCodeT ec, size_t n) {
          self->drained_ += n;
          if (ec || self->drained_ > (4u << 20) || self->state_ == State::kClosed)
            return self->close();
          self->drain();
        }));
  }

  void reset_response_state() {
    response_started_ = response_ended_ = chunked_ = false;
    close_callbacks_.clear();
  }

  void begin_in_flight() {
    shared_->in_flight.fetch_add(1);
    counted_in_flight_ = true;
  }
  void end_in_flight() {
    if (!counted_in_flight_) return;
    counted_in_flight_ = false;
    shared_->request_ended();
  }

  void dispatch();

  void watch_for_close() {
    if (watching_ || state_ == State::kClosed) return;
    watching_ = true;
    socket_.async_read_some(
        net::buffer(watch_buf_),
        net::bind_executor(strand_, [self = shared_from_this()](ErrorCodeT ec, size_t n) {
          self->on_watch(ec, n);
        }));
  }

  void on_watch(ErrorCodeT ec, size_t n) {
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

  std::string format_head(int status, std::string_view content_type, const Headers& headers,
                          std::optional<size_t> content_length) {
    if (shutting_down_ || shared_->shutting_down.load()) keep_alive_ = false;
    return server::format_head(ResponseHead{status, content_type, &headers, content_length,
                                            chunked_, keep_alive_, version_});
  }

  void queue(std::string data) {
    if (state_ == State::kClosed) return;
    buffered.fetch_add(data.size());
    queue_.push_back(std::move(data));
    if (!writing_) do_write();
  }

  void set_direct(bool writable) {
    std::lock_guard<std::mutex> lock(direct_mu_);
    direct_writable_ = writable;
    direct_seq_ = seq_;
    direct_chunked_ = chunked_;
    direct_fd_ = socket_.native_handle();
  }

  void do_write() {
    set_direct(false);
    writing_ = true;
    inflight_.clear();
    while (!queue_.empty()) {
      inflight_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    std::vector<net::const_buffer> bufs;
    bufs.reserve(inflight_.size());
    for (const auto& s : inflight_) bufs.emplace_back(net::buffer(s));
    arm_timer(shared_->options.write_timeout);
    net::async_write(
        socket_, bufs,
        net::bind_executor(
            strand_, [self = shared_from_this()](ErrorCodeT ec, size_t) { self->on_write(ec); }));
  }

  void on_write(ErrorCodeT ec) {
    writing_ = false;
    size_t sent = 0;
    for (const auto& s : inflight_) sent += s.size();
    buffered.fetch_sub(sent);
    inflight_.clear();
    if (state_ == State::kClosed) return;
    cancel_timer();
    if (ec) {
      mark_peer_gone();
      return close();
    }
    if (!queue_.empty()) return do_write();
    if (response_ended_ && state_ == State::kHandling) return response_done();
    // Streaming and idle: the writer may send directly until the next queued write.
    if (state_ == State::kHandling && response_started_ && !response_ended_ &&
        (chunked_ || !keep_alive_))
      set_direct(true);
  }

  void response_done() {
    state_ = State::kIdle;
    close_callbacks_.clear();
    end_in_flight();
    if (linger_) return linger_close();
    if (!keep_alive_ || shutting_down_ || shared_->shutting_down.load()) return close();
    if (watching_) {
      ErrorCodeT ec;
      socket_.cancel(ec);  // on_watch then starts the next read
    } else {
      read_request();
    }
  }

  void mark_peer_gone() {
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

  void close() {
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

  void arm_timer(std::chrono::milliseconds d) {
    uint64_t gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen](ErrorCodeT ec) {
      if (ec || gen != self->timer_gen_ || self->state_ == State::kClosed) return;
      self->on_timeout();
    });
  }
  void cancel_timer() {
    ++timer_gen_;
    timer_.cancel();
  }
  // Whether any of the request being read has arrived (bytes of a header not yet whole
  // wait in buffer_, unparsed).
  bool got_some() const { return buffer_.size() > 0 || (parser_ && parser_->got_some()); }
  void on_timeout() {
    if (state_ == State::kReading && got_some() && !writing_) {
      log_debug("http: request from {} timed out while reading", remote_);
      return reject(408, "request not received in time", /*linger=*/false);
    }
    if (writing_) log_warning("http: write to {} timed out", remote_);
    mark_peer_gone();
    close();
  }

  ServerShared* shared_;
  const bool reserve_;  // taken past max_connections: health and metrics only
  net::strand<net::io_context::executor_type> strand_;
  tcp::socket socket_;
  net::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;

  State state_ = State::kReading;
  uint64_t seq_ = 0;
  int version_ = 11;
  bool keep_alive_ = true;
  bool shutting_down_ = false;
  bool counted_in_flight_ = false;
  bool response_started_ = false, response_ended_ = false, chunked_ = false;
  bool peer_gone_ = false;
  bool linger_ = false;
  // Direct-write state, shared with writer threads under direct_mu_.
  std::mutex direct_mu_;
  bool direct_writable_ = false;
  bool direct_chunked_ = false;
  uint64_t direct_seq_ = 0;
  int direct_fd_ = -1;
  int direct_pending_ = 0;  // queued-path writes posted and not yet run
  std::string direct_rest_;
  size_t drained_ = 0;
  std::vector<std::function<void()>> close_callbacks_;

  std::deque<std::string> queue_;
  std::vector<std::string> inflight_;
  bool writing_ = false;

  bool watching_ = false;
  std::array<char, kWatchBufferBytes> watch_buf_{};
  std::string pipelined_;
};

namespace {

class SessionWriter : public ResponseWriter {
 public:
  SessionWriter(std::shared_ptr<Session> session, uint64_t seq, size_t max_buffered)
      : s_(std::move(session)), seq_(seq), max_buffered_(max_buffered) {}
  ~SessionWriter() override {
    s_->run([seq = seq_](Session& s) { s.abandon(seq); });
  }

  void respond(int status, std::string_view content_type, std::string body,
               const Headers& headers) override {
    s_->run([seq = seq_, status, ct = std::string(content_type), body = std::move(body), headers](
                Session& s) mutable { s.respond(seq, status, ct, std::move(body), headers); });
  }
  void start_stream(int status, std::string_view content_type, const Headers& headers) override {
    s_->run([seq = seq_, status, ct = std::string(content_type), headers](Session& s) {
      s.start_stream(seq, status, ct, headers);
    });
  }
  bool write(std::string data) override {
    if (s_->peer_gone_atomic.load()) return false;
    if (s_->buffered.load() + data.size() > max_buffered_) {
      s_->run([seq = seq_](Session& s) { s.stalled(seq); });
      return false;
    }
    switch (s_->try_direct_write(seq_, data)) {
      case Session::Direct::kSent:
        return true;
      case Session::Direct::kGone:
        s_->run([seq = seq_](Session& s) { s.stalled(seq); });
        return false;
      case Session::Direct::kQueue:
        break;
    }
    s_->run([seq = seq_, data = std::move(data)](Session& s) mutable {
      s.write_queued(seq, std::move(data));
    });
    return true;
  }
  void end_stream() override {
    s_->run([seq = seq_](Session& s) { s.end_stream(seq); });
  }
  bool client_closed() const override { return s_->peer_gone_atomic.load(); }
  void on_client_close(std::function<void()> fn) override {
    s_->run([seq = seq_, fn = std::move(fn)](Session& s) mutable {
      s.on_client_close(seq, std::move(fn));
    });
  }
  size_t buffered_bytes() const override { return s_->buffered.load(); }
  void post(std::function<void()> fn) override {
    net::post(s_->strand(), [keep = s_, fn = std::move(fn)] { fn(); });
  }

 private:
  std::shared_ptr<Session> s_;
  uint64_t seq_;
  size_t max_buffered_;
};

}  // namespace

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

  auto writer = std::make_shared<SessionWriter>(shared_from_this(), seq_,
                                                shared_->options.max_buffered_bytes);
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
