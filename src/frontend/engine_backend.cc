#include "frontend/engine_backend.h"

#include <algorithm>
#include <filesystem>

#include "chat/chat_template.h"
#include "core/logging.h"
#include "engine/kv_sizing.h"
#include "frontend/text.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
namespace {

class EngineHandle : public GenerationHandle {
 public:
  explicit EngineHandle(std::shared_ptr<RequestStream> s) : stream_(std::move(s)) {}
  void cancel() override { stream_->cancel(); }

 private:
  std::shared_ptr<RequestStream> stream_;
};

GenFinish to_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return GenFinish::kStop;
    case FinishReason::kLength:
      return GenFinish::kLength;
    case FinishReason::kCancelled:
      return GenFinish::kCancelled;
    case FinishReason::kTimeout:
      return GenFinish::kTimeout;
    case FinishReason::kError:
      return GenFinish::kError;
  }
  return GenFinish::kError;
}

// The request field a count of image placeholders is about: that of its images
// ("messages", "images"), or the prompt when it gives none.
std::string images_field(const std::vector<RequestImage>& images) {
  if (images.empty()) return "prompt";
  const std::string& f = images[0].field;
  return f.substr(0, f.find_first_of("[."));
}

}  // namespace

GenerateConfig to_generate_config(const GenerationParams& p) {
  GenerateConfig c;
  c.max_new_tokens = p.max_new_tokens;
  c.min_new_tokens = p.min_new_tokens;
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  c.random_seed = p.random_seed;
  c.repetition_penalty = p.repetition_penalty;
  c.presence_penalty = p.presence_penalty;
  c.frequency_penalty = p.frequency_penalty;
  c.no_repeat_ngram_size = p.no_repeat_ngram_size;
  c.logit_bias = p.logit_bias;
  c.stop_words_str = p.stop_words_str;
  c.stop_words_list = p.stop_words_list;
  c.ignore_eos = p.ignore_eos;
  c.force_disable_sp_run = p.force_disable_sp_run;
  c.timeout_ms = p.timeout_ms;
  c.num_return_sequences = p.num_return_sequences;
  c.num_beams = p.num_beams;
  c.length_penalty = p.length_penalty;
  c.return_logprobs = p.return_logprobs;
  c.top_logprobs = p.top_logprobs;
  c.constraint = p.constraint;
  return c;
}

GenEvent to_gen_event(StreamEvent&& e) {
  GenEvent g;
  g.index = e.index;
  g.token_ids = std::move(e.token_ids);
  g.text = std::move(e.text);
  g.stop_string = std::move(e.stop_string);
  for (size_t i = 0; i < e.logprobs.size(); ++i) {
    TokenLogprobInfo t;
    t.token = i < g.token_ids.size() ? g.token_ids[i] : -1;
    t.logprob = e.logprobs[i];
    if (i < e.top_logprobs.size())
      for (const auto& alt : e.top_logprobs[i]) t.top.emplace_back(alt.token, alt.logprob);
    g.logprobs.push_back(std::move(t));
  }
  if (e.finish_reason) g.finish = to_finish(*e.finish_reason);
  g.cum_log_prob = e.cum_log_prob;
  g.done = e.done;
  g.timings.queue_ms = e.timings.queue_ms;
  g.timings.first_token_ms = e.timings.first_token_ms;
  g.timings.total_ms = e.timings.total_ms;
  g.timings.iter_count = e.timings.iter_count;
  g.timings.input_len = e.timings.input_len;
  g.timings.output_len = e.timings.output_len;
  g.timings.prefix_len = e.timings.prefix_len;
  g.timings.reuse_len = e.timings.reuse_len;
  g.timings.token_gaps_ms = std::move(e.timings.token_gaps_ms);
  g.timings.speculative_draft_rounds = e.timings.speculative_draft_rounds;
  g.timings.speculative_accepted_tokens_per_pos =
      std::move(e.timings.speculative_accepted_tokens_per_pos);
  if (e.error) g.error = Error(e.error->code, e.error->message);
  return g;
}

