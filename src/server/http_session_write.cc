// A connection's responses: the head and body queued on the strand, streamed parts
// (chunked or until close) including the writer thread's direct sends, and the
// ResponseWriter that the handler holds.
#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

#include "core/logging.h"
#include "server/http_session.h"
#include "server/http_wire.h"

namespace tachyon::server {

void Session::respond(uint64_t seq, int status, std::string_view content_type, std::string body,
                      const Headers& headers) {
  if (!current(seq) || response_started_) return;
  response_started_ = true;
  response_ended_ = true;
  std::string head = format_head(status, content_type, headers, body.size());
  queue(std::move(head));
  if (!body.empty()) queue(std::move(body));
}

void Session::start_stream(uint64_t seq, int status, std::string_view content_type,
                           const Headers& headers) {
  if (!current(seq) || response_started_) return;
  response_started_ = true;
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;
  queue(format_head(status, content_type, headers, std::nullopt));
}

void Session::write(uint64_t seq, std::string data) {
  if (!current(seq) || !response_started_ || response_ended_ || data.empty()) return;
  queue(chunked_ ? frame_chunk(data) : std::move(data));
}

void Session::write_framed(uint64_t seq, std::string bytes) {
  if (current(seq) && response_started_ && !response_ended_) queue(std::move(bytes));
}

Session::Direct Session::try_direct_write(uint64_t seq, const std::string& data) {
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

void Session::write_queued(uint64_t seq, std::string data) {
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

void Session::end_stream(uint64_t seq) {
  if (!current(seq) || !response_started_ || response_ended_) return;
  set_direct(false);
  response_ended_ = true;
  if (chunked_) {
    queue("0\r\n\r\n");
  } else if (!writing_ && queue_.empty()) {
    response_done();
  }
}

void Session::on_client_close(uint64_t seq, std::function<void()> fn) {
  if (seq != seq_ || response_ended_) return;
  if (peer_gone_) {
    fn();
    return;
  }
  close_callbacks_.push_back(std::move(fn));
}

void Session::abandon(uint64_t seq) {
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

void Session::stalled(uint64_t seq) {
  if (seq != seq_) return;
  log_warning("http: client {} stopped reading; closing the connection", remote_);
  force_close();
}

std::string Session::format_head(int status, std::string_view content_type, const Headers& headers,
                                 std::optional<size_t> content_length) {
  if (shutting_down_ || shared_->shutting_down.load()) keep_alive_ = false;
  return server::format_head(ResponseHead{status, content_type, &headers, content_length, chunked_,
                                          keep_alive_, version_});
}

void Session::queue(std::string data) {
  if (state_ == State::kClosed) return;
  buffered.fetch_add(data.size());
  queue_.push_back(std::move(data));
  if (!writing_) do_write();
}

void Session::set_direct(bool writable) {
  std::lock_guard<std::mutex> lock(direct_mu_);
  direct_writable_ = writable;
  direct_seq_ = seq_;
  direct_chunked_ = chunked_;
  direct_fd_ = socket_.native_handle();
}

void Session::do_write() {
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
  net::async_write(socket_, bufs,
                   net::bind_executor(strand_, [self = shared_from_this()](ErrorCodeT ec, size_t) {
                     self->on_write(ec);
                   }));
}

void Session::on_write(ErrorCodeT ec) {
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

void Session::response_done() {
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

std::shared_ptr<ResponseWriter> make_session_writer(std::shared_ptr<Session> session, uint64_t seq,
                                                    size_t max_buffered) {
  return std::make_shared<SessionWriter>(std::move(session), seq, max_buffered);
}

}  // namespace tachyon::server
