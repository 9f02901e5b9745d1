// EngineBackend with LoRA adapters on the bundled model and its trained adapter
// (models/lora-shout, which answers in capitals): requests by adapter name against
// transformers' greedy outputs of base + adapter, the base model beside them, the prefix
// cache kept apart per adapter, adapters loaded and unloaded while requests run.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "core/json.h"
#include "core/mmap.h"
#include "frontend/engine_backend.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;
const std::string kModel = kRoot + "/models/tiny-kjv-chat";
const std::string kShout = kRoot + "/models/lora-shout";

struct Result {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  std::string text;
  GenTimings timings;
  std::optional<Error> error;
  bool done = false;
  GenSink sink() {
    return [this](std::vector<GenEvent>&& evs) {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& e : evs) {
        if (e.index == 0) {
          ids.insert(ids.end(), e.token_ids.begin(), e.token_ids.end());
          text += e.text;
        }
        if (e.done) {
          done = true;
          error = e.error;
          timings = e.timings;
        }
      }
      cv.notify_all();
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done; }));
  }
};

std::shared_ptr<EngineBackend> load(bool prefix_caching) {
  EngineBackendOptions o;
  o.model_dir = kModel;
  o.device = "cpu";
  o.lora.enabled = true;
  o.lora.max_loras = 2;
  o.lora.max_rank = 8;
  o.engine.prefix_caching = prefix_caching;
  return EngineBackend::load(o);
}

GenerationParams greedy(const std::string& adapter, int32_t n = 48) {
  GenerationParams p;
  p.temperature = 0;
  p.max_new_tokens = n;
  p.adapter_name = adapter;
  return p;
}

Json reference(const std::string& model) {
  return parse_json(read_file(kRoot + "/tests/engine/data/kjv_reference.json"),
                    "kjv_reference.json")["models"][model];
}

std::vector<int32_t> without_eos(std::vector<int32_t> ids) {
  if (!ids.empty() && ids.back() == 2) ids.pop_back();
  return ids;
}

TEST(EngineBackendLora, AdapterAndBaseRequestsMatchTransformers) {
  auto b = load(false);
  b->load_adapter("shout", kShout);
  ASSERT_EQ(b->adapters().size(), 1u);
  EXPECT_EQ(b->adapters()[0].name, "shout");
  const Json lora = reference("tiny-kjv-chat+lora-shout"), base = reference("tiny-kjv-chat");
  ASSERT_EQ(lora.size(), base.size());
  // Every prompt on the adapter and on the base model, all at once.
  std::vector<std::unique_ptr<Result>> results;
  for (size_t i = 0; i < lora.size(); ++i)
    for (const Json* ref : {&lora[i], &base[i]}) {
      results.push_back(std::make_unique<Result>());
      b->generate((*ref)["prompt_ids"].get<std::vector<int32_t>>(),
                  greedy(ref == &lora[i] ? "shout" : ""), results.back()->sink());
    }
  for (size_t i = 0; i < results.size(); ++i) {
    Result& r = *results[i];
    r.wait();
    ASSERT_FALSE(r.error) << r.error->what();
    const Json& ref = i % 2 == 0 ? lora[i / 2] : base[i / 2];
    EXPECT_EQ(r.ids, without_eos(ref["greedy"][0].get<std::vector<int32_t>>())) << ref["prompt"];
  }
  // The adapter's answers are in capitals.
  const std::string& shout = results[0]->text;
  EXPECT_NE(shout.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), std::string::npos);
  EXPECT_EQ(shout.find_first_of("abcdefghijklmnopqrstuvwxyz"), std::string::npos) << shout;
}

TEST(EngineBackendLora, ThePrefixCacheKeepsAdaptersApart) {
  auto b = load(true);
  b->load_adapter("shout", kShout);
  // Two whole blocks of 16 tokens and more.
  const std::vector<int32_t> prompt = b->encode(
      "In the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon "
      "the face of the waters.",
      true);
  ASSERT_GT(prompt.size(), 32u);
  auto run = [&](const std::string& adapter) {
    Result r;
    b->generate(prompt, greedy(adapter, 16), r.sink());
    r.wait();
    EXPECT_FALSE(r.error);
    return std::make_pair(r.ids, r.timings.reuse_len);
  };
  const auto base = run("");
  const auto first = run("shout");  // the base model's blocks are not its own
  const auto again = run("shout");  // its own are
  EXPECT_NE(base.first, first.first);
  EXPECT_EQ(first.second, 0);
  EXPECT_GT(again.second, 0);
  EXPECT_EQ(again.first, first.first);
  EXPECT_GT(run("").second, 0);
}

TEST(EngineBackendLora, AdaptersComeAndGoWhileRequestsRun) {
  auto b = load(false);
  b->load_adapter("shout", kShout);
  b->load_adapter("shout", kShout);  // the same path again: nothing changes
  EXPECT_THROW(b->load_adapter("shout", kModel), InvalidArgument);
  EXPECT_THROW(b->load_adapter("bad name!", kShout), InvalidArgument);
  EXPECT_THROW(b->load_adapter("missing", kRoot + "/no/such/adapter"), NotFound);
  EXPECT_THROW(b->load_adapter("not-an-adapter", kModel), NotFound);
  const std::vector<int32_t> prompt = b->encode("In the beginning", true);
  // A long request on the adapter, then the adapter unloaded under it: it finishes.
  Result running;
  GenerationParams p = greedy("shout", 200);
  p.ignore_eos = true;
  b->generate(prompt, p, running.sink());
  b->unload_adapter("shout");
  EXPECT_TRUE(b->adapters().empty());
  EXPECT_THROW(b->generate(prompt, greedy("shout"), Result().sink()), InvalidArgument);
  EXPECT_THROW(b->unload_adapter("shout"), NotFound);
  running.wait();
  EXPECT_FALSE(running.error);
  EXPECT_EQ(running.ids.size(), 200u);
  // Loaded again under another name: it runs as before.
  b->load_adapter("caps", kShout);
  Result again;
  b->generate(prompt, greedy("caps", 200), again.sink());
  again.wait();
  EXPECT_EQ(std::vector<int32_t>(again.ids.begin(), again.ids.begin() + 16),
            std::vector<int32_t>(running.ids.begin(), running.ids.begin() + 16));
}

}  // namespace
}  // namespace tachyon
