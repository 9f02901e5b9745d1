#include "engine/async_model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include <time.h>

#include "core/logging.h"
#include "engine/async_model_inbox.h"

namespace tachyon {

using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// CPU time of the calling thread, in milliseconds.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

int32_t resolve_num_blocks(const EngineConfig& c, const LanguageModel& model) {
  if (c.num_kv_blocks > 0) return c.num_kv_blocks;
  const size_t per_block = model.kv_bytes_per_block(c.block_size);
  TACHYON_CHECK_GT(per_block, 0u);
  int64_t budget = c.kv_cache_bytes;
  if (budget <= 0 && c.kv_cache_memory_fraction > 0 && c.memory_available_bytes > 0)
    budget = static_cast<int64_t>(c.kv_cache_memory_fraction *
                                  static_cast<double>(c.memory_available_bytes));
  int64_t blocks = 0;
  if (budget > 0) {
    blocks = budget / static_cast<int64_t>(per_block);
    if (blocks < 1)
      raise<InvalidArgument>(
          "KV cache budget of {} bytes is smaller than one block ({} bytes of {} tokens)", budget,
          per_block, c.block_size);
  } else {
    blocks = static_cast<int64_t>(c.max_num_seqs) * ((256 + c.block_size - 1) / c.block_size);
  }
  return static_cast<int32_t>(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max() / 2));
}

}  // namespace

