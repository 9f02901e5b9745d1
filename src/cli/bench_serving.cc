// Serving benchmark: drives a running server over HTTP with streaming requests and
// measures what clients see (TTFT, inter-token latency, end-to-end latency,
// throughput). One thread, asynchronous sockets: the client stays cheap next to the
// server it measures.
//   tachyon bench-serving --url http://127.0.0.1:8088 [--endpoint /v1/completions]
//       [--num-requests 200] [--concurrency 32 | --request-rate 10] [--input-len 128]
//       [--output-len 128] [--shared-prefix-len 0] [--multi-turn 1] [--api-key K]
//       [--seed 0] [--json]
// Prompts are random token ids (exact input lengths) for /v1/completions; chat
// requests use random words. --shared-prefix-len opens every prompt with the same
// random prefix (tokens, or words for chat). --multi-turn K makes --num-requests
// conversations of K turns, run one turn after another: the OpenAI-style APIs return no
// token ids, so a turn's prompt is the previous one's text (chat: its messages), the
// answer's text and new random words. Every request generates exactly --output-len
// tokens. Reports the cached prompt tokens where the server gives them
// (usage.prompt_tokens_details.cached_tokens) and the TTFT of first and later turns.
#include "cli/bench_serving.h"

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <random>

#include "cli/args.h"
#include "cli/bench_report.h"
#include "cli/bench_workload.h"
#include "core/error.h"
#include "core/json.h"

namespace tachyon::cli {
namespace {

namespace net = boost::asio;
using Options = BenchOptions;
using Result = BenchResult;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Incremental HTTP/1.1 response reader: headers, chunked (or close-delimited) body,
// SSE events split on blank lines.
class SseReader {
 public:
  // Feeds bytes; calls on_event for each complete "data: ..." payload.
  template <typename F>
  void feed(const char* p, size_t n, F&& on_event) {
    raw_.append(p, n);
    if (!headers_done_) {
      auto end = raw_.find("\r\n\r\n");
      if (end == std::string::npos) return;
      std::string head = raw_.substr(0, end);
      status_ = head.size() > 12 ? std::atoi(head.c_str() + 9) : 0;
      std::string lower = head;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      chunked_ = lower.find("transfer-encoding: chunked") != std::string::npos;
      raw_.erase(0, end + 4);
      headers_done_ = true;
    }
    if (chunked_) {
      for (;;) {
        if (chunk_left_ == 0) {
          auto eol = raw_.find("\r\n");
          if (eol == std::string::npos) break;
          if (eol == 0) {  // CRLF after a chunk's data
            raw_.erase(0, 2);
            continue;
          }
          chunk_left_ = std::strtoull(raw_.substr(0, eol).c_str(), nullptr, 16);
          raw_.erase(0, eol + 2);
          if (chunk_left_ == 0) {
            finished_ = true;
            break;
          }
        }
        size_t take = std::min<size_t>(chunk_left_, raw_.size());
        if (take == 0) break;
        body_.append(raw_, 0, take);
        raw_.erase(0, take);
        chunk_left_ -= take;
      }
    } else {
      body_ += raw_;
      raw_.clear();
    }
    for (;;) {
      auto end = body_.find("\n\n");
      if (end == std::string::npos) break;
      std::string ev = body_.substr(0, end);
      body_.erase(0, end + 2);
      if (ev.rfind("data:", 0) == 0) on_event(ev.substr(ev[5] == ' ' ? 6 : 5));
    }
  }
  int status() const { return status_; }
  bool finished() const { return finished_; }
  const std::string& leftover() const { return body_; }

