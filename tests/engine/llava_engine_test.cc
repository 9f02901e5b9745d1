// LLaVA through the engine (on the CPU): requests carry their images, the executor puts
// each image's embeddings on the rows of its tokens that a step computes (chunks of a few
// tokens cut through the images), greedy tokens as transformers'; the prefix cache
// shares blocks between requests of the same images only; images a model cannot take,
// or a count of image tokens that does not match them, are refused at submit.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "conformance/llava_test_util.h"
#include "engine/async_model.h"
#include "model/model_runner.h"

namespace tachyon::testing {
namespace {

using testing_util::LlavaFixture;

std::shared_ptr<Model> load_cpu(const std::string& dir) {
  LoadOptions o;
  o.device = Device{};
  return load_model(dir, o);
}

EngineConfig engine_config(int32_t max_batched_tokens) {
  EngineConfig c;
  c.num_kv_blocks = 64;
  c.block_size = 4;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = max_batched_tokens;
  c.prefix_caching = true;
  return c;  // no EOS: every request runs to max_new_tokens, as the references
}

GenerateRequest request(const LlavaFixture& f, const std::vector<int32_t>& ids,
                        const std::vector<int32_t>& images, int32_t max_new) {
  GenerateRequest r;
  r.prompt_ids = ids;
  r.config.temperature = 0.0f;
  r.config.max_new_tokens = max_new;
  for (int32_t i : images)
    r.images.push_back(make_image_input(f.images.at(static_cast<size_t>(i))));
  return r;
}

class LlavaEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(LlavaEngine, ChunkedPrefillCutsThroughImagesAndMatchesTransformers) {
  const LlavaFixture f = testing_util::load_llava_fixture(GetParam());
  auto model = load_cpu(f.dir);
  // Steps of at most 4 tokens: every image (5 or 9 tokens) is cut by a chunk.
  AsyncModel engine(model, engine_config(4));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& c : f.cases)
    streams.push_back(engine.submit(request(f, c.input_ids, c.images, 10)));
  for (size_t i = 0; i < streams.size(); ++i) {
    const GenerateResult r = streams[i]->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    EXPECT_EQ(r.sequences.at(0).output_ids, f.cases[i].greedy_new_ids) << "case " << i;
  }
}

TEST_P(LlavaEngine, PreemptedRequestsRecomputeTheirImages) {
  const LlavaFixture f = testing_util::load_llava_fixture(GetParam());
  // Room for about one request at a time: the others are preempted and computed again.
  EngineConfig c = engine_config(8);
  size_t longest = 0;
  for (const auto& lc : f.cases) longest = std::max(longest, lc.input_ids.size() + 10);
  c.num_kv_blocks = static_cast<int32_t>((longest + 3) / 4) + 3;
  c.prefix_caching = false;
  AsyncModel engine(load_cpu(f.dir), c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int round = 0; round < 2; ++round)
    for (const auto& lc : f.cases)
      streams.push_back(engine.submit(request(f, lc.input_ids, lc.images, 10)));
  int32_t preemptions = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    const GenerateResult r = streams[i]->wait();
    ASSERT_FALSE(r.error) << r.error->message;
    EXPECT_EQ(r.sequences.at(0).output_ids, f.cases[i % f.cases.size()].greedy_new_ids)
        << "request " << i;
    preemptions += r.timings.num_preemptions;
  }
  EXPECT_GT(preemptions, 0);
}

TEST_P(LlavaEngine, ThePrefixCacheSharesBlocksOnlyForTheSameImages) {
  const LlavaFixture f = testing_util::load_llava_fixture(GetParam());
  auto model = load_cpu(f.dir);
  AsyncModel engine(model, engine_config(64));
  const auto& c = f.cases.at(0);  // one image
  const GenerateResult first = engine.submit(request(f, c.input_ids, {0}, 4))->wait();
  ASSERT_FALSE(first.error) << first.error->message;
  EXPECT_EQ(first.timings.reuse_len, 0);
  const GenerateResult again = engine.submit(request(f, c.input_ids, {0}, 4))->wait();
  ASSERT_FALSE(again.error) << again.error->message;
  EXPECT_GT(again.timings.reuse_len, 0);
  EXPECT_EQ(again.sequences.at(0).output_ids, first.sequences.at(0).output_ids);
  // The same tokens with another image: nothing is shared, and the image's own
  // embeddings are used (the result is that of a fresh engine).
  const GenerateResult other = engine.submit(request(f, c.input_ids, {1}, 4))->wait();
  ASSERT_FALSE(other.error) << other.error->message;
  EXPECT_EQ(other.timings.reuse_len, 0);
  AsyncModel fresh(load_cpu(f.dir), engine_config(64));
  const GenerateResult alone = fresh.submit(request(f, c.input_ids, {1}, 4))->wait();
  ASSERT_FALSE(alone.error) << alone.error->message;
  EXPECT_EQ(other.sequences.at(0).output_ids, alone.sequences.at(0).output_ids);
  // Each image was encoded once.
  EXPECT_EQ(dynamic_cast<ModelRunner&>(*model).image_encoder()->misses(), 2);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlavaEngine,
                         ::testing::Values("vision/llava", "vision/llava_full"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '/', '_');
                           return n;
                         });

TEST(LlavaEngineErrors, WrongImageCountsAndTextModelsAreRefusedAlone) {
  const LlavaFixture f = testing_util::load_llava_fixture("vision/llava");
  auto model = load_cpu(f.dir);
  AsyncModel engine(model, engine_config(16));
  const auto& two = f.cases.at(1);  // two images
  auto good = engine.submit(request(f, f.cases.at(0).input_ids, {0}, 10));
  // One image for a prompt with the tokens of two; two for one; none for one.
  EXPECT_THROW(engine.submit(request(f, two.input_ids, {0}, 4)), InvalidArgument);
  EXPECT_THROW(engine.submit(request(f, f.cases.at(0).input_ids, {0, 1}, 4)), InvalidArgument);
  EXPECT_THROW(engine.submit(request(f, f.cases.at(0).input_ids, {}, 4)), InvalidArgument);
  // An image of the wrong size.
  GenerateRequest bad = request(f, f.cases.at(0).input_ids, {}, 4);
  bad.images.push_back(make_image_input(Tensor::zeros({3, 28, 28}, DType::kF32)));
  EXPECT_THROW(engine.submit(std::move(bad)), InvalidArgument);
  // The request beside them is untouched.
  const GenerateResult r = good->wait();
  ASSERT_FALSE(r.error) << r.error->message;
  EXPECT_EQ(r.sequences.at(0).output_ids, f.cases.at(0).greedy_new_ids);

  // A text model refuses images.
  AsyncModel text(load_cpu(testing_util::fixture("llama")), engine_config(16));
  EXPECT_THROW(text.submit(request(f, {5, 6, 7}, {0}, 4)), InvalidArgument);
  const GenerateResult plain = text.submit(request(f, {5, 6, 7}, {}, 2))->wait();
  EXPECT_FALSE(plain.error);
}

}  // namespace
}  // namespace tachyon::testing