std::shared_ptr<EngineBackend> EngineBackend::load(const EngineBackendOptions& o) {
  auto progress = [&](double done, double total, const std::string& stage) {
    if (o.progress) o.progress(done, total, stage);
  };
  std::shared_ptr<EngineBackend> b(new EngineBackend());
  std::string tok_dir = o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir;

  progress(0, 0, "tokenizer");
  b->tokenizer_ = Tokenizer::load(tok_dir);
  auto templates = load_chat_templates(tok_dir);
  if (!templates.empty()) {
    b->chat_ = std::make_shared<ChatTemplate>(templates.compile(std::nullopt, false));
    b->chat_tools_ = &templates.select(std::nullopt, true) == &templates.select(std::nullopt, false)
                         ? b->chat_
                         : std::make_shared<ChatTemplate>(templates.compile(std::nullopt, true));
    b->info_.tool_call_format = detect_tool_call_format(b->chat_tools_->source());
  }
  b->byte_level_ = is_byte_level(*b->tokenizer_);

  progress(0, 0, "weights");
  LoadOptions lo;
  lo.model_type = o.model_type;
  lo.sparse_config = o.sparse_config;
  lo.device = parse_device(o.device);
  lo.dtype = parse_compute_dtype(o.dtype);
  lo.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  lo.quantization = parse_load_quantization(o.quantization);
  lo.vocab_size = b->tokenizer_->vocab_size();  // a Megatron-LM padded vocabulary's cut
  const bool lora = o.lora.enabled || !o.lora.adapters.empty();
  if (o.lora.merge) {
    if (o.lora.adapters.size() != 1)
      raise<InvalidArgument>("--merge-lora folds exactly one LoRA adapter into the weights, not {}",
                             o.lora.adapters.size());
    lo.merge_lora = o.lora.adapters[0].path;
    b->merged_ = o.lora.adapters[0];
  } else if (lora) {
    lo.lora.max_loras = o.lora.max_loras;
    lo.lora.max_rank = o.lora.max_rank;
  }
  // A vision model's image processor before its weights: a folder without one fails now.
  b->images_ = ImagePreprocessor::load(o.model_dir, load_model_config(o.model_dir, lo));
  std::shared_ptr<Model> model;
  try {
    model = load_model(o.model_dir, lo);
  } catch (const InvalidArgument& e) {
    // "auto" falls back to the CPU when the model cannot run on the GPU yet.
    if (o.device != "auto" || lo.device->is_cpu()) throw;
    log_warning("cannot run on {} ({}); using the CPU", lo.device->str(), e.what());
    lo.device = Device{};
    model = load_model(o.model_dir, lo);
  }
  const ModelConfig& cfg = model->config();
  b->model_ = model;

  std::vector<int32_t> eos;
  for (int64_t id : cfg.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (auto id = b->tokenizer_->eos_id(); id && std::find(eos.begin(), eos.end(), *id) == eos.end())
    eos.push_back(*id);
  EngineConfig ec = o.engine;
  if (ec.eos_token_ids.empty()) ec.eos_token_ids = eos;
  if (lo.device->is_cpu())
    size_host_kv_cache(&ec, *model, host_memory_available());
  else if (ec.kv_cache_bytes <= 0 && ec.num_kv_blocks <= 0)
    ec.kv_cache_bytes =
        kv_cache_budget_bytes(*model, o.gpu_memory_fraction, ec.max_num_batched_tokens);
  ec.swap_space_bytes = swap_space_bytes(o.swap_space_gb, lo.device->is_cpu());
  if (o.make_proposer) {
    progress(0, 0, "draft model");
    ec.proposer = o.make_proposer(*model, lo, &ec);
  }

  b->prefix_caching_ = ec.prefix_caching;

  progress(0, 0, "kv cache");
  b->engine_ = std::make_unique<TextEngine>(model, make_text_tokenizer(b->tokenizer_, eos), ec);
  if (lora && !o.lora.merge) {
    progress(0, 0, "lora adapters");
    b->adapters_ =
        std::make_unique<AdapterRegistry>(model, b->engine_->engine(), o.lora.max_registered);
    for (const AdapterInfo& a : o.lora.adapters) b->adapters_->load(a.name, a.path);
  }

  b->info_.path = std::filesystem::absolute(o.model_dir).lexically_normal().string();
  b->info_.name = o.served_name;
  if (b->info_.name.empty()) {
    std::filesystem::path p(b->info_.path);
    b->info_.name =
        p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
  }
  int64_t window = b->engine_->max_seq_len();
  if (o.max_seq_len > 0) {
    if (o.max_seq_len > window)
      raise<InvalidArgument>("--max-seq-len {} exceeds the model's maximum sequence length {}",
                             o.max_seq_len, window);
    window = o.max_seq_len;
  }
  b->info_.max_model_len = static_cast<int32_t>(window);
  b->info_.vocab_size = b->engine_->vocab_size();
  b->info_.has_chat_template = b->chat_ != nullptr;
  b->info_.takes_images = b->images_ != nullptr;
  progress(0, 0, "ready");  // a stage, not bytes
  return b;
}

EngineBackend::~EngineBackend() {
  shutdown();
}

void EngineBackend::shutdown() {
  if (engine_) engine_->shutdown();
}

std::vector<int32_t> EngineBackend::encode(std::string_view text, bool add_special_tokens) const {
  return tokenizer_->encode(text, add_special_tokens);
}

std::string EngineBackend::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return tokenizer_->decode(ids, skip_special_tokens);
}

