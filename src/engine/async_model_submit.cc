// AsyncModel on its callers' threads: requests checked and queued for the loop (submit,
// pin_prefix), adapters registered and removed (the loop takes them in between steps).
#include <limits>

#include "core/logging.h"
#include "engine/async_model.h"
#include "engine/async_model_inbox.h"

namespace tachyon {

using Clock = std::chrono::steady_clock;

int32_t AsyncModel::pin_prefix(std::vector<int32_t> prompt_ids) {
  if (prefix_reuse_ == LanguageModel::PrefixReuse::kNever)
    raise<InvalidArgument>("pin_prefix: prefix caching is off");
  GenerateRequest request;
  request.prompt_ids = std::move(prompt_ids);
  request.config.max_new_tokens = 1;  // the prompt is computed; its token is dropped
  auto pinned = std::make_shared<std::atomic<int32_t>>(0);
  GenerateResult result = enqueue(std::move(request), pinned)->wait();
  if (result.error) {
    if (result.error->code == ErrorCode::kInternal) raise<Internal>("{}", result.error->message);
    raise<Unavailable>("pin_prefix: {}", result.error->message);
  }
  return pinned->load();
}

void AsyncModel::add_adapter(int32_t id, std::shared_ptr<const PreparedAdapter> adapter) {
  if (model_->max_adapters() <= 0)
    raise<InvalidArgument>("the model was loaded without room for LoRA adapters");
  if (id <= 0 || adapter == nullptr) raise<InvalidArgument>("add_adapter: adapter id {}", id);
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (!inbox_->adapters.insert(id).second)
      raise<InvalidArgument>("add_adapter: adapter id {} is in use", id);
    inbox_->adapter_changes.emplace_back(id, std::move(adapter));
  }
  inbox_->cv.notify_all();
}

void AsyncModel::remove_adapter(int32_t id) {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (inbox_->adapters.erase(id) == 0) return;
    inbox_->adapter_changes.emplace_back(id, nullptr);
  }
  inbox_->cv.notify_all();
}

std::shared_ptr<RequestStream> AsyncModel::submit(GenerateRequest request) {
  return enqueue(std::move(request), nullptr);
}