AsyncModel::AsyncModel(std::shared_ptr<LanguageModel> model, EngineConfig config)
    : model_(std::move(model)), config_(std::move(config)) {
  TACHYON_CHECK(model_ != nullptr);
  if (config_.block_size < 1 || config_.block_size > 4096)
    raise<InvalidArgument>("block_size {} must be in [1, 4096]", config_.block_size);
  if (config_.max_num_seqs < 1)
    raise<InvalidArgument>("max_num_seqs {} must be >= 1", config_.max_num_seqs);
  if (config_.max_num_batched_tokens < config_.max_num_seqs)
    raise<InvalidArgument>("max_num_batched_tokens {} must be >= max_num_seqs {}",
                           config_.max_num_batched_tokens, config_.max_num_seqs);
  if (!(config_.kv_reserve_fraction >= 0 && config_.kv_reserve_fraction < 1))
    raise<InvalidArgument>("kv_reserve_fraction {} must be in [0, 1)", config_.kv_reserve_fraction);
  vocab_size_ = model_->vocab_size();
  max_seq_len_ = model_->max_seq_len();
  if (config_.kv_grow_blocks < 0)
    raise<InvalidArgument>("kv_grow_blocks {} must be >= 0", config_.kv_grow_blocks);
  num_blocks_ = resolve_num_blocks(config_, *model_);
  // What is reserved now: all of it, or a first chunk where the cache can grow.
  const bool grows = config_.kv_grow_blocks > 0 && config_.kv_grow_blocks < num_blocks_ &&
                     model_->can_grow_kv_cache();
  const int32_t initial_blocks = grows ? config_.kv_grow_blocks : num_blocks_;
  model_->init_kv_cache(initial_blocks, config_.block_size);
  if (config_.swap_space_bytes < 0)
    raise<InvalidArgument>("swap_space_bytes {} must be >= 0", config_.swap_space_bytes);
  int32_t swap_blocks = static_cast<int32_t>(
      std::min<int64_t>(config_.swap_space_bytes /
                            static_cast<int64_t>(model_->kv_bytes_per_block(config_.block_size)),
                        std::numeric_limits<int32_t>::max() / 2));
  if (config_.prefix_cache_host_bytes < 0)
    raise<InvalidArgument>("prefix_cache_host_bytes {} must be >= 0",
                           config_.prefix_cache_host_bytes);
  prefix_reuse_ =
      config_.prefix_caching ? model_->prefix_reuse() : LanguageModel::PrefixReuse::kNever;
  if (config_.prefix_caching && prefix_reuse_ == LanguageModel::PrefixReuse::kNever)
    log_warning(
        "engine: prefix caching is off for this model: its rotary frequencies follow the length "
        "seen so far, so a block's K/V depends on when it was computed");
  int32_t host_blocks =
      prefix_reuse_ == LanguageModel::PrefixReuse::kNever
          ? 0
          : static_cast<int32_t>(std::min<int64_t>(
                config_.prefix_cache_host_bytes /
                    static_cast<int64_t>(model_->kv_bytes_per_block(config_.block_size)),
                std::numeric_limits<int32_t>::max() / 2 - swap_blocks));
  // Swap space and the prefix cache's host tier share the model's host blocks.
  if (swap_blocks + host_blocks > 0 && !model_->init_kv_swap(swap_blocks + host_blocks)) {
    log_warning(
        "engine: the model cannot copy KV blocks to host memory; preempted requests are "
        "recomputed and the prefix cache has no host tier");
    swap_blocks = 0;
    host_blocks = 0;
  }
  kv_ = std::make_unique<KVCacheManager>(initial_blocks, config_.block_size, swap_blocks);
  if (prefix_reuse_ != LanguageModel::PrefixReuse::kNever) kv_->enable_prefix_cache(host_blocks);
  SchedulerConfig sc;
  sc.max_num_seqs = config_.max_num_seqs;
  sc.max_num_batched_tokens = config_.max_num_batched_tokens;
  sc.reserve_blocks = static_cast<int32_t>(config_.kv_reserve_fraction * num_blocks_);
  sc.grow_blocks = grows ? config_.kv_grow_blocks : 0;
  sc.max_blocks = num_blocks_;
  sc.max_adapters = model_->max_adapters();
  scheduler_ = std::make_unique<Scheduler>(sc, kv_.get());
  // What the prefix cache hashes: a sequence's tokens the host knows.
  scheduler_->set_token_source([this](int64_t id) -> std::span<const int32_t> {
    if (!requests_->has_seq(id)) return {};
    const EngineSeq& s = requests_->seq(id);
    return {s.tokens.data(), s.num_known()};
  });
  eos_ids_ = config_.eos_token_ids;
  requests_ = std::make_unique<RequestTable>(scheduler_.get(), &in_flight_);
  sampler_ = std::make_unique<StepSampler>(requests_.get(), scheduler_.get(), eos_ids_, vocab_size_,
                                           max_seq_len_);
  if (config_.proposer) {
    drafter_ =
        std::make_unique<Drafter>(config_.proposer, config_.num_speculative_tokens, requests_.get(),
                                  scheduler_.get(), vocab_size_, max_seq_len_);
    requests_->set_on_seq_end([this](int64_t id) { drafter_->release(id); });
    log_info("engine: speculative decoding with the {} proposer, up to {} draft tokens per step",
             config_.proposer->name(), config_.num_speculative_tokens);
  }
  base_seed_ =
      splitmix64(std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32));
  loop_stats_.num_kv_blocks = initial_blocks;
  loop_stats_.max_kv_blocks = num_blocks_;
  loop_stats_.num_swap_blocks = swap_blocks;
  loop_stats_.num_host_cache_blocks = host_blocks;
  loop_stats_.block_size = config_.block_size;
  update_stats();
  executor_ = std::make_unique<ModelExecutor>(model_, eos_ids_, config_.device_sampling);
  overlap_ = executor_->device_sampling() && config_.overlap_steps;
  inbox_ = std::make_shared<Inbox>();
  const size_t block_bytes = model_->kv_bytes_per_block(config_.block_size);
  log_info(
      "engine: KV cache of {} blocks of {} tokens reserved ({:.1f} MiB), limit {} blocks "
      "({:.1f} MiB{}), {} in swap space; prefix cache {}; max {} sequences, {} tokens per step",
      initial_blocks, config_.block_size,
      static_cast<double>(block_bytes) * initial_blocks / (1024.0 * 1024.0), num_blocks_,
      static_cast<double>(block_bytes) * num_blocks_ / (1024.0 * 1024.0),
      grows ? fmt::format(", grown by {} blocks on demand", config_.kv_grow_blocks) : "",
      swap_blocks,
      prefix_reuse_ == LanguageModel::PrefixReuse::kNever
          ? std::string("off")
          : fmt::format("on ({} blocks in host memory)", host_blocks),
      config_.max_num_seqs, config_.max_num_batched_tokens);
  thread_ = std::thread([this] { loop(); });
}

