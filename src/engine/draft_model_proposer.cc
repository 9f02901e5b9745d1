#include "engine/draft_model_proposer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "core/error.h"
#include "core/logging.h"
#include "engine/row_math.h"

namespace tachyon {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t blocks_for(int32_t tokens, int32_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

int32_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int32_t>(i);
}

}  // namespace

void restrict_to_draw_set(float* x, int32_t vocab, const GenerateConfig& c) {
  if (c.is_greedy()) return;
  const bool use_top_k = c.top_k > 0 && c.top_k < vocab;
  const bool use_top_p = c.top_p < 1.0f;
  if (!use_top_k && !use_top_p && c.min_p <= 0.0f) return;
  const float m = x[argmax(x, vocab)];  // rejects NaN and rows with nothing allowed
  const float t = c.temperature;
  const float inv_t = 1.0f / t;
  if (use_top_k || use_top_p) {
    struct Cand {
      float logit;
      int32_t token;
    };
    std::vector<Cand> cands;
    for (int32_t i = 0; i < vocab; ++i)
      if (x[i] != kNegInf) cands.push_back({x[i], i});
    auto better = [](const Cand& a, const Cand& b) {
      return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
    };
    size_t keep = cands.size();
    if (use_top_k && cands.size() > static_cast<size_t>(c.top_k)) {
      keep = static_cast<size_t>(c.top_k);
      std::nth_element(cands.begin(), cands.begin() + static_cast<ptrdiff_t>(keep - 1), cands.end(),
                       better);
    }
    std::sort(cands.begin(), cands.begin() + static_cast<ptrdiff_t>(keep), better);
    if (use_top_p) {
      // The smallest most-likely prefix holding top_p of the mass (of the top-k set when
      // top_k is on), as Sampler::choose keeps it.
      double z = 0.0;
      for (size_t i = 0; i < keep; ++i) z += fast_exp((cands[i].logit - m) * inv_t);
      const double want = static_cast<double>(c.top_p) * z;
      double cum = 0.0;
      for (size_t i = 0; i < keep; ++i) {
        cum += fast_exp((cands[i].logit - m) * inv_t);
        if (cum >= want) {
          keep = i + 1;
          break;
        }
      }
    }
    for (size_t i = keep; i < cands.size(); ++i) x[cands[i].token] = kNegInf;
  }
  if (c.min_p > 0.0f) {
    // min_p keeps p_i >= min_p * p_max, i.e. logit >= m + T log(min_p).
    const float min_logit = m + t * std::log(c.min_p);
    for (int32_t i = 0; i < vocab; ++i)
      if (x[i] < min_logit) x[i] = kNegInf;
  }
}