 private:
  std::string raw_, body_;
  bool headers_done_ = false, chunked_ = false, finished_ = false;
  int status_ = 0;
  size_t chunk_left_ = 0;
};

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)), rng_(static_cast<uint64_t>(o_.seed)) {
    if (o_.turns < 1) raise<InvalidArgument>("--multi-turn must be >= 1, got {}", o_.turns);
    if (o_.shared_prefix_len < 0)
      raise<InvalidArgument>("--shared-prefix-len must be >= 0, got {}", o_.shared_prefix_len);
    // The shared prefix, drawn once: token ids for /v1/completions, words otherwise (chat,
    // and the text conversations of --multi-turn).
    if (text_prompts()) {
      prefix_words_ = random_words(o_.shared_prefix_len, rng_);
    } else {
      PromptShape shape = token_shape();
      shape.input_len = std::max<int64_t>(1, o_.shared_prefix_len);
      shape.shared_prefix_len = 0;
      if (o_.shared_prefix_len > 0) prefix_ids_ = make_random_prompts(shape, 1, rng_)[0];
    }
  }

  std::vector<Result> run() {
    tcp::resolver resolver(ioc_);
    endpoints_ = resolver.resolve(o_.host, o_.port);
    // The longest generated prompt must fit the model: exact for token ids, a lower bound
    // for words (a word is a token at least). Prompts the caller gives are its own.
    if (const int64_t max_len = o_.prompts.empty() ? server_max_model_len() : 0; max_len > 0) {
      PromptShape shape = token_shape();
      shape.shared_prefix_len = o_.shared_prefix_len;
      check_fits(shape, o_.turns, o_.output_len, max_len);
    }
    results_.resize(static_cast<size_t>(o_.num_requests * o_.turns));
    conversations_.resize(static_cast<size_t>(o_.num_requests));
    start_ = Clock::now();
    if (o_.request_rate > 0) {
      schedule_arrival();
    } else {
      int64_t c = o_.concurrency > 0 ? o_.concurrency : o_.num_requests;
      for (int64_t i = 0; i < c && next_ < o_.num_requests; ++i) launch();
    }
    ioc_.run();
    wall_ms_ = ms_since(start_);
    return results_;
  }
  double wall_ms() const { return wall_ms_; }

 private:
  // Where a conversation stands: its turn and the text so far (chat messages, or the
  // prompt text of /v1/completions).
  struct ConversationState {
    int64_t turn = 0;
    Json messages = Json::array();
    std::string text;
  };

  // max_model_len from GET /v1/models; 0 when the server does not say.
  int64_t server_max_model_len() {
    boost::system::error_code ec;
    tcp::socket s(ioc_);
    net::connect(s, endpoints_, ec);
    if (ec) return 0;
    const std::string req =
        "GET /v1/models HTTP/1.1\r\nHost: " + o_.host + "\r\n" +
        (o_.api_key.empty() ? "" : "Authorization: Bearer " + o_.api_key + "\r\n") +
        "Connection: close\r\n\r\n";
    net::write(s, net::buffer(req), ec);
    std::string resp;
    std::array<char, 4096> buf{};
    while (!ec) resp.append(buf.data(), s.read_some(net::buffer(buf), ec));
    const size_t open = resp.find('{'), close = resp.rfind('}');
    if (resp.rfind("HTTP/1.1 200", 0) != 0 || open == std::string::npos || close < open) return 0;
    const Json j = Json::parse(resp.substr(open, close - open + 1), nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
      return 0;
    return j["data"][0].value("max_model_len", int64_t{0});
  }

  bool chat() const { return o_.endpoint == "/v1/chat/completions"; }
  bool text_prompts() const { return chat() || o_.turns > 1; }
  PromptShape token_shape() const {
    PromptShape shape;
    shape.low_token = 300;
    shape.high_token = 20000;
    shape.input_len = o_.input_len;
    shape.shared_prefix_len = 0;
    return shape;
  }

  // The next user part of conversation `conv` (the prefix in front of its first).
  std::string user_text(const ConversationState& c) {
    std::string words = random_words(o_.input_len, rng_);
    if (c.turn == 0 && !prefix_words_.empty()) return prefix_words_ + " " + words;
    return words;
  }

  std::string body(size_t conv) {
    Json b = {{"max_tokens", o_.output_len},
              {"ignore_eos", true},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}},
              {"temperature", 0.0}};
    if (!o_.model.empty()) b["model"] = o_.model;
    ConversationState& c = conversations_[conv];
    if (chat()) {
      Json user = {{"role", "user"}, {"content", user_text(c)}};
      if (o_.turns == 1) {  // nothing to keep
        b["messages"] = Json::array({std::move(user)});
        return b.dump();
      }
      c.messages.push_back(std::move(user));
      b["messages"] = c.messages;
      return b.dump();
    }
    // Per-token logprobs make every token its own visible event, also tokens whose text
    // is held back (incomplete UTF-8): TTFT is then the first token's time.
    b["logprobs"] = 0;
    if (o_.turns > 1) {
      c.text += (c.text.empty() ? "" : " ") + user_text(c);
      b["prompt"] = c.text;
    } else if (!o_.prompts.empty()) {
      b["prompt"] = o_.prompts[conv % o_.prompts.size()];
    } else {
      std::vector<int32_t> ids = prefix_ids_;
      const std::vector<int32_t> own = make_random_prompts(token_shape(), 1, rng_)[0];
      ids.insert(ids.end(), own.begin(), own.end());
      b["prompt"] = ids;
    }
    return b.dump();
  }

  // The model's answer ends conversation `conv`'s turn: it joins the text the next turn
  // extends.
  void answered(size_t conv, const std::string& output) {
    ConversationState& c = conversations_[conv];
    ++c.turn;
    if (chat())
      c.messages.push_back({{"role", "assistant"}, {"content", output}});
    else
      c.text += output;
  }

  void schedule_arrival() {
    if (next_ >= o_.num_requests) return;
    launch();
    std::exponential_distribution<double> gap(o_.request_rate);
    auto timer = std::make_shared<net::steady_timer>(ioc_);
    timer->expires_after(std::chrono::microseconds(static_cast<int64_t>(gap(rng_) * 1e6)));
    timer->async_wait([this, timer](boost::system::error_code) { schedule_arrival(); });
  }

  struct Call {
    tcp::socket socket;
    std::string request;
    std::array<char, 16384> buf{};
    SseReader reader;
    Clock::time_point t0, last;
    size_t conversation = 0, index = 0;
    std::string output;  // the text streamed back
    bool first = true;
    explicit Call(net::io_context& ioc) : socket(ioc) {}
  };

  // Starts the next conversation.
  void launch() { launch_turn(static_cast<size_t>(next_++)); }

  // Sends conversation `conv`'s current turn.
  void launch_turn(size_t conv) {
    auto c = std::make_shared<Call>(ioc_);
    c->conversation = conv;
    c->index =
        conv * static_cast<size_t>(o_.turns) + static_cast<size_t>(conversations_[conv].turn);
    std::string b = body(conv);
    c->request = "POST " + o_.endpoint + " HTTP/1.1\r\nHost: " + o_.host +
                 "\r\nContent-Type: application/json\r\n" +
                 (o_.api_key.empty() ? "" : "Authorization: Bearer " + o_.api_key + "\r\n") +
                 "Connection: close\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" +
                 b;
    c->t0 = Clock::now();
    net::async_connect(c->socket, endpoints_,
                       [this, c](boost::system::error_code ec, const tcp::endpoint&) {
                         if (ec) return done(c, "connect: " + ec.message());
                         c->socket.set_option(tcp::no_delay(true));
                         net::async_write(c->socket, net::buffer(c->request),
                                          [this, c](boost::system::error_code ec, size_t) {
                                            if (ec) return done(c, "write: " + ec.message());
                                            read(c);
                                          });
                       });
  }

  void read(const std::shared_ptr<Call>& c) {
    c->socket.async_read_some(net::buffer(c->buf), [this, c](boost::system::error_code ec,
                                                             size_t n) {
      Result& r = results_[c->index];
      c->reader.feed(c->buf.data(), n, [&](const std::string& ev) {
        if (ev == "[DONE]") return;
        Json j = Json::parse(ev, nullptr, false);
        if (j.is_discarded()) return;
        if (j.contains("error")) r.error = j["error"].value("message", std::string("error"));
        if (j.contains("usage") && j["usage"].is_object()) {
          const Json& u = j["usage"];
          r.prompt_tokens = u.value("prompt_tokens", 0);
          r.output_tokens = u.value("completion_tokens", 0);
          if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
              u["prompt_tokens_details"].contains("cached_tokens"))
            r.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", int64_t{0});
        }
        if (!j.contains("choices") || j["choices"].empty()) return;
        const Json& ch = j["choices"][0];
        std::string text = ch.contains("text")
                               ? ch.value("text", std::string())
                               : ch.value("delta", Json::object()).value("content", std::string());
        bool has_token = ch.contains("logprobs") && ch["logprobs"].is_object() &&
                         !ch["logprobs"].value("tokens", Json::array()).empty();
        if (text.empty() && !has_token) return;
        c->output += text;
        if (c->first) {
          r.ttft_ms = ms_since(c->t0);
          c->first = false;
        } else {
          r.itl_ms.push_back(
              std::chrono::duration<double, std::milli>(Clock::now() - c->last).count());
        }
        c->last = Clock::now();
      });
      if (!ec && !c->reader.finished()) return read(c);
      if (c->reader.status() != 200)
        return done(c, "HTTP " + std::to_string(c->reader.status()) + " " +
                           c->reader.leftover().substr(0, 200));
      done(c, r.error);
    });
  }

  void done(const std::shared_ptr<Call>& c, const std::string& error) {
    Result& r = results_[c->index];
    r.e2e_ms = ms_since(c->t0);
    r.error = error;
    r.ok = error.empty() && !c->first;
    if (!r.ok && r.error.empty()) r.error = "no tokens";
    boost::system::error_code ignored;
    c->socket.close(ignored);
    // The conversation's next turn, or (a turn failed) its later turns fail too.
    const size_t conv = c->conversation;
    if (r.ok) answered(conv, c->output);
    const int64_t turn = conversations_[conv].turn;
    if (r.ok && turn < o_.turns) return launch_turn(conv);
    for (int64_t k = r.ok ? o_.turns : turn + 1; k < o_.turns; ++k) {
      Result& later = results_[conv * static_cast<size_t>(o_.turns) + static_cast<size_t>(k)];
      later.error = "an earlier turn failed";
    }
    if (o_.request_rate <= 0 && next_ < o_.num_requests) launch();
  }

  Options o_;
  std::mt19937_64 rng_;
  net::io_context ioc_;
  tcp::resolver::results_type endpoints_;
  std::vector<Result> results_;
  std::vector<ConversationState> conversations_;
  std::vector<int32_t> prefix_ids_;
  std::string prefix_words_;
  int64_t next_ = 0;  // the next conversation to start
  Clock::time_point start_;
  double wall_ms_ = 0;
};