AsyncModel::~AsyncModel() {
  shutdown();
}

void AsyncModel::shutdown() {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->stop = true;
    inbox_->closed = true;
  }
  stopped_ = true;
  inbox_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string AsyncModel::dead_reason() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return dead_reason_;
}

EngineStats AsyncModel::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EngineStats s = stats_;
  s.healthy = healthy();
  return s;
}

void AsyncModel::take_adapters() {
  std::vector<std::pair<int32_t, std::shared_ptr<const PreparedAdapter>>> changes;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    changes.swap(inbox_->adapter_changes);
  }
  for (auto& [id, adapter] : changes) {
    if (adapter)
      model_->add_adapter(id, std::move(adapter));
    else
      model_->remove_adapter(id);
  }
}

void AsyncModel::take_inbox(std::vector<std::unique_ptr<EngineRequest>>* incoming,
                            std::vector<int64_t>* cancels,
                            std::vector<std::pair<int64_t, int32_t>>* stops, bool* stop) {
  std::unique_lock<std::mutex> lock(inbox_->mu);
  inbox_->cv.wait(lock, [&] {
    return inbox_->stop || !inbox_->incoming.empty() || !inbox_->cancels.empty() ||
           !inbox_->adapter_changes.empty() || !inbox_->stops.empty() || scheduler_->has_work() ||
           !steps_.empty();
  });
  incoming->swap(inbox_->incoming);
  cancels->swap(inbox_->cancels);
  stops->swap(inbox_->stops);
  *stop = inbox_->stop;
}

void AsyncModel::loop() {
  std::vector<std::unique_ptr<EngineRequest>> incoming;
  std::vector<int64_t> cancels;
  std::vector<std::pair<int64_t, int32_t>> stops;
  while (true) {
    bool stop = false;
    incoming.clear();
    cancels.clear();
    stops.clear();
    take_inbox(&incoming, &cancels, &stops, &stop);
    // A step's time runs from here to its events being pushed: all the loop's work.
    const auto t0 = Clock::now();
    take_adapters();
    for (auto& r : incoming) requests_->add(std::move(r));
    if (stop) {
      while (!steps_.empty() && !dead_) finish_step();
      if (!dead_) requests_->fail_all(ErrorCode::kUnavailable, "the engine was shut down");
      update_stats();
      requests_->flush();
      return;
    }
    for (int64_t id : cancels) {
      if (EngineRequest* r = requests_->find(id))
        requests_->finish_request(*r, FinishReason::kCancelled, nullptr);
    }
    for (const auto& [id, index] : stops) requests_->stop_sequence(id, index);
    requests_->check_deadlines(Clock::now());
    // A step whose tokens the next one cannot take on the device is collected first.
    if (!steps_.empty() && !steps_.back().ahead) finish_step();
    bool stepped = false;
    if (!dead_ && scheduler_->has_work()) stepped = launch_step();
    // The step before the one just queued is collected while the device runs that one;
    // with none queued, every step in flight is.
    while (!dead_ && steps_.size() > (stepped ? 1u : 0u)) finish_step();
    update_stats();
    requests_->flush();
    if (stepped) {
      loop_stats_.step_ms += ms_between(t0, Clock::now());
      update_stats();
    }
    if (dead_) return;
  }
}