std::string EngineBackend::token_bytes(int32_t id) const {
  return token_text_bytes(*tokenizer_, id, byte_level_);
}

ChatPrompt EngineBackend::render_chat(const Json& messages, const nlohmann::ordered_json& tools,
                                      bool add_generation_prompt, const Json& extra,
                                      const RenderControl& control) const {
  if (!chat_)
    raise<InvalidArgument>("this model has no chat template; use /v1/completions or a text prompt");
  jinja::RenderOptions options;
  options.cancel = control.cancel;
  options.deadline = control.deadline;
  auto fill = [&](auto& in) {
    in.add_generation_prompt = add_generation_prompt;
    in.bos_token = tokenizer_->bos_token().value_or("");
    in.eos_token = tokenizer_->eos_token().value_or("");
    in.pad_token = tokenizer_->pad_token().value_or("");
    in.unk_token = tokenizer_->unk_token().value_or("");
  };
  RenderedChat r;
  if (tools.is_null()) {
    ChatTemplateInputs in;
    fill(in);
    in.messages = messages;
    in.extra = extra.is_object() ? extra : Json::object();
    r = chat_->render_marked(in, options);
  } else {  // key order kept for the tools (their schemas render as sent)
    OrderedChatTemplateInputs in;
    fill(in);
    in.messages = nlohmann::ordered_json::parse(messages.dump());
    in.tools = tools;
    in.extra = nlohmann::ordered_json::parse(extra.is_object() ? extra.dump() : "{}");
    r = chat_tools_->render_marked(in, options);
  }
  ChatPrompt p;
  p.text = std::move(r.text);
  p.untrusted.reserve(r.untrusted.size());
  for (const auto& s : r.untrusted) p.untrusted.push_back({s.begin, s.end});
  return p;
}

std::vector<int32_t> EngineBackend::encode_chat(const ChatPrompt& prompt,
                                                bool add_special_tokens) const {
  return tokenizer_->encode(prompt.text, add_special_tokens, prompt.untrusted);
}