constexpr const char* kUsage =
    "usage: tachyon bench-serving [--url http://127.0.0.1:8088] [--endpoint /v1/completions]\n"
    "                             [--num-requests N] [--concurrency C | --request-rate R]\n"
    "                             [--input-len L] [--output-len O] [--shared-prefix-len P]\n"
    "                             [--multi-turn K] [--json]\n"
    "       tachyon bench-serving --overhead [--model DIR] ...   the HTTP layer's overhead\n\n"
    "Benchmarks a running server over HTTP with streaming requests of random prompts,\n"
    "optionally opening with one shared prefix (--shared-prefix-len) or forming\n"
    "conversations of K turns carried as text (--multi-turn; N counts conversations).\n";

std::optional<Options> parse(const std::vector<std::string>& argv) {
  const auto parsed = parse_command("bench-serving", argv, kUsage);
  if (!parsed) return std::nullopt;
  const SettingValues& args = *parsed;
  Options o;
  std::string url = args.str("url");
  if (url.rfind("http://", 0) != 0)
    raise<InvalidArgument>("--url must start with http://, got '{}'", url);
  std::string hostport = url.substr(7);
  hostport = hostport.substr(0, hostport.find('/'));
  auto colon = hostport.rfind(':');
  o.host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  o.port = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
  o.endpoint = args.str("endpoint");
  o.num_requests = args.integer("num-requests");
  o.concurrency = args.given("concurrency") ? args.integer("concurrency") : 0;
  o.request_rate = args.given("request-rate") ? args.number("request-rate") : 0;
  o.input_len = args.integer("input-len");
  o.output_len = args.integer("output-len");
  o.shared_prefix_len = args.integer("shared-prefix-len");
  o.turns = args.integer("multi-turn");
  const std::vector<std::string> keys = args.list("api-key");
  o.api_key = keys.empty() ? std::string() : keys.front();
  o.model = args.str("served-model-name");
  o.seed = args.integer("seed");
  o.json = args.flag("json");
  return o;
}

}  // namespace

