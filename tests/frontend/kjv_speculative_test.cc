// Speculative decoding over the real trained model (models/tiny-kjv-chat) with the
// frontend's text: on the reference prompts, greedy outputs are token for token (and
// log-probability for log-probability) those of plain decoding, with n-gram lookup and
// with proposers of right, random and mixed drafts, under a KV cache small enough to
// preempt (recompute and swap), small steps (chunked prefill), the prefix cache, n > 1,
// stop strings and a LoRA adapter (models/lora-shout).
#include <gtest/gtest.h>

#include "core/json.h"
#include "engine/ngram_proposer.h"
#include "engine/recorded_proposer.h"
#include "frontend/text_engine.h"
#include "model/loader.h"
#include "model/lora_adapter.h"

namespace tachyon {
namespace {

using testing::RecordedProposer;

const std::string kRoot = TACHYON_SOURCE_DIR;

struct Kjv {
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<int32_t> eos;
  std::shared_ptr<const PreparedAdapter> shout;
};

const Kjv& kjv() {
  static const Kjv k = [] {
    Kjv k;
    LoadOptions opts;
    opts.device = Device{};  // the CPU: float32, batch-invariant
    opts.lora.max_loras = 1;
    opts.lora.max_rank = 16;
    k.model = load_model(kRoot + "/models/tiny-kjv-chat", opts);
    k.tokenizer = Tokenizer::load(kRoot + "/models/tiny-kjv-chat");
    for (int64_t e : k.model->config().eos_token_ids) k.eos.push_back(static_cast<int32_t>(e));
    k.shout = k.model->prepare_adapter(load_lora_adapter(
        kRoot + "/models/lora-shout", k.model->config(), k.model->weights().map, {16}));
    return k;
  }();
  return k;
}

struct Request {
  std::vector<int32_t> prompt;
  GenerateConfig cfg;
  int32_t adapter = 0;
};

// The reference prompts, some with log-probabilities, one with n = 2, some with the
// adapter (stop strings: with_stops).
std::vector<Request> requests() {
  const Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json");
  std::vector<Request> out;
  int i = 0;
  for (const Json& c : ref["models"]["tiny-kjv-chat"]) {
    Request r;
    r.prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    r.cfg.temperature = 0.0f;
    r.cfg.max_new_tokens = 48;
    if (i % 2 == 0) {
      r.cfg.return_logprobs = true;
      r.cfg.top_logprobs = 2;
    }
    if (i == 1) r.cfg.num_return_sequences = 2;
    if (i % 3 == 2) r.adapter = 1;
    out.push_back(std::move(r));
    ++i;
  }
  // Asking to repeat a passage: the n-gram lookup's case.
  Request rep = out[0];
  const std::string passage =
      "[INST] Repeat: In the beginning God created the heaven and the earth. And the earth was "
      "without form, and void. [/INST]";
  rep.prompt = kjv().tokenizer->encode(passage, true);
  rep.cfg.stop_words_str.clear();
  rep.adapter = 0;
  out.push_back(rep);
  return out;
}

std::vector<GenerateResult> run(EngineConfig c, const std::vector<Request>& reqs,
                                EngineStats* stats = nullptr) {
  c.eos_token_ids = kjv().eos;
  c.block_size = 16;
  TextEngine e(kjv().model, make_text_tokenizer(kjv().tokenizer, c.eos_token_ids), c);
  e.engine().add_adapter(1, kjv().shout);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) {
    GenerateRequest g{r.prompt, r.cfg};
    g.adapter = r.adapter;
    g.cache_salt = static_cast<uint64_t>(r.adapter);
    streams.push_back(e.submit(std::move(g)));
  }
  std::vector<GenerateResult> out;
  for (auto& s : streams) out.push_back(s->wait());
  if (stats) *stats = e.engine().stats();
  e.engine().remove_adapter(1);  // taken out of the model before the loop stops
  e.engine().shutdown();
  return out;
}

void expect_same(const std::vector<GenerateResult>& got, const std::vector<GenerateResult>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(got[i].error) << what << " " << i << ": " << got[i].error->message;
    ASSERT_EQ(got[i].sequences.size(), want[i].sequences.size()) << what << " " << i;
    for (size_t k = 0; k < got[i].sequences.size(); ++k) {
      const SequenceOutput &g = got[i].sequences[k], &w = want[i].sequences[k];
      EXPECT_EQ(g.output_ids, w.output_ids) << what << " request " << i << " sequence " << k;
      EXPECT_EQ(g.text, w.text) << what << " request " << i;
      EXPECT_EQ(g.finish_reason, w.finish_reason) << what << " request " << i;
      EXPECT_EQ(g.logprobs, w.logprobs) << what << " request " << i;
      ASSERT_EQ(g.top_logprobs.size(), w.top_logprobs.size()) << what << " request " << i;
      for (size_t j = 0; j < g.top_logprobs.size(); ++j) {
        ASSERT_EQ(g.top_logprobs[j].size(), w.top_logprobs[j].size());
        for (size_t a = 0; a < g.top_logprobs[j].size(); ++a) {
          EXPECT_EQ(g.top_logprobs[j][a].token, w.top_logprobs[j][a].token);
          EXPECT_EQ(g.top_logprobs[j][a].logprob, w.top_logprobs[j][a].logprob);
        }
      }
    }
  }
}