void AsyncModel::die(const std::string& reason) {
  log_error("engine failure: {}", reason);
  steps_.clear();
  std::vector<std::unique_ptr<EngineRequest>> late;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->closed = true;
    late.swap(inbox_->incoming);
    std::lock_guard<std::mutex> s(stats_mu_);
    dead_reason_ = reason;
    dead_ = true;
  }
  for (auto& r : late) requests_->add(std::move(r));
  requests_->fail_all(ErrorCode::kInternal, "the engine failed: " + reason);
}

bool AsyncModel::launch_step() {
  const auto t0 = Clock::now();
  const double c0 = thread_cpu_ms();
  if (drafter_) drafter_->propose();
  SchedulerOutput plan = scheduler_->schedule();
  if (drafter_) drafter_->sync();
  for (int64_t g : plan.preempted_groups) {
    ++requests_->at(g).timings.num_preemptions;
    ++loop_stats_.num_preemptions;
    if (drafter_)
      for (const auto& sp : requests_->at(g).seqs) drafter_->release(sp->id);
  }
  loop_stats_.num_swap_outs = scheduler_->num_swap_outs();
  // The scheduler has already moved these blocks in its books (even for a plan that runs
  // nothing): a failure here leaves the cache unlike them.
  try {
    executor_->move_blocks(plan);
  } catch (const std::exception& e) {
    die(fmt::format("moving KV blocks: {}", e.what()));
    return false;
  }
  if (plan.empty()) {
    // Nothing can run although requests wait: refuse the head rather than spin (unless a
    // step in flight or a preemption will free what it needs).
    if (plan.preempted_groups.empty() && steps_.empty()) {
      const auto waiting = scheduler_->waiting_groups();
      if (!waiting.empty()) {
        const ErrorInfo info{ErrorCode::kResourceExhausted,
                             "the request cannot be scheduled with the KV cache available"};
        requests_->finish_request(requests_->at(waiting.front()), FinishReason::kError, &info);
      }
    }
    return false;
  }
  const int64_t step_no = loop_stats_.num_steps++;
  for (const auto& [g, tokens] : plan.reused) {
    EngineRequest& r = requests_->at(g);
    if (!r.scheduled) r.timings.reuse_len = tokens;
  }
  for (const auto& s : plan.seqs) {
    EngineRequest& r = requests_->at(s.group_id);
    if (r.last_step == step_no) continue;
    r.last_step = step_no;
    ++r.timings.iter_count;
    if (!r.scheduled) {
      r.scheduled = true;
      r.timings.queue_ms = ms_between(r.submitted, t0);
    }
  }
  loop_stats_.tokens_computed += plan.num_batched_tokens;
  for (const ScheduledSeq& ss : plan.seqs) {
    EngineSeq& seq = requests_->seq(ss.seq_id);
    seq.last_step = step_no;
    seq.last_step_tokens = ss.num_tokens;
  }
  const int64_t prev = steps_.empty() ? -1 : steps_.back().no;
  const ForwardBatch& batch = executor_->build(
      plan, [this](const ScheduledSeq& s) { return seq_inputs(s); }, prev);
  Step step;
  step.no = step_no;
  step.ahead = overlap_ && batch.sampling.any_on_device();
  for (const RowSampling& row : batch.sampling.rows)
    step.ahead = step.ahead && row.mode == RowSampling::Mode::kDevice;
  for (const ScheduledSeq& ss : plan.seqs) step.ahead = step.ahead && ss.num_logits <= 1;
  for (int64_t g : plan.sampled_groups) step.ahead = step.ahead && can_overlap(requests_->at(g));
  const auto l0 = Clock::now();
  const double lc0 = thread_cpu_ms();
  try {
    executor_->launch(batch);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInternal) {
      die(e.what());
      return false;
    }
    log_warning("forward pass failed ({}); retrying its {} sequences one by one", e.what(),
                plan.seqs.size());
    run_one_by_one(plan);
    return false;
  } catch (const std::exception& e) {
    die(e.what());
    return false;
  }
  if (!steps_.empty()) ++loop_stats_.overlapped_steps;
  step.plan = std::move(plan);
  if (step.ahead) add_pending(step);
  steps_.push_back(std::move(step));
  // Where launch() computed the step (the CPU), its time is the forward pass's; where it
  // only queued it on a device, it is the host's work of the step.
  const auto t1 = Clock::now();
  const double c1 = thread_cpu_ms();
  const bool computed = executor_->launch_computes();
  const double computed_ms = computed ? ms_between(l0, t1) : 0;
  loop_stats_.forward_ms += computed_ms;
  loop_stats_.schedule_ms += ms_between(t0, t1) - computed_ms;
  loop_stats_.schedule_cpu_ms += (c1 - c0) - (computed ? c1 - lc0 : 0);
  return true;
}