std::vector<BenchResult> run_http_requests(const BenchOptions& o, double* wall_ms) {
  Bench bench(o);
  auto results = bench.run();
  if (wall_ms) *wall_ms = bench.wall_ms();
  return results;
}

Json dist_ms(const std::vector<double>& v) {
  return dist(v);
}

int run_serving_bench(const std::vector<std::string>& argv) {
  for (const std::string& a : argv)
    if (a == "--overhead" || a.rfind("--overhead=", 0) == 0) return run_overhead_bench(argv);
  const std::optional<Options> parsed = parse(argv);
  if (!parsed) return 0;
  const Options& o = *parsed;
  Bench bench(o);
  std::vector<Result> results = bench.run();
  std::vector<double> ttft, itl, tpot, e2e;
  std::vector<std::vector<double>> ttft_by_turn(static_cast<size_t>(o.turns));
  int64_t ok = 0, in_tokens = 0, out_tokens = 0, cached_tokens = 0, cache_reported = 0;
  const int64_t total = o.num_requests * o.turns;
  std::string first_error;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    in_tokens += r.prompt_tokens;
    out_tokens += r.output_tokens;
    if (r.cached_tokens >= 0) {
      ++cache_reported;
      cached_tokens += r.cached_tokens;
    }
    ttft_by_turn[i % static_cast<size_t>(o.turns)].push_back(r.ttft_ms);
    ttft.push_back(r.ttft_ms);
    e2e.push_back(r.e2e_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    if (r.output_tokens > 1)
      tpot.push_back((r.e2e_ms - r.ttft_ms) / static_cast<double>(r.output_tokens - 1));
  }
  double secs = bench.wall_ms() / 1000.0;
  Json report = {{"url", "http://" + o.host + ":" + o.port + o.endpoint},
                 {"num_requests", total},
                 {"shared_prefix_len", o.shared_prefix_len},
                 {"multi_turn", o.turns},
                 {"concurrency", o.concurrency},
                 {"request_rate", o.request_rate},
                 {"input_len", o.input_len},
                 {"output_len", o.output_len},
                 {"completed", ok},
                 {"input_tokens", in_tokens},
                 {"output_tokens", out_tokens},
                 {"failed", total - ok},
                 {"duration_s", secs},
                 {"request_throughput", static_cast<double>(ok) / secs},
                 {"output_throughput", static_cast<double>(out_tokens) / secs},
                 {"total_token_throughput", static_cast<double>(in_tokens + out_tokens) / secs},
                 {"ttft_ms", dist(ttft)},
                 {"itl_ms", dist(itl)},
                 {"tpot_ms", dist(tpot)},
                 {"e2e_ms", dist(e2e)}};
  if (!first_error.empty()) report["first_error"] = first_error;
  // The prompt tokens served from the prefix cache, when the server reports them for
  // every request (usage.prompt_tokens_details.cached_tokens).
  const bool cache_known = ok > 0 && cache_reported == ok;
  report["prompt_cache"] =
      cache_known ? Json{{"cached_prompt_tokens", cached_tokens},
                         {"prompt_tokens", in_tokens},
                         {"fraction", in_tokens > 0 ? static_cast<double>(cached_tokens) /
                                                          static_cast<double>(in_tokens)
                                                    : 0.0}}
                  : Json(nullptr);
  if (o.turns > 1) {
    report["conversations"] = o.num_requests;
    add_turn_report(ttft_by_turn, &report);
  }
  if (o.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("requests: %lld ok, %lld failed in %.2f s (%.2f req/s)\n",
                static_cast<long long>(ok), static_cast<long long>(total - ok), secs,
                report["request_throughput"].get<double>());
    const char* unit = o.endpoint == "/v1/chat/completions" || o.turns > 1 ? "words" : "tokens";
    if (o.shared_prefix_len > 0)
      std::printf("workload: every prompt opens with the same %lld %s, then its own %lld\n",
                  static_cast<long long>(o.shared_prefix_len), unit,
                  static_cast<long long>(o.input_len));
    if (o.turns > 1)
      std::printf(
          "workload: %lld conversations of %lld turns, each turn adding the last output and "
          "%lld new words (as text)\n",
          static_cast<long long>(o.num_requests), static_cast<long long>(o.turns),
          static_cast<long long>(o.input_len));
    if (cache_known)
      std::printf("cached prompt tokens: %lld of %lld (%.1f%%)\n",
                  static_cast<long long>(cached_tokens), static_cast<long long>(in_tokens),
                  100 * report["prompt_cache"]["fraction"].get<double>());
    else
      std::printf("cached prompt tokens: not reported by the server\n");
    if (o.turns > 1) {
      std::printf("ttft p50: first turn %.2f ms, later turns %.2f ms; by turn",
                  report["ttft_p50_ms_first_turn"].get<double>(),
                  report["ttft_p50_ms_later_turns"].get<double>());
      for (const Json& t : report["ttft_p50_ms_by_turn"])
        t.is_null() ? std::printf(" -") : std::printf(" %.2f", t.get<double>());
      std::printf("\n");
    }
    std::printf("throughput: %.1f output tok/s, %.1f total tok/s\n",
                report["output_throughput"].get<double>(),
                report["total_token_throughput"].get<double>());
    for (const char* k : {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"}) {
      const Json& d = report[k];
      std::printf("%-8s mean %8.2f  p50 %8.2f  p90 %8.2f  p99 %8.2f\n", k, d["mean"].get<double>(),
                  d["p50"].get<double>(), d["p90"].get<double>(), d["p99"].get<double>());
    }
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  return ok == total ? 0 : 1;
}

int cmd_bench_serving(const std::vector<std::string>& args) {
  return run_serving_bench(args);
}

}  // namespace tachyon::cli
