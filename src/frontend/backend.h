// What the HTTP layer needs of the model side (RTP-LLM's InferenceServer/Pipeline):
// prompt building (chat template, tokenization), generation with a stream of events,
// token texts for logprobs, health and load statistics. EngineBackend implements it
// over AsyncModel and the tokenizer; tests implement it with fakes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "frontend/tool_calls.h"
#include "grammar/compile.h"
#include "media/image.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

// What may end a chat template render in progress: a flag its caller sets (the client
// left, the server shuts down) and a deadline.
struct RenderControl {
  const std::atomic<bool>* cancel = nullptr;
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

// An image a request gives (an OpenAI image_url content part, an entry of the native
// API's images): the reference as sent and, once fetched and decoded on the work pool,
// its pixels.
struct RequestImage {
  std::string url;     // data:, http(s)://, file:// or (native API) a local path
  std::string detail;  // OpenAI's "auto", "low" or "high"; "" when not given
  std::string field;   // where the request gave it ("messages[0].content[1]", "images[0]")
  std::shared_ptr<const media::RgbImage> image;
};

// Generation parameters, with RTP-LLM's GenerateConfig names (the engine's vocabulary).
struct GenerationParams {
  std::optional<int32_t> max_new_tokens;  // unset: up to the model's window
  int32_t min_new_tokens = 0;
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::optional<uint64_t> random_seed;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t no_repeat_ngram_size = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // sorted by token
  std::vector<std::string> stop_words_str;
  std::vector<std::vector<int32_t>> stop_words_list;
  bool ignore_eos = false;
  bool force_disable_sp_run = false;  // plain decoding where the engine speculates
  int64_t timeout_ms = 0;             // 0: none
  int32_t num_return_sequences = 1;
  int32_t num_beams = 1;
  float length_penalty = 1.0f;
  bool return_logprobs = false;
  int32_t top_logprobs = 0;
  bool skip_special_tokens = true;
  // The LoRA adapter the request runs with, by its registered name; "": the base model.
  std::string adapter_name;
  // Structured output (GenerateConfig::constraint): regex, choice, GBNF or a JSON object.
  std::optional<grammar::GrammarSpec> constraint;
  // The prompt's images, in the order they appear in it.
  std::vector<RequestImage> images;
};

// A LoRA adapter registered for requests to name.
struct AdapterInfo {
  std::string name;
  std::string path;
};

enum class GenFinish { kStop, kLength, kCancelled, kTimeout, kError };
std::string_view gen_finish_name(GenFinish f);

struct TokenLogprobInfo {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // most likely alternatives, best first
};

// RTP-LLM's aux_info. Times in milliseconds from submission to the engine.
struct GenTimings {
  double queue_ms = 0;
  double first_token_ms = 0;
  double total_ms = 0;
  int32_t iter_count = 0;
  int32_t input_len = 0;
  int32_t output_len = 0;
  int32_t prefix_len = 0;
  int32_t reuse_len = 0;
  std::vector<double> token_gaps_ms;  // inter-token gaps of sequence 0
  // Speculative decoding: verify steps with drafts, and acceptances per draft position.
  int32_t speculative_draft_rounds = 0;
  std::vector<int32_t> speculative_accepted_tokens_per_pos;
};

// One delta of a request's output (one output sequence), or the request's last event.
struct GenEvent {
  int32_t index = 0;  // output sequence; -1 on the last event
  std::vector<int32_t> token_ids;
  std::string text;                        // new text; stop strings removed
  std::string stop_string;                 // on a last delta: the stop string that ended it
  std::vector<TokenLogprobInfo> logprobs;  // per new token, when asked for
  std::optional<GenFinish> finish;         // on the sequence's last delta
  double cum_log_prob = 0;
  bool done = false;           // the request's last event
  GenTimings timings;          // on the last event
  std::optional<Error> error;  // on the last event, when the request failed
};

// Receives a request's events in order, a batch at a time (whatever arrived together),
// never concurrently; the last event of the last batch has done == true. It runs on a
// backend thread and must not block for long.
using GenSink = std::function<void(std::vector<GenEvent>&&)>;

class GenerationHandle {
 public:
  virtual ~GenerationHandle() = default;
  // Stops the request (its cache is freed); the sink still gets a final event.
  virtual void cancel() = 0;
};

struct BackendStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0;  // [0, 1]
  int64_t num_kv_blocks = 0;
  int64_t num_free_kv_blocks = 0;
  int64_t block_size = 0;
  int64_t num_preemptions = 0;
  int64_t num_swap_outs = 0;  // preemptions that swapped the KV blocks out
  // The prefix cache: prompt tokens looked up and found, those found in the host tier,
  // and the blocks it holds now (cached and free, or pinned).
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t prefix_cache_host_hits = 0;
  int64_t num_cached_blocks = 0;
  int64_t num_pinned_blocks = 0;
  // Speculative decoding: verify steps with drafts, draft tokens verified, those accepted,
  // and acceptances per draft position.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
};

