// A deterministic InferenceBackend for server tests. Tokens are bytes (id = byte + 3;
// 0 pad, 1 BOS, 2 EOS). Sequence i of a request with seed s generates the letters
// 'a' + (s + i + k) % 26 for k = 0, 1, ...; each token has logprob -(k % 5 + 1) / 4 and
// alternatives ranked after it. Events come from a thread per request, one token per
// step (delay configurable), so cancellation and disconnects can be observed.
// LoRA adapters: a registry with the backend contract's errors that records every call;
// a request naming an adapter not registered is refused as the engine refuses it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include "frontend/backend.h"

namespace tachyon::server::testing {

class FakeBackend : public InferenceBackend, public std::enable_shared_from_this<FakeBackend> {
 public:
  explicit FakeBackend(int32_t max_model_len = 256) {
    info_.name = "fake-model";
    info_.path = "/models/fake";
    info_.max_model_len = max_model_len;
    info_.vocab_size = 259;
    info_.has_chat_template = true;
  }
  ~FakeBackend() override { join_all(); }

  // Knobs.
  std::atomic<int> step_delay_ms{0};
  std::atomic<int> fail_after_tokens{-1};  // >= 0: the request fails after that many tokens
  std::atomic<bool> dead{false};
  // A render that runs until its control stops it (a template that takes long).
  std::atomic<bool> slow_render{false};
  // When set (before the requests), every sequence writes this text, a byte a token, and
  // stops at its end.
  std::string script;
  std::atomic<bool> prefix_caching{true};
  // The prefix cache's reuse_len on each request's last event, and its stats.
  std::atomic<int32_t> reuse_len{0};
  // Set before requests: its prefix cache and speculative decoding fields are reported.
  BackendStats prefix_stats;

  // Whether the model reads images (set before requests).
  void set_takes_images(bool v) { info_.takes_images = v; }