std::shared_ptr<GenerationHandle> EngineBackend::generate(std::vector<int32_t> prompt,
                                                          const GenerationParams& params,
                                                          GenSink sink) {
  GenerateRequest req;
  req.config = to_generate_config(params);
  if (images_ != nullptr) {
    // Each image's placeholder becomes the tower's tokens; they take room in the window.
    const std::string field = images_field(params.images);
    ImagePrompt p = images_->prepare(*model_, prompt, params.images, field);
    const int64_t len = static_cast<int64_t>(p.ids.size());
    if (len >= info_.max_model_len)
      raise<InvalidArgument>(
          "{}: the prompt with its images' tokens has {} tokens; the model's maximum sequence "
          "length is {}",
          field, len, info_.max_model_len);
    if (req.config.max_new_tokens && len + *req.config.max_new_tokens > info_.max_model_len)
      req.config.max_new_tokens = static_cast<int32_t>(info_.max_model_len - len);
    req.prompt_ids = std::move(p.ids);
    req.images = std::move(p.images);
  } else {
    if (!params.images.empty())
      raise<InvalidArgument>("{}: this model takes no images", params.images[0].field);
    req.prompt_ids = std::move(prompt);
  }
  // The adapter stays registered with the engine while the request runs (its sink holds
  // it); the merged adapter's name is the model itself.
  std::shared_ptr<const AdapterRegistry::Lease> lease;
  if (!params.adapter_name.empty() && params.adapter_name != merged_.name) {
    if (!adapters_)
      raise<InvalidArgument>(
          "no LoRA adapter named '{}': adapters are not enabled (--lora, "
          "--enable-lora)",
          params.adapter_name);
    lease = adapters_->acquire(params.adapter_name);
    req.adapter = lease->id();
  }
  auto stream = engine_->submit(std::move(req),
                                [sink = std::move(sink), lease](std::vector<StreamEvent>&& events) {
                                  std::vector<GenEvent> out;
                                  out.reserve(events.size());
                                  for (auto& e : events) out.push_back(to_gen_event(std::move(e)));
                                  sink(std::move(out));
                                });
  return std::make_shared<EngineHandle>(std::move(stream));
}

std::vector<AdapterInfo> EngineBackend::adapters() const {
  std::vector<AdapterInfo> out;
  if (!merged_.name.empty()) out.push_back(merged_);
  if (adapters_) {
    std::vector<AdapterInfo> more = adapters_->list();
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

void EngineBackend::load_adapter(const std::string& name, const std::string& path) {
  if (!adapters_)
    raise<InvalidArgument>(
        "cannot load LoRA adapter '{}': adapters are not enabled (--enable-lora, --lora)", name);
  adapters_->load(name, path);
}

void EngineBackend::unload_adapter(const std::string& name) {
  if (!adapters_) raise<NotFound>("LoRA adapter '{}' is not loaded", name);
  adapters_->unload(name);
}

int32_t EngineBackend::pin_prefix(const std::vector<int32_t>& ids) {
  if (!prefix_caching_) return 0;
  return engine_->engine().pin_prefix(ids);
}

bool EngineBackend::healthy() const {
  return engine_ && engine_->healthy();
}

std::string EngineBackend::dead_reason() const {
  return engine_ ? engine_->dead_reason() : "not loaded";
}

BackendStats EngineBackend::stats() const {
  EngineStats e = engine_->stats();
  BackendStats s;
  s.num_running = e.num_running;
  s.num_waiting = e.num_waiting;
  // The capacity, and as free what is free of it, reserved yet or not (a cache that
  // grows on demand: EngineConfig::kv_grow_blocks).
  s.num_kv_blocks = std::max(e.max_kv_blocks, e.num_kv_blocks);
  s.num_free_kv_blocks = e.num_free_blocks + (s.num_kv_blocks - e.num_kv_blocks);
  s.block_size = e.block_size;
  s.kv_cache_usage =
      s.num_kv_blocks > 0 ? 1.0 - static_cast<double>(s.num_free_kv_blocks) / s.num_kv_blocks : 0.0;
  s.num_preemptions = e.num_preemptions;
  s.num_swap_outs = e.num_swap_outs;
  s.prefix_cache_queries = e.prefix_cache_queries;
  s.prefix_cache_hits = e.prefix_cache_hits;
  s.prefix_cache_host_hits = e.prefix_cache_host_hits;
  s.num_cached_blocks = e.num_cached_blocks;
  s.num_pinned_blocks = e.num_pinned_blocks;
  s.spec_num_drafts = e.spec_num_drafts;
  s.spec_num_draft_tokens = e.spec_num_draft_tokens;
  s.spec_num_accepted_tokens = e.spec_num_accepted_tokens;
  s.spec_accepted_per_pos = e.spec_accepted_per_pos;
  return s;
}

}  // namespace tachyon