std::shared_ptr<RequestStream> AsyncModel::enqueue(GenerateRequest request,
                                                   std::shared_ptr<std::atomic<int32_t>> pinned) {
  GenerateConfig& cfg = request.config;
  const auto& prompt = request.prompt_ids;
  if (prompt.empty()) raise<InvalidArgument>("prompt_ids: the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab_size_)
      raise<InvalidArgument>(
          "prompt_ids: token {} at position {} is outside the vocabulary (size {})", prompt[i], i,
          vocab_size_);
  if (prompt.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2))
    raise<InvalidArgument>("prompt_ids: too long");
  const int32_t prompt_len = static_cast<int32_t>(prompt.size());
  const PromptLayout layout = model_->prompt_layout(prompt);
  if (layout.atomic_len() > config_.max_num_batched_tokens)
    raise<InvalidArgument>(
        "prompt_ids: the prompt's bidirectional context of {} tokens is computed in one step, "
        "and a step holds at most {} tokens (max_num_batched_tokens)",
        layout.atomic_len(), config_.max_num_batched_tokens);
  std::shared_ptr<const PromptImages> images = prompt_images(*model_, prompt, request.images);
  cfg.validate();
  cfg.validate_for_model(vocab_size_, max_seq_len_, prompt_len);
  const int32_t width = cfg.width();
  if (width > config_.max_num_seqs)
    raise<InvalidArgument>("generate_config.{}: {} exceeds the engine's max_num_seqs {}",
                           cfg.is_beam_search() ? "num_beams" : "num_return_sequences", width,
                           config_.max_num_seqs);
  if (!cfg.stop_words_str.empty())
    raise<InvalidArgument>(
        "generate_config.stop_words_str: stop strings are matched on the text, which the engine "
        "does not see: submit through the frontend (TextEngine), with a tokenizer");
  const int32_t max_new = cfg.max_new_tokens.value_or(max_seq_len_ - prompt_len);
  const int64_t worst =
      KVCacheManager::worst_case_blocks(prompt_len + max_new, width, config_.block_size);
  if (worst > num_blocks_)
    raise<ResourceExhausted>(
        "the request needs up to {} KV cache blocks ({} prompt + {} new tokens, {} sequence(s), "
        "{} tokens per block) but the cache holds {}: lower max_new_tokens or give the cache "
        "more memory",
        worst, prompt_len, max_new, width, config_.block_size, num_blocks_);

  auto r = std::make_unique<EngineRequest>();
  r->prompt = std::move(request.prompt_ids);
  r->prompt_len = prompt_len;
  r->layout = layout;
  // Blocks are shared by the cache where the K/V depends on the tokens alone (a prompt
  // whose layout reads the whole prompt does not qualify), or on them and the prompt's
  // length.
  if (prefix_reuse_ != LanguageModel::PrefixReuse::kNever && layout == PromptLayout{}) {
    r->cache_salt = request.cache_salt;
    if (prefix_reuse_ == LanguageModel::PrefixReuse::kSamePromptLength)
      r->cache_salt = splitmix64(request.cache_salt ^ (static_cast<uint64_t>(prompt_len) << 32));
  }
  // An adapter's K/V is its own: blocks are shared only between requests of the same one
  // (ids are never reused).
  r->adapter = request.adapter;
  if (r->cache_salt && r->adapter != 0)
    r->cache_salt =
        splitmix64(*r->cache_salt ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(r->adapter)));
  // Images: the K/V of their tokens (and of every token after them) are theirs.
  if (images) {
    if (r->cache_salt)
      for (const auto& image : images->images)
        r->cache_salt = splitmix64(splitmix64(*r->cache_salt ^ image->hash.lo) ^ image->hash.hi);
    r->images = std::move(images);
  }
  r->pinned = std::move(pinned);
  r->max_new_tokens = max_new;
  r->cfg = std::move(cfg);
  r->submitted = Clock::now();
  r->timings.input_len = prompt_len;
  if (r->cfg.timeout_ms > 0) {
    // A timeout past what the clock can hold is no limit (the API takes any int64):
    // submitted + timeout_ms would overflow.
    const int64_t room_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                Clock::time_point::max() - r->submitted)
                                .count();
    r->deadline = r->cfg.timeout_ms >= room_ms
                      ? Clock::time_point::max()
                      : r->submitted + std::chrono::milliseconds(r->cfg.timeout_ms);
  }

  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (inbox_->closed) {
      if (dead_) raise<Unavailable>("the engine has failed: {}", dead_reason());
      raise<Unavailable>("the engine is shut down");
    }
    if (in_flight_.load() >= config_.max_queue_size)
      raise<ResourceExhausted>("the engine already holds {} requests", config_.max_queue_size);
    if (request.adapter != 0 && inbox_->adapters.count(request.adapter) == 0)
      raise<InvalidArgument>("no LoRA adapter {} is loaded", request.adapter);
    r->id = next_request_id_++;
    r->seed = r->cfg.random_seed.value_or(splitmix64(base_seed_ + static_cast<uint64_t>(r->id)));
    stream = std::make_shared<RequestStream>(r->id);
    std::weak_ptr<Inbox> weak = inbox_;
    stream->set_on_cancel([weak](int64_t id) {
      if (auto inbox = weak.lock()) {
        {
          std::lock_guard<std::mutex> l(inbox->mu);
          inbox->cancels.push_back(id);
        }
        inbox->cv.notify_all();
      }
    });
    stream->set_on_stop_sequence([weak](int64_t id, int32_t index) {
      if (auto inbox = weak.lock()) {
        {
          std::lock_guard<std::mutex> l(inbox->mu);
          inbox->stops.emplace_back(id, index);
        }
        inbox->cv.notify_all();
      }
    });
    r->stream = stream;
    inbox_->incoming.push_back(std::move(r));
    ++in_flight_;
    {
      std::lock_guard<std::mutex> s(stats_mu_);
      ++stats_.requests_submitted;
    }
  }
  inbox_->cv.notify_all();
  return stream;
}

}  // namespace tachyon