DraftModelProposer::DraftModelProposer(std::shared_ptr<LanguageModel> draft,
                                       DraftProposerConfig config)
    : model_(std::move(draft)), config_(std::move(config)) {
  if (!model_) raise<InvalidArgument>("draft model proposer: no model");
  if (config_.num_blocks <= 0)
    raise<InvalidArgument>("draft model proposer: {} KV blocks (at least 1)", config_.num_blocks);
  if (config_.block_size <= 0)
    raise<InvalidArgument>("draft model proposer: block size {} (at least 1)", config_.block_size);
  if (config_.max_batch_tokens <= 0 || config_.max_batch_seqs <= 0)
    raise<InvalidArgument>(
        "draft model proposer: a step of {} tokens and {} sequences (at least 1)",
        config_.max_batch_tokens, config_.max_batch_seqs);
  if (config_.vocab_size < 0)
    raise<InvalidArgument>("draft model proposer: vocabulary of {}", config_.vocab_size);
  draft_vocab_ = model_->vocab_size();
  if (config_.vocab_size == 0) config_.vocab_size = draft_vocab_;
  model_->init_kv_cache(config_.num_blocks, config_.block_size);
  free_.reserve(static_cast<size_t>(config_.num_blocks));
  for (int32_t b = config_.num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void DraftModelProposer::release(int64_t seq_id) {
  const auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  drop(it->second);
  seqs_.erase(it);
}

void DraftModelProposer::drop(Seq& s) {
  free_.insert(free_.end(), s.blocks.rbegin(), s.blocks.rend());
  s.blocks.clear();
  s.computed.clear();
}

void DraftModelProposer::trim(Seq& s, int32_t tokens) {
  const size_t need = static_cast<size_t>(blocks_for(tokens, config_.block_size));
  while (s.blocks.size() > need) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
}

bool DraftModelProposer::reserve(Seq& s, int32_t tokens) {
  const size_t need = static_cast<size_t>(blocks_for(tokens, config_.block_size));
  if (s.blocks.size() >= need) {
    trim(s, tokens);
    return true;
  }
  const size_t extra = need - s.blocks.size();
  while (free_.size() < extra) {
    // Take back the blocks of the least recently used sequence absent from this call.
    auto victim = seqs_.end();
    for (auto it = seqs_.begin(); it != seqs_.end(); ++it) {
      if (it->second.last_used == clock_ || it->second.blocks.empty()) continue;
      if (victim == seqs_.end() || it->second.last_used < victim->second.last_used) victim = it;
    }
    if (victim == seqs_.end()) return false;
    drop(victim->second);
    seqs_.erase(victim);
  }
  for (size_t i = 0; i < extra; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

int32_t DraftModelProposer::prepare(const ProposalRequest& r, Seq& s, int32_t k) {
  const int32_t n = static_cast<int32_t>(r.tokens.size());
  k = std::min(k, model_->max_seq_len() - n + 1);  // the last draft is not computed
  if (n == 0 || k <= 0) return 0;
  for (int32_t t : r.tokens)
    if (t < 0 || t >= draft_vocab_) return 0;  // an id the draft does not have
  if (s.computed.empty()) {
    s.prompt_len = std::clamp(r.prompt_len, 1, n);
    // A draft whose positions or attention follow the prompt's layout (GLM) is not one
    // this proposer batches: it drafts nothing.
    if (model_->prompt_layout(r.tokens.first(static_cast<size_t>(s.prompt_len))) != PromptLayout{})
      return 0;
  }
  // Keep at least the last token to compute: its logits give the first draft.
  const int32_t keep = std::min(common_prefix(s.computed, r.tokens), n - 1);
  s.computed.resize(static_cast<size_t>(keep));
  // Room: its own blocks, the free ones and those of sequences absent from the call.
  int64_t blocks = static_cast<int64_t>(s.blocks.size() + free_.size());
  for (const auto& [id, other] : seqs_)
    if (other.last_used != clock_) blocks += static_cast<int64_t>(other.blocks.size());
  const int64_t room = blocks * config_.block_size;
  k = static_cast<int32_t>(std::min<int64_t>(k, room - n + 1));
  if (k <= 0 || !reserve(s, n + k - 1)) {
    trim(s, keep);
    return 0;
  }
  return k;
}

void DraftModelProposer::propose(std::span<const ProposalRequest> requests,
                                 std::span<Proposal> out) {
  if (out.size() != requests.size())
    raise<InvalidArgument>("draft model proposer: {} outputs for {} requests", out.size(),
                           requests.size());
  ++clock_;
  // First mark every sequence of the call, so that none of them gives up its blocks to
  // another.
  for (const ProposalRequest& r : requests) {
    if (r.config == nullptr)
      raise<InvalidArgument>("draft model proposer: sequence {} has no config", r.seq_id);
    Seq& s = seqs_[r.seq_id];
    if (s.last_used == clock_)
      raise<InvalidArgument>("draft model proposer: sequence {} requested twice in one call",
                             r.seq_id);
    s.last_used = clock_;
  }
  std::vector<Work> work;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposalRequest& r = requests[i];
    out[i].tokens.clear();
    out[i].probs.clear();
    Seq& s = seqs_[r.seq_id];
    const int32_t k = prepare(r, s, r.max_tokens);
    if (k == 0) continue;
    Work w;
    w.index = i;
    w.seq = &s;
    w.n = static_cast<int32_t>(r.tokens.size());
    w.k = k;
    w.context.reserve(static_cast<size_t>(w.n + k));
    w.context.assign(r.tokens.begin(), r.tokens.end());
    work.push_back(std::move(w));
  }
  if (work.empty()) return;
  try {
    catch_up(requests, out, work);
    decode(requests, out, work);
  } catch (const std::exception& e) {
    log_warning("draft model: {}; no drafts for this step", e.what());
    for (Work& w : work) {
      out[w.index].tokens.clear();
      out[w.index].probs.clear();
      drop(*w.seq);
    }
    return;
  }
  for (Work& w : work) trim(*w.seq, static_cast<int32_t>(w.seq->computed.size()));
}

void DraftModelProposer::add_run(ForwardBatch& b, const Seq& s,
                                 std::span<const int32_t> tokens) const {
  const int32_t cached = static_cast<int32_t>(s.computed.size());
  if (b.query_start.empty()) b.query_start.push_back(0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.token_ids.push_back(tokens[i]);
    b.positions.push_back(cached + static_cast<int32_t>(i));
  }
  b.query_start.push_back(b.num_tokens());
  b.context_lens.push_back(cached + static_cast<int32_t>(tokens.size()));
  b.prompt_lens.push_back(s.prompt_len);
  // The row of block ids, padded by pad_block_tables once the widest is known.
  b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, static_cast<int32_t>(s.blocks.size()));
  b.block_tables.insert(b.block_tables.end(), s.blocks.begin(), s.blocks.end());
  b.block_tables.push_back(-2);  // the end of the row, until padding
}

void DraftModelProposer::pad_block_tables(ForwardBatch& b) const {
  std::vector<int32_t> rows;
  rows.reserve(static_cast<size_t>(b.num_seqs() * b.max_blocks_per_seq));
  size_t width = 0;
  for (int32_t id : b.block_tables) {
    if (id != -2) {
      rows.push_back(id);
      ++width;
      continue;
    }
    for (; width < static_cast<size_t>(b.max_blocks_per_seq); ++width) rows.push_back(-1);
    width = 0;
  }
  b.block_tables = std::move(rows);
}

void DraftModelProposer::catch_up(std::span<const ProposalRequest> requests,
                                  std::span<Proposal> out, std::vector<Work>& work) {
  std::vector<Work*> pending;
  for (Work& w : work) pending.push_back(&w);
  while (!pending.empty()) {
    ForwardBatch b;
    std::vector<Work*> finishing;
    int32_t budget = config_.max_batch_tokens;
    size_t taken = 0;
    for (; taken < pending.size(); ++taken) {
      if (budget == 0 || b.num_seqs() == config_.max_batch_seqs) break;
      Work& w = *pending[taken];
      Seq& s = *w.seq;
      const int32_t cached = static_cast<int32_t>(s.computed.size());
      const int32_t run = std::min(w.n - cached, budget);
      const auto tokens =
          requests[w.index].tokens.subspan(static_cast<size_t>(cached), static_cast<size_t>(run));
      add_run(b, s, tokens);
      s.computed.insert(s.computed.end(), tokens.begin(), tokens.end());
      budget -= run;
      if (cached + run == w.n) {
        b.logits_rows.push_back(b.num_tokens() - 1);
        finishing.push_back(&w);
      } else {
        ++taken;  // the budget is spent; the rest of its tokens go in the next step
        break;
      }
    }
    pad_block_tables(b);
    const Tensor logits = model_->forward(b);
    const float* rows = logits.data<float>();
    for (size_t i = 0; i < finishing.size(); ++i) {
      Work& w = *finishing[i];
      pick(w, requests[w.index], out[w.index], rows + i * static_cast<size_t>(draft_vocab_));
    }
    // Sequences whose tokens are all computed leave the queue; a partial one stays first.
    std::vector<Work*> rest;
    for (size_t i = 0; i < pending.size(); ++i) {
      const Work& w = *pending[i];
      if (i >= taken || static_cast<int32_t>(w.seq->computed.size()) < w.n)
        rest.push_back(pending[i]);
    }
    pending = std::move(rest);
  }
}

void DraftModelProposer::decode(std::span<const ProposalRequest> requests, std::span<Proposal> out,
                                std::vector<Work>& work) {
  for (;;) {
    std::vector<Work*> active;
    for (Work& w : work)
      if (!w.done) active.push_back(&w);
    if (active.empty()) return;
    const size_t step = static_cast<size_t>(config_.max_batch_seqs);
    for (size_t first = 0; first < active.size(); first += step) {
      const size_t last = std::min(active.size(), first + step);
      ForwardBatch b;
      for (size_t i = first; i < last; ++i) {
        Work& w = *active[i];
        const int32_t token = w.context.back();
        add_run(b, *w.seq, std::span<const int32_t>(&token, 1));
        w.seq->computed.push_back(token);
        b.logits_rows.push_back(static_cast<int32_t>(i - first));
      }
      pad_block_tables(b);
      const Tensor logits = model_->forward(b);
      const float* rows = logits.data<float>();
      for (size_t i = first; i < last; ++i) {
        Work& w = *active[i];
        pick(w, requests[w.index], out[w.index],
             rows + (i - first) * static_cast<size_t>(draft_vocab_));
      }
    }
  }
}

void DraftModelProposer::pick(Work& w, const ProposalRequest& r, Proposal& out,
                              const float* logits) {
  const int32_t vocab = config_.vocab_size;
  const int32_t shared = std::min(vocab, draft_vocab_);
  const GenerateConfig& cfg = *r.config;
  SamplingContext ctx;
  ctx.config = &cfg;
  ctx.tokens = w.context;
  ctx.prompt_len = std::min(r.prompt_len, static_cast<int32_t>(w.context.size()));
  ctx.eos_ids = config_.eos_token_ids;
  ctx.rng = r.rng;
  ctx.rng.step += out.tokens.size();  // the draft's position
  const bool unprocessed = processors_inactive(ctx);
  int32_t token = 0;
  try {
    if (cfg.is_greedy() && unprocessed) {
      token = argmax(logits, shared);  // ids past `shared` would be -inf
    } else {
      row_.assign(logits, logits + shared);
      row_.resize(static_cast<size_t>(vocab), kNegInf);
      if (!unprocessed) process_logits(row_.data(), vocab, ctx);
      if (cfg.is_greedy()) {
        token = argmax(row_.data(), vocab);
      } else {
        // The config's draw over the tokens it keeps: the whole-row draw at its
        // temperature (Sampler::choose), whose weights are the probabilities reported.
        restrict_to_draw_set(row_.data(), vocab, cfg);
        GenerateConfig whole_row;
        whole_row.temperature = cfg.temperature;
        token = sampler_.choose(row_.data(), vocab, whole_row, ctx.rng);
        const float m = row_[static_cast<size_t>(argmax(row_.data(), vocab))];
        const size_t at = out.probs.size();
        out.probs.resize(at + static_cast<size_t>(vocab));
        float* p = out.probs.data() + at;
        const double total = row_exp(row_.data(), vocab, m, 1.0f / cfg.temperature, p);
        const float inv = static_cast<float>(1.0 / total);
        for (int32_t i = 0; i < vocab; ++i) p[i] *= inv;
      }
    }
  } catch (const InvalidArgument&) {
    // NaN logits, or the processors left no token: no more drafts for this sequence.
    w.done = true;
    return;
  }
  out.tokens.push_back(token);
  w.context.push_back(token);
  const bool eos = !cfg.ignore_eos &&
                   std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), token) !=
                       config_.eos_token_ids.end();
  if (eos || static_cast<int32_t>(out.tokens.size()) >= w.k) w.done = true;
}

}  // namespace tachyon
