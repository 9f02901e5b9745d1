// Internal to the HTTP server: one connection, reading its requests
// (http_session.cc) and writing their responses (http_session_write.cc).
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_internal.h"

namespace tachyon::server {

inline constexpr size_t kWatchBufferBytes = 4096;

// One connection. Everything but the atomics runs on strand_.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerShared* shared, bool reserve);
  ~Session();
  void start();

  template <typename F>
  void run(F&& fn) {
    net::post(strand_,
              [self = shared_from_this(), fn = std::forward<F>(fn)]() mutable { fn(*self); });
  }

  // Server shutdown: close if idle; otherwise close once the current response ends.
  void shutdown_when_idle();
  void force_close();

  // --- called (on the strand) for the writer of request `seq` ---
  void respond(uint64_t seq, int status, std::string_view content_type, std::string body,
               const Headers& headers);
  void start_stream(uint64_t seq, int status, std::string_view content_type,
                    const Headers& headers);
  void write(uint64_t seq, std::string data);
  // Bytes already framed (the rest of a direct write that did not go out whole).
  void write_framed(uint64_t seq, std::string bytes);

  // Direct writes: a streamed body part is sent from the writer's thread with one
  // non-blocking send() when nothing else is queued or in flight for the connection,
  // saving a hop to the IO thread per event. Whatever does not go out at once, and
  // everything while writes are pending, takes the IO thread's path in order.
  enum class Direct { kSent, kQueue, kGone };
  Direct try_direct_write(uint64_t seq, const std::string& data);
  // Called on the strand for each write that took the queued path. The pending count
  // drops only once the bytes are queued: were it dropped first, the writer thread could
  // send its next part directly ahead of this one.
  void write_queued(uint64_t seq, std::string data);
  void end_stream(uint64_t seq);
  void on_client_close(uint64_t seq, std::function<void()> fn);
  void abandon(uint64_t seq);
  void stalled(uint64_t seq);

  std::atomic<bool> peer_gone_atomic{false};
  std::atomic<size_t> buffered{0};
  net::strand<net::io_context::executor_type>& strand() { return strand_; }

 private:
  enum class State { kReading, kHandling, kIdle, kClosed };

  bool current(uint64_t seq) const { return seq == seq_ && state_ == State::kHandling; }

  // ---- the request side, the connection's life and its timers (http_session.cc) ----
  void read_request();
  // The header is parsed once all of it has arrived, so that its raw bytes can be
  // checked first for what the parser would quietly accept: obsolete line folding
  // (RFC 9112 lets a server refuse it; a proxy may read a folded header differently).
  void take_header();
  void on_header(ErrorCodeT ec);
  void on_body(ErrorCodeT ec);
  void read_failed(ErrorCodeT ec);
  // Answers a request that could not be read, then closes the connection.
  // `linger`: the client may still be sending (an unread body); read and drop what it
  // sends for a moment after answering, so that closing does not reset the connection
  // before the client has read the answer.
  void reject(int status, const std::string& message, bool linger = true);
  void linger_close();
  void drain();
  void dispatch();
  void watch_for_close();
  void on_watch(ErrorCodeT ec, size_t n);
  void mark_peer_gone();
  void close();
  void arm_timer(std::chrono::milliseconds d);
  void cancel_timer();
  // Whether any of the request being read has arrived (bytes of a header not yet whole
  // wait in buffer_, unparsed).
  bool got_some() const { return buffer_.size() > 0 || (parser_ && parser_->got_some()); }
  void on_timeout();

  // ---- the response side (http_session_write.cc) ----
  std::string format_head(int status, std::string_view content_type, const Headers& headers,
                          std::optional<size_t> content_length);
  void queue(std::string data);
  void set_direct(bool writable);
  void do_write();
  void on_write(ErrorCodeT ec);
  void response_done();

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

// The writer handed to the handler for request `seq` of the session.
std::shared_ptr<ResponseWriter> make_session_writer(std::shared_ptr<Session> session, uint64_t seq,
                                                    size_t max_buffered);

}  // namespace tachyon::server