  // Observations.
  mutable std::atomic<int> renders_started{0}, renders_stopped{0};
  std::atomic<int> submitted{0}, cancelled{0}, finished{0}, active{0};
  GenerationParams last_params() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_params_;
  }
  std::vector<int32_t> last_prompt() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_prompt_;
  }

  const ModelInfo& model_info() const override { return info_; }
  void set_tool_call_format(std::optional<ToolCallFormat> f) { info_.tool_call_format = f; }

  // ---- LoRA adapters ----
  std::atomic<bool> adapters_enabled{true};
  std::atomic<size_t> max_adapters{8};
  // load_adapter fails (InvalidArgument) for these paths; paths not opening with '/'
  // do not exist (NotFound).
  std::set<std::string> bad_adapter_paths;
  std::vector<AdapterInfo> adapters() const override {
    std::lock_guard<std::mutex> lock(adapters_mu_);
    std::vector<AdapterInfo> out;
    for (const auto& [name, path] : adapters_) out.push_back({name, path});
    return out;
  }
  void load_adapter(const std::string& name, const std::string& path) override {
    std::lock_guard<std::mutex> lock(adapters_mu_);
    adapter_calls_.push_back("load " + name + " " + path);
    if (!adapters_enabled) throw InvalidArgument("adapters are not enabled");
    if (name.empty()) throw InvalidArgument("empty adapter name");
    if (auto it = adapters_.find(name); it != adapters_.end()) {
      if (it->second == path) return;
      throw InvalidArgument("adapter '" + name + "' is registered with another path");
    }
    if (path.empty() || path[0] != '/') throw NotFound("no adapter folder '" + path + "'");
    if (bad_adapter_paths.count(path)) throw InvalidArgument("bad adapter in '" + path + "'");
    if (adapters_.size() >= max_adapters) throw ResourceExhausted("too many adapters");
    adapters_.emplace(name, path);
  }
  void unload_adapter(const std::string& name) override {
    std::lock_guard<std::mutex> lock(adapters_mu_);
    adapter_calls_.push_back("unload " + name);
    if (adapters_.erase(name) == 0) throw NotFound("LoRA adapter '" + name + "' is not loaded");
  }
  // Every load/unload call, in order ("load NAME PATH", "unload NAME").
  std::vector<std::string> adapter_calls() const {
    std::lock_guard<std::mutex> lock(adapters_mu_);
    return adapter_calls_;
  }
  // The adapter of each request submitted, in order.
  std::vector<std::string> submitted_adapters() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_adapters_;
  }

  // Bytes as ids + 3, and "</s>" as the special token 2 (but inside the untrusted ranges
  // of encode_chat).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    return encode_chat(ChatPrompt{std::string(text), {}}, add_special_tokens);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 3) {
        if (!skip_special_tokens) out += id == 1 ? "<s>" : id == 2 ? "</s>" : "<pad>";
        continue;
      }
      out += static_cast<char>(id - 3);
    }
    return out;
  }
  std::string token_bytes(int32_t id) const override {
    if (id < 3) return id == 1 ? "<s>" : id == 2 ? "</s>" : "<pad>";
    return std::string(1, static_cast<char>(id - 3));
  }
  std::vector<int32_t> encode_chat(const ChatPrompt& prompt,
                                   bool add_special_tokens) const override {
    static constexpr std::string_view kEos = "</s>";
    const std::string& text = prompt.text;
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(1);
    for (size_t i = 0; i < text.size();) {
      const bool plain =
          std::any_of(prompt.untrusted.begin(), prompt.untrusted.end(),
                      [&](const TextRange& r) { return r.begin < i + kEos.size() && i < r.end; });
      if (!plain && std::string_view(text).substr(i, kEos.size()) == kEos) {
        ids.push_back(2);
        i += kEos.size();
      } else {
        ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(text[i])) + 3);
        ++i;
      }
    }
    return ids;
  }
  ChatPrompt render_chat(const Json& messages, const nlohmann::ordered_json& tools,
                         bool add_generation_prompt, const Json& extra,
                         const RenderControl& control) const override {
    ++renders_started;
    while (slow_render) {
      if ((control.cancel != nullptr && control.cancel->load()) ||
          (control.deadline && std::chrono::steady_clock::now() > *control.deadline)) {
        ++renders_stopped;
        throw InvalidArgument("the render was stopped");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ChatPrompt out;
    if (extra.contains("prefix") && extra["prefix"].is_string()) {
      out.text = extra["prefix"].get<std::string>();
      out.untrusted.push_back({0, out.text.size()});
    }
    if (!tools.is_null()) out.text += "tools: " + tools.dump() + "\n";
    for (const auto& m : messages) {
      const size_t begin = out.text.size();
      out.text += m["role"].get<std::string>() + ": " + content_text(m["content"]);
      out.untrusted.push_back({begin, out.text.size()});
      out.text += "\n";
    }
    if (add_generation_prompt) out.text += "assistant:";
    return out;
  }

  // A message's content as the fake template writes it: a string, or its parts (text,
  // and "<image>" for an image).
  static std::string content_text(const Json& c) {
    if (c.is_string()) return c.get<std::string>();
    std::string out;
    for (const Json& part : c)
      out += part["type"] == "image" ? std::string("<image>") : part["text"].get<std::string>();
    return out;
  }

  std::shared_ptr<GenerationHandle> generate(std::vector<int32_t> prompt,
                                             const GenerationParams& params,
                                             GenSink sink) override {
    if (dead) throw Unavailable("engine is dead");
    if (params.num_beams > 1) throw InvalidArgument("num_beams > 1 is not supported by the fake");
    if (!params.adapter_name.empty()) {
      std::lock_guard<std::mutex> lock(adapters_mu_);
      if (adapters_.count(params.adapter_name) == 0)
        throw InvalidArgument("LoRA adapter '" + params.adapter_name + "' is not loaded");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      submitted_adapters_.push_back(params.adapter_name);
      last_params_ = params;
      last_prompt_ = prompt;
    }
    submitted++;
    active++;
    auto handle = std::make_shared<Handle>();
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back(
        [this, handle, prompt = std::move(prompt), params, sink = std::move(sink)]() mutable {
          run(*handle, prompt, params, sink);
          sink = nullptr;  // drop what the sink holds before the request counts as done
          active--;
          finished++;
        });
    return handle;
  }

  // Records what it pins; returns the whole blocks of 16 tokens (0 with prefix_caching off).
  int32_t pin_prefix(const std::vector<int32_t>& ids) override {
    if (ids.empty()) throw InvalidArgument("pin_prefix: empty prompt");
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.push_back(ids);
    return prefix_caching ? static_cast<int32_t>(ids.size() / 16 * 16) : 0;
  }
  std::vector<std::vector<int32_t>> pinned() {
    std::lock_guard<std::mutex> lock(mu_);
    return pinned_;
  }

  bool healthy() const override { return !dead; }
  std::string dead_reason() const override { return dead ? "test says so" : ""; }
  BackendStats stats() const override {
    BackendStats s;
    s.num_running = active.load();
    s.num_kv_blocks = 100;
    s.num_free_kv_blocks = 100 - active.load();
    s.block_size = 16;
    s.kv_cache_usage = active.load() / 100.0;
    s.prefix_cache_queries = prefix_stats.prefix_cache_queries;
    s.prefix_cache_hits = prefix_stats.prefix_cache_hits;
    s.prefix_cache_host_hits = prefix_stats.prefix_cache_host_hits;
    s.num_cached_blocks = prefix_stats.num_cached_blocks;
    s.num_pinned_blocks = prefix_stats.num_pinned_blocks;
    s.spec_num_drafts = prefix_stats.spec_num_drafts;
    s.spec_num_draft_tokens = prefix_stats.spec_num_draft_tokens;
    s.spec_num_accepted_tokens = prefix_stats.spec_num_accepted_tokens;
    s.spec_accepted_per_pos = prefix_stats.spec_accepted_per_pos;
    return s;
  }

  // Expected output of sequence `index` for `seed` and n tokens.
  static std::string expected_text(uint64_t seed, int index, int n) {
    std::string s;
    for (int k = 0; k < n; ++k) s += static_cast<char>('a' + (seed + index + k) % 26);
    return s;
  }

  void join_all() {
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ts.swap(threads_);
    }
    for (auto& t : ts) t.join();
  }

 private:
  struct Handle : GenerationHandle {
    std::atomic<bool> cancel_requested{false};
    void cancel() override { cancel_requested = true; }
  };

  void run(Handle& h, const std::vector<int32_t>& prompt, const GenerationParams& p,
           GenSink& sink) {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t seed = p.random_seed.value_or(0);
    int n = std::max(1, p.num_return_sequences);
    int max_new = p.max_new_tokens.value_or(info_.max_model_len - static_cast<int>(prompt.size()));
    std::vector<std::string> text(n);
    std::vector<bool> done(n, false);
    int produced = 0;
    GenEvent last;
    last.index = -1;
    last.done = true;
    for (int k = 0;; ++k) {
      if (step_delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms.load()));
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (h.cancel_requested) {
        cancelled++;
        std::vector<GenEvent> evs;
        for (int i = 0; i < n; ++i)
          if (!done[i]) evs.push_back(finish_event(i, GenFinish::kCancelled));
        last.finish = GenFinish::kCancelled;
        evs.push_back(last);
        sink(std::move(evs));
        return;
      }
      if (p.timeout_ms > 0 && ms > static_cast<double>(p.timeout_ms)) {
        last.finish = GenFinish::kTimeout;
        last.error = DeadlineExceeded("timed out after " + std::to_string(p.timeout_ms) + " ms");
        sink({last});
        return;
      }
      if (fail_after_tokens >= 0 && produced >= fail_after_tokens) {
        last.finish = GenFinish::kError;
        last.error = Internal("injected failure");
        sink({last});
        return;
      }
      std::vector<GenEvent> evs;
      bool all_done = true;
      for (int i = 0; i < n; ++i) {
        if (done[i]) continue;
        GenEvent e;
        e.index = i;
        char c = script.empty() ? static_cast<char>('a' + (seed + i + k) % 26)
                                : script[std::min<size_t>(size_t(k), script.size() - 1)];
        e.token_ids = {static_cast<int32_t>(c) + 3};
        e.text = std::string(1, c);
        if (p.return_logprobs) {
          TokenLogprobInfo lp;
          lp.token = e.token_ids[0];
          lp.logprob = -static_cast<float>(k % 5 + 1) / 4;
          for (int j = 0; j < p.top_logprobs; ++j)
            lp.top.emplace_back(j == 0 ? lp.token : lp.token + j,
                                lp.logprob - static_cast<float>(j));
          e.logprobs.push_back(lp);
        }
        text[i] += c;
        e.cum_log_prob = -0.5 * (k + 1);
        for (const auto& stop : p.stop_words_str) {
          // Single-character stops only: longer ones would need the engine's hold-back.
          if (stop.size() == 1 && text[i].back() == stop[0]) {
            e.text.clear();
            e.finish = GenFinish::kStop;
          }
        }
        if (!e.finish && !script.empty() && size_t(k) + 1 >= script.size())
          e.finish = GenFinish::kStop;
        if (!e.finish && k + 1 >= max_new) e.finish = GenFinish::kLength;
        if (e.finish) done[i] = true;
        all_done = all_done && done[i];
        evs.push_back(std::move(e));
      }
      ++produced;
      if (all_done) {
        last.timings.total_ms = ms;
        last.timings.first_token_ms = 1;
        last.timings.iter_count = k + 1;
        last.timings.input_len = static_cast<int32_t>(prompt.size());
        last.timings.reuse_len = reuse_len.load();
        last.timings.output_len = (k + 1) * n;
        evs.push_back(last);
      }
      sink(std::move(evs));
      if (all_done) return;
    }
  }

  static GenEvent finish_event(int i, GenFinish f) {
    GenEvent e;
    e.index = i;
    e.finish = f;
    return e;
  }

  ModelInfo info_;
  std::mutex mu_;
  GenerationParams last_params_;
  std::vector<int32_t> last_prompt_;
  std::vector<std::vector<int32_t>> pinned_;
  std::vector<std::string> submitted_adapters_;
  std::vector<std::thread> threads_;
  mutable std::mutex adapters_mu_;
  std::map<std::string, std::string> adapters_;
  std::vector<std::string> adapter_calls_;
};

}  // namespace tachyon::server::testing