struct ModelInfo {
  std::string name;  // served model name
  std::string path;
  int32_t max_model_len = 0;
  int32_t vocab_size = 0;
  bool has_chat_template = false;
  // The format the chat template writes tool calls in, when it tells unambiguously
  // (tool_calls.h); tool_choice "auto" parses the output in it unless the server names one.
  std::optional<ToolCallFormat> tool_call_format;
  // Whether the model reads images (it has a vision tower); without one, requests
  // carrying images are refused.
  bool takes_images = false;
};

// A rendered chat prompt, and the byte ranges of it that came from the request (message
// content, tools, kwargs) rather than from the template.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> untrusted;
};

class InferenceBackend {
 public:
  virtual ~InferenceBackend() = default;

  virtual const ModelInfo& model_info() const = 0;

  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  // The raw bytes one token stands for (may be part of a UTF-8 character).
  virtual std::string token_bytes(int32_t id) const = 0;
  // Renders chat messages (OpenAI form, content already plain text) with the model's
  // template. `tools` is the template's `tools` (OpenAI form, keys in the order sent;
  // null: none; with tools the template named "tool_use" is chosen when there is one),
  // `extra` holds template variables (chat_template_kwargs). Throws InvalidArgument when
  // the model has no template, the messages do not fit it, or `control` stopped the
  // render (cancelled, or past its deadline).
  virtual ChatPrompt render_chat(const Json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const Json& extra,
                                 const RenderControl& control) const = 0;
  // Token ids of a rendered chat prompt: no special token is matched in its untrusted
  // ranges (clear them to match special tokens everywhere, as encode() does).
  virtual std::vector<int32_t> encode_chat(const ChatPrompt& prompt,
                                           bool add_special_tokens) const = 0;

  // Submits a request. Throws InvalidArgument (bad parameters), ResourceExhausted
  // (cannot ever fit, or the engine queue is full) or Unavailable (shut down, dead).
  virtual std::shared_ptr<GenerationHandle> generate(std::vector<int32_t> prompt,
                                                     const GenerationParams& params,
                                                     GenSink sink) = 0;
  // Computes the K/V of `ids` and pins it in the prefix cache (a system prompt that
  // requests start with). Blocks until done; returns the tokens pinned (whole blocks),
  // 0 when the backend keeps no prefix cache. Throws InvalidArgument for ids it cannot
  // take (empty, too long).
  virtual int32_t pin_prefix(const std::vector<int32_t>& ids) = 0;

  // ---- LoRA adapters (multi-LoRA) ----
  // The registered adapters, by name.
  virtual std::vector<AdapterInfo> adapters() const { return {}; }
  // Registers the PEFT adapter folder `path` as `name`. Throws InvalidArgument (a bad
  // name or adapter, the name taken by another path, adapters not enabled), NotFound (no
  // such folder) or ResourceExhausted (past the registered adapters' limit); changes
  // nothing then. Registering a name again with its own path does nothing.
  virtual void load_adapter(const std::string& name, const std::string& path) {
    (void)path;
    raise<InvalidArgument>("cannot load LoRA adapter '{}': adapters are not enabled", name);
  }
  // Removes adapter `name` (requests running on it finish first; new ones naming it are
  // refused). Throws NotFound for a name not registered.
  virtual void unload_adapter(const std::string& name) {
    raise<NotFound>("LoRA adapter '{}' is not loaded", name);
  }

  virtual bool healthy() const = 0;
  virtual std::string dead_reason() const = 0;
  virtual BackendStats stats() const = 0;
};

}  // namespace tachyon