// Requests 2 and 3 with stop strings from the middle of their plain outputs.
std::vector<Request> with_stops(std::vector<Request> reqs,
                                const std::vector<GenerateResult>& plain) {
  for (size_t i : {size_t{2}, size_t{3}}) {
    const std::string& text = plain.at(i).sequences.at(0).text;
    EXPECT_GT(text.size(), 24u);
    reqs[i].cfg.stop_words_str = {text.substr(12, i == 2 ? 6 : 2)};
  }
  return reqs;
}

EngineConfig base_config() {
  EngineConfig c;
  c.num_kv_blocks = 256;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 256;
  return c;
}

TEST(KjvSpeculative, GreedyOutputsAreThoseOfPlainDecoding) {
  const auto reqs = with_stops(requests(), run(base_config(), requests()));
  const auto plain = run(base_config(), reqs);
  for (const auto& r : plain) ASSERT_FALSE(r.error) << r.error->message;
  // The stop strings end their requests early.
  for (size_t i : {size_t{2}, size_t{3}}) {
    EXPECT_EQ(plain[i].sequences[0].finish_reason, FinishReason::kStop);
    EXPECT_LT(plain[i].sequences[0].output_ids.size(), 16u);
  }

  std::vector<std::pair<std::string, EngineConfig>> configs;
  configs.emplace_back("plain", base_config());
  {
    EngineConfig c = base_config();
    c.num_kv_blocks = 10;  // 160 slots for requests of up to ~100 tokens
    c.kv_reserve_fraction = 0;
    c.prefix_caching = false;
    configs.emplace_back("recompute", c);
    c.swap_space_bytes = int64_t{64} << 20;
    configs.emplace_back("swap", c);
  }
  {
    EngineConfig c = base_config();
    c.max_num_seqs = 4;
    c.max_num_batched_tokens = 8;
    configs.emplace_back("chunked", c);
  }
  int64_t preemptions = 0;
  for (const auto& [name, config] : configs) {
    for (int mode = 0; mode < 4; ++mode) {
      const std::string what = name + " mode " + std::to_string(mode);
      EngineConfig c = config;
      c.num_speculative_tokens = 5;
      if (mode == 3) {
        c.proposer = std::make_shared<NgramProposer>(1, 4);
      } else {
        auto p = std::make_shared<RecordedProposer>(static_cast<RecordedProposer::Mode>(mode),
                                                    kjv().model->vocab_size());
        for (size_t i = 0; i < reqs.size(); ++i)
          if (reqs[i].adapter == 0) p->add(reqs[i].prompt, plain[i].sequences[0].output_ids);
        c.proposer = p;
      }
      EngineStats s;
      expect_same(run(c, reqs, &s), plain, what);
      EXPECT_GT(s.spec_num_drafts, 0) << what;
      if (mode != 1) {
        EXPECT_GT(s.spec_num_accepted_tokens, 0) << what;
      }
      preemptions += s.num_preemptions;
    }
  }
  EXPECT_GT(preemptions, 0);
}

TEST(KjvSpeculative, ThePrefixCacheServesRequestsThatSpeculated) {
  const auto reqs = with_stops(requests(), run(base_config(), requests()));
  const auto plain = run(base_config(), reqs);
  EngineConfig c = base_config();
  c.prefix_caching = true;
  c.proposer = std::make_shared<NgramProposer>(1, 4);
  c.num_speculative_tokens = 4;
  c.eos_token_ids = kjv().eos;
  TextEngine e(kjv().model, make_text_tokenizer(kjv().tokenizer, c.eos_token_ids), c);
  e.engine().add_adapter(1, kjv().shout);
  for (int round = 0; round < 2; ++round) {
    std::vector<GenerateResult> got;
    for (const Request& r : reqs) {  // one at a time: each reuses what the others cached
      GenerateRequest g{r.prompt, r.cfg};
      g.adapter = r.adapter;
      g.cache_salt = static_cast<uint64_t>(r.adapter);
      got.push_back(e.submit(std::move(g))->wait());
    }
    expect_same(got, plain, "round " + std::to_string(round));
  }
  EXPECT_GT(e.engine().stats().prefix_cache_hits, 0);
  e.engine().remove_adapter(1);
  e.engine().shutdown();
}

}  // namespace
}  // namespace tachyon