bool AsyncModel::can_overlap(const EngineRequest& r) const {
  const GenerateConfig& c = r.cfg;
  // A constrained request's next mask depends on the token this step chooses (its
  // matcher advances on it): a step queued before that token is seen could not mask.
  // A request that speculates proposes from the tokens of this step: they must be seen.
  if (drafter_ && Drafter::eligible(r)) return false;
  return !c.grammar && !c.is_beam_search() && !c.return_logprobs &&
         (r.forked || c.num_return_sequences == 1) && c.repetition_penalty == 1.0f &&
         c.presence_penalty == 0.0f && c.frequency_penalty == 0.0f && c.no_repeat_ngram_size == 0 &&
         c.bad_words_list.empty();
}

void AsyncModel::add_pending(const Step& step) {
  int32_t row = 0;
  for (const ScheduledSeq& ss : step.plan.seqs) {
    if (ss.num_logits == 0) continue;
    row += ss.num_logits;
    const EngineRequest& r = requests_->at(ss.group_id);
    EngineSeq& s = requests_->seq(ss.seq_id);
    // A token that ends the sequence by length is its last: nothing follows it.
    const int64_t len = static_cast<int64_t>(s.tokens.size()) + 1;
    if (len - r.prompt_len >= r.max_new_tokens || len >= max_seq_len_) continue;
    s.pending.push_back(PendingToken{s.tokens.size(), step.no, row - 1});
    s.tokens.push_back(0);
    scheduler_->append_token(s.id);
  }
}

void AsyncModel::finish_step() {
  Step step = std::move(steps_.front());
  steps_.pop_front();
  const auto t0 = Clock::now();
  ForwardOutput out;
  try {
    out = executor_->collect();
  } catch (const std::exception& e) {
    // A step's failure surfaces in launch(); one here is the device's.
    return die(e.what());
  }
  const auto t1 = Clock::now();
  const double c1 = thread_cpu_ms();
  LogitRows rows;
  try {
    executor_->read_rows(step.plan.seqs, out, &rows);
  } catch (const std::exception& e) {
    return die(e.what());
  }
  sampler_->process(step.plan.sampled_groups, rows, step.no);
  loop_stats_.forward_ms += ms_between(t0, t1);
  loop_stats_.sample_ms += ms_between(t1, Clock::now());
  loop_stats_.sample_cpu_ms += thread_cpu_ms() - c1;
}

