// EngineBackend on the bundled model, checked against transformers' greedy outputs
// (tests/engine/data/kjv_reference.json).
#include "frontend/engine_backend.h"

#include <gtest/gtest.h>

#include <condition_variable>

#include "core/json.h"
#include "core/mmap.h"
#include "frontend/task_prompts.h"

namespace tachyon {
namespace {

const std::string kModel = std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat";

struct Gathered {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  std::string text;
  std::vector<TokenLogprobInfo> logprobs;
  std::optional<GenFinish> finish;
  bool done = false;
  std::optional<Error> error;
  int batches = 0;
  GenSink sink() {
    return [this](std::vector<GenEvent>&& evs) {
      std::lock_guard<std::mutex> lock(mu);
      ++batches;
      for (auto& e : evs) {
        if (e.index == 0) {
          ids.insert(ids.end(), e.token_ids.begin(), e.token_ids.end());
          text += e.text;
          for (auto& l : e.logprobs) logprobs.push_back(l);
          if (e.finish) finish = e.finish;
        }
        if (e.done) {
          done = true;
          error = e.error;
        }
      }
      cv.notify_all();
    };
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(120), [&] { return done; });
  }
};

class EngineBackendTest : public ::testing::Test {
 protected:
  static std::shared_ptr<EngineBackend>& backend() {
    static std::shared_ptr<EngineBackend> b = [] {
      EngineBackendOptions o;
      o.model_dir = kModel;
      return EngineBackend::load(o);
    }();
    return b;
  }
  static Json reference() {
    return parse_json(
        read_file(std::string(TACHYON_SOURCE_DIR) + "/tests/engine/data/kjv_reference.json"),
        "kjv_reference.json")["models"]["tiny-kjv-chat"];
  }
};

std::string ltrim(std::string s) {
  while (!s.empty() && s[0] == ' ') s.erase(0, 1);
  return s;
}

TEST_F(EngineBackendTest, ModelInfo) {
  const ModelInfo& info = backend()->model_info();
  EXPECT_EQ(info.name, "tiny-kjv-chat");
  EXPECT_EQ(info.max_model_len, 1024);
  EXPECT_EQ(info.vocab_size, 32000);
  EXPECT_TRUE(info.has_chat_template);
  EXPECT_TRUE(backend()->healthy());
}

TEST_F(EngineBackendTest, PromptsMatchTransformers) {
  for (const auto& ref : reference()) {
    std::vector<int32_t> want = ref["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> got;
    if (ref["kind"] == "chat") {
      Json messages = Json::array({{{"role", "user"}, {"content", ref["prompt"]}}});
      got = backend()->encode_chat(
          backend()->render_chat(messages, nullptr, true, Json::object(), {}), false);
    } else {
      got = backend()->encode(ref["prompt"].get<std::string>(), true);
    }
    EXPECT_EQ(got, want) << ref["prompt"];
  }
}

TEST_F(EngineBackendTest, GreedyGenerationMatchesTransformers) {
  for (const auto& ref : reference()) {
    std::vector<int32_t> prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> want = ref["greedy"][0].get<std::vector<int32_t>>();
    bool eos = !want.empty() && want.back() == 2;
    if (eos) want.pop_back();
    GenerationParams p;
    p.temperature = 0;
    p.max_new_tokens = 48;
    p.return_logprobs = true;
    p.top_logprobs = 2;
    Gathered g;
    backend()->generate(prompt, p, g.sink());
    ASSERT_TRUE(g.wait());
    EXPECT_FALSE(g.error.has_value());
    EXPECT_EQ(g.ids, want) << ref["prompt"];
    EXPECT_EQ(ltrim(g.text), ltrim(ref["greedy"][1].get<std::string>()));
    EXPECT_EQ(g.finish, eos ? GenFinish::kStop : GenFinish::kLength);
    ASSERT_EQ(g.logprobs.size(), g.ids.size());
    for (size_t i = 0; i < g.ids.size(); ++i) {
      EXPECT_EQ(g.logprobs[i].token, g.ids[i]);
      ASSERT_EQ(g.logprobs[i].top.size(), 2u);
      EXPECT_EQ(g.logprobs[i].top[0].first, g.ids[i]);  // greedy takes the most likely
      EXPECT_LE(g.logprobs[i].logprob, 0.0f);
    }
    // The tokens' bytes spell the text (SentencePiece's leading space aside).
    std::string bytes;
    for (int32_t id : g.ids) bytes += backend()->token_bytes(id);
    EXPECT_EQ(ltrim(bytes), ltrim(backend()->decode(g.ids, true)));
  }
}

TEST_F(EngineBackendTest, CancelEndsTheRequestAndFreesTheCache) {
  std::vector<int32_t> prompt = backend()->encode("In the beginning", true);
  GenerationParams p;
  p.max_new_tokens = 900;
  p.ignore_eos = true;
  Gathered g;
  auto h = backend()->generate(prompt, p, g.sink());
  {
    std::unique_lock<std::mutex> lock(g.mu);
    ASSERT_TRUE(g.cv.wait_for(lock, std::chrono::seconds(60), [&] { return !g.ids.empty(); }));
  }
  h->cancel();
  ASSERT_TRUE(g.wait());
  EXPECT_EQ(g.finish, GenFinish::kCancelled);
  EXPECT_LT(g.ids.size(), 900u);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (backend()->stats().num_free_kv_blocks != backend()->stats().num_kv_blocks &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(backend()->stats().num_free_kv_blocks, backend()->stats().num_kv_blocks);
}

TEST_F(EngineBackendTest, BadParametersAreRefusedAtSubmission) {
  GenerationParams p;
  p.top_p = 0;
  Gathered g;
  EXPECT_THROW(backend()->generate({1, 2, 3}, p, g.sink()), InvalidArgument);
}

TEST(EngineBackendPrefix, TaskPromptsAreRawPromptsAndPinNothingWithPrefixCachingOff) {
  EngineBackendOptions o;
  o.model_dir = kModel;
  o.engine.prefix_caching = false;
  auto b = EngineBackend::load(o);
  auto tasks = parse_task_prompts(R"([{"task_id": 1, "prompt": "In the beginning God created"}])",
                                  "tasks.json");
  auto prefixes = install_task_prompts(*b, tasks);
  const TaskPrefixes::Entry* e = prefixes->find("1");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ids, b->encode("In the beginning God created", true));
  EXPECT_EQ(e->ids.front(), 1);  // BOS, as a raw prompt gets
  EXPECT_EQ(e->pinned, 0);
  EXPECT_EQ(b->stats().num_pinned_blocks, 0);
}

// Needs AsyncModel::pin_prefix, which raises Unavailable until the engine's prefix cache
// is built; enable it then.
TEST_F(EngineBackendTest, PinnedTaskPromptIsReusedByRequests) {
  std::vector<int32_t> prefix = backend()->encode(
      "In the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep.",
      true);
  const int64_t block = backend()->stats().block_size;
  ASSERT_GE(static_cast<int64_t>(prefix.size()), block);
  const int32_t pinned = backend()->pin_prefix(prefix);
  EXPECT_EQ(pinned, static_cast<int64_t>(prefix.size()) / block * block);
  EXPECT_EQ(backend()->stats().num_pinned_blocks, pinned / block);
  std::vector<int32_t> prompt = prefix;
  for (int32_t id : backend()->encode(" And God said", false)) prompt.push_back(id);
  GenerationParams p;
  p.max_new_tokens = 4;
  p.temperature = 0;
  Gathered g;
  backend()->generate(prompt, p, g.sink());
  ASSERT_TRUE(g.wait());
  EXPECT_FALSE(g.error) << g.error->what();
  EXPECT_GE(backend()->stats().prefix_cache_hits, pinned);
}

TEST(EngineBackendConversion, CopiesEveryParameter) {
  GenerationParams p;
  p.max_new_tokens = 7;
  p.min_new_tokens = 2;
  p.temperature = 0.5f;
  p.top_k = 9;
  p.top_p = 0.75f;
  p.min_p = 0.1f;
  p.random_seed = 42;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = -0.4f;
  p.no_repeat_ngram_size = 3;
  p.logit_bias = {{5, 1.5f}};
  p.stop_words_str = {"x"};
  p.stop_words_list = {{1, 2}};
  p.ignore_eos = true;
  p.timeout_ms = 1234;
  p.num_return_sequences = 3;
  p.num_beams = 4;
  p.length_penalty = 0.8f;
  p.return_logprobs = true;
  p.top_logprobs = 5;
  GenerateConfig c = to_generate_config(p);
  EXPECT_EQ(c.max_new_tokens, 7);
  EXPECT_EQ(c.min_new_tokens, 2);
  EXPECT_EQ(c.temperature, 0.5f);
  EXPECT_EQ(c.top_k, 9);
  EXPECT_EQ(c.top_p, 0.75f);
  EXPECT_EQ(c.min_p, 0.1f);
  EXPECT_EQ(c.random_seed, 42u);
  EXPECT_EQ(c.repetition_penalty, 1.2f);
  EXPECT_EQ(c.presence_penalty, 0.3f);
  EXPECT_EQ(c.frequency_penalty, -0.4f);
  EXPECT_EQ(c.no_repeat_ngram_size, 3);
  EXPECT_EQ(c.logit_bias, p.logit_bias);
  EXPECT_EQ(c.stop_words_str, p.stop_words_str);
  EXPECT_EQ(c.stop_words_list, p.stop_words_list);
  EXPECT_TRUE(c.ignore_eos);
  EXPECT_EQ(c.timeout_ms, 1234);
  EXPECT_EQ(c.num_return_sequences, 3);
  EXPECT_EQ(c.num_beams, 4);
  EXPECT_EQ(c.length_penalty, 0.8f);
  EXPECT_TRUE(c.return_logprobs);
  EXPECT_EQ(c.top_logprobs, 5);
}

TEST(EngineBackendConversion, EventsKeepTokensLogprobsTimingsAndErrors) {
  StreamEvent e;
  e.index = 1;
  e.token_ids = {10, 11};
  e.text = "ab";
  e.logprobs = {-0.5f, -1.5f};
  e.top_logprobs = {{{10, -0.5f}, {12, -2.0f}}, {{11, -1.5f}}};
  e.finish_reason = FinishReason::kLength;
  e.cum_log_prob = -2.0;
  GenEvent g = to_gen_event(std::move(e));
  EXPECT_EQ(g.index, 1);
  EXPECT_EQ(g.token_ids, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(g.text, "ab");
  ASSERT_EQ(g.logprobs.size(), 2u);
  EXPECT_EQ(g.logprobs[1].token, 11);
  EXPECT_EQ(g.logprobs[0].top, (std::vector<std::pair<int32_t, float>>{{10, -0.5f}, {12, -2.0f}}));
  EXPECT_EQ(g.finish, GenFinish::kLength);
  StreamEvent last;
  last.index = -1;
  last.done = true;
  last.timings.first_token_ms = 3;
  last.timings.iter_count = 9;
  last.error = ErrorInfo{ErrorCode::kDeadlineExceeded, "late"};
  GenEvent gl = to_gen_event(std::move(last));
  EXPECT_TRUE(gl.done);
  EXPECT_EQ(gl.timings.first_token_ms, 3);
  EXPECT_EQ(gl.timings.iter_count, 9);
  ASSERT_TRUE(gl.error.has_value());
  EXPECT_EQ(gl.error->code(), ErrorCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace tachyon