void AsyncModel::run_one_by_one(const SchedulerOutput& plan) {
  // The steps in flight choose tokens this plan's sequences read: collect them first.
  while (!dead_ && !steps_.empty()) finish_step();
  if (dead_) return;
  // Find the sequences at fault: run each alone (the block moves are already done;
  // writing the same K/V again is harmless). Sequences that ended meanwhile are skipped.
  std::unordered_map<int64_t, ErrorInfo> failed;
  LogitRows rows;
  std::vector<ForwardOutput> outs;  // the rows' logits
  for (const auto& s : plan.seqs) {
    if (failed.count(s.group_id) || !requests_->has_seq(s.seq_id)) continue;
    SchedulerOutput one;
    one.seqs.push_back(s);
    one.num_batched_tokens = s.num_tokens;
    try {
      const ForwardBatch& b = executor_->build(
          one, [this](const ScheduledSeq& q) { return seq_inputs(q); }, -1);
      outs.push_back(executor_->forward(b));
      executor_->read_rows({&s, 1}, outs.back(), &rows);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInternal) return die(e.what());
      failed[s.group_id] = ErrorInfo{e.code(), e.what()};
    } catch (const std::exception& e) {
      return die(e.what());
    }
  }
  for (const auto& [g, info] : failed)
    if (EngineRequest* r = requests_->find(g))
      requests_->finish_request(*r, FinishReason::kError, &info);
  // The groups whose sequences all ran (a sequence that ended meanwhile needs no row).
  std::vector<int64_t> groups;
  for (int64_t g : plan.sampled_groups)
    if (!failed.count(g)) groups.push_back(g);
  sampler_->process(groups, rows, -1);
}

SeqInputs AsyncModel::seq_inputs(const ScheduledSeq& s) const {
  const EngineRequest& r = requests_->at(s.group_id);
  const EngineSeq& seq = requests_->seq(s.seq_id);
  const GenerateConfig& cfg = r.cfg;
  SeqInputs in;
  in.tokens = seq.tokens;
  in.prompt_len = r.prompt_len;
  in.pending = seq.pending;
  in.images = r.images.get();
  // Beams and log-probabilities need the logits; the prompt of a request of n samples
  // feeds n draws from one row.
  // A verify step's rows (drafts) all come back: the host judges the drafts.
  if (!cfg.is_beam_search() && !cfg.return_logprobs && s.num_logits <= 1 &&
      (r.forked || cfg.num_return_sequences == 1)) {
    in.device_config = &cfg;
    in.rng =
        RngKey{r.seed, static_cast<uint32_t>(seq.index),
               static_cast<uint64_t>(seq.tokens.size() - static_cast<size_t>(r.prompt_len)), 0};
    // A constrained row's mask (its steps are never queued ahead: the matcher has seen
    // every token); where it fails, the host's sampler fails the request with the reason.
    if (seq.matcher && s.num_logits > 0 && executor_->device_sampling()) {
      in.allowed = RequestTable::fill_mask(requests_->seq(s.seq_id), vocab_size_);
      if (in.allowed.empty()) in.device_config = nullptr;
    }
  }
  return in;
}

void AsyncModel::update_stats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EngineStats& s = loop_stats_;
  const int64_t submitted = stats_.requests_submitted;
  s.requests_finished = requests_->requests_finished();
  s.tokens_generated = sampler_->tokens_generated();
  s.tokens_discarded = sampler_->tokens_discarded();
  const SpeculationCounts& spec = sampler_->speculation();
  s.spec_num_drafts = spec.drafts;
  s.spec_num_draft_tokens = spec.draft_tokens;
  s.spec_num_accepted_tokens = spec.accepted_tokens;
  s.spec_accepted_per_pos = spec.accepted_per_pos;
  s.num_waiting = scheduler_->num_waiting() + scheduler_->num_swapped();
  s.num_running = scheduler_->num_running();
  s.num_kv_blocks = kv_->num_blocks();
  s.num_free_blocks = kv_->num_free_blocks();
  s.num_kv_grows = scheduler_->num_kv_grows();
  s.num_free_swap_blocks = kv_->num_free_swap_blocks();
  s.prefix_cache_queries = scheduler_->prefix_queries();
  s.prefix_cache_hits = scheduler_->prefix_hits();
  s.prefix_cache_host_hits = kv_->host_hit_blocks() * kv_->block_size();
  s.num_cached_blocks = kv_->num_cached_blocks();
  s.num_pinned_blocks = kv_->num_pinned_blocks();
  stats_ = s;
  stats_.requests_submitted = submitted;
}

}  // namespace tachyon
