// LLaVA-1.5 against transformers (tests/conformance/fixtures/vision): the CLIP tower's
// selected features and the projector's output per image within 1e-4 of the float64
// references, the prompt logits with one and two images within 1e-3, greedy tokens
// identical; both checkpoint layouts, both feature selections. On the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "conformance/llava_test_util.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/model_runner.h"
#include "model/vision/image.h"
#include "model/vision/image_encoder.h"
#include "model/vision/image_prompt.h"

namespace tachyon::testing_util {
namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(double(a.data<float>()[i]) - double(b.data<float>()[i])));
  return m;
}

std::unique_ptr<Model> load_cpu(const std::string& dir) {
  LoadOptions o;
  o.device = Device{};
  return load_model(dir, o);
}

class Llava : public ::testing::TestWithParam<std::string> {};

TEST_P(Llava, ConfigMapsTheTextModelAndTheVisionSide) {
  const LlavaFixture f = load_llava_fixture(GetParam());
  const ModelConfig mc = load_model_config(f.dir);
  EXPECT_EQ(mc.family, "llava");
  EXPECT_EQ(mc.architecture, "LlavaForConditionalGeneration");
  EXPECT_EQ(mc.hidden_size, 64);
  EXPECT_EQ(mc.layer_num, 2);
  EXPECT_EQ(mc.vocab_size, 512);
  ASSERT_NE(mc.vision, nullptr);
  EXPECT_EQ(mc.vision->text_family, "llama");
  EXPECT_EQ(mc.vision->image_token_id, f.image_token);
  EXPECT_EQ(mc.vision->tokens_per_image(), f.tokens_per_image);
  EXPECT_EQ(mc.vision->text_hidden, 64);
}

TEST_P(Llava, TowerFeaturesAndProjectorMatchTransformers) {
  const LlavaFixture f = load_llava_fixture(GetParam());
  auto model = load_cpu(f.dir);
  auto& runner = dynamic_cast<ModelRunner&>(*model);
  ASSERT_NE(runner.image_encoder(), nullptr);
  VisionTower& tower = runner.image_encoder()->tower();
  ASSERT_GE(f.images.size(), 2u);
  for (size_t i = 0; i < f.images.size(); ++i) {
    const Tensor feats = tower.features(std::span<const Tensor>(&f.images[i], 1));
    EXPECT_LT(max_abs_diff(feats, f.features[i]), 1e-4) << "image " << i;
    EXPECT_LT(max_abs_diff(tower.project(feats), f.embeds[i]), 1e-4) << "image " << i;
  }
  // Several images in one call: each image's tokens attend only among themselves.
  const Tensor both = tower.embed(f.images);
  ASSERT_EQ(both.dim(0), 2 * f.tokens_per_image);
  EXPECT_LT(max_abs_diff(both.slice_rows(0, f.tokens_per_image).clone(), f.embeds[0]), 1e-4);
  EXPECT_LT(max_abs_diff(both.slice_rows(f.tokens_per_image, 2 * f.tokens_per_image).clone(),
                         f.embeds[1]),
            1e-4);
}

TEST_P(Llava, PromptLogitsAndGreedyTokensMatchTransformers) {
  const LlavaFixture f = load_llava_fixture(GetParam());
  auto model = load_cpu(f.dir);
  ASSERT_EQ(model->image_token_id(), f.image_token);
  ASSERT_EQ(model->image_tokens(), f.tokens_per_image);
  for (size_t c = 0; c < f.cases.size(); ++c) {
    const LlavaCase& lc = f.cases[c];
    std::vector<Tensor> embeds;
    for (int32_t i : lc.images)
      embeds.push_back(
          model->image_embeddings(*make_image_input(f.images[static_cast<size_t>(i)])));
    EXPECT_LT(max_abs_diff(llava_prompt_logits(*model, lc.input_ids, embeds), lc.logits), 1e-3)
        << "case " << c;
    // Greedy by full recomputation, as the reference.
    std::vector<int32_t> ids = lc.input_ids, got;
    for (size_t k = 0; k < lc.greedy_new_ids.size(); ++k) {
      const Tensor logits = llava_prompt_logits(*model, ids, embeds);
      const float* last = logits.data<float>() + (logits.dim(0) - 1) * logits.dim(1);
      const int32_t next =
          static_cast<int32_t>(std::max_element(last, last + logits.dim(1)) - last);
      got.push_back(next);
      ids.push_back(next);
    }
    EXPECT_EQ(got, lc.greedy_new_ids) << "case " << c;
  }
  // One encoding per distinct image: the rest came from the cache.
  auto& runner = dynamic_cast<ModelRunner&>(*model);
  EXPECT_EQ(runner.image_encoder()->misses(), 2);
  EXPECT_GT(runner.image_encoder()->hits(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Llava, ::testing::Values("vision/llava", "vision/llava_full"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '/', '_');
                           return n;
                         });

// llava-hf's published files keep the tower under vision_tower.vision_model.: the same
// weights renamed so load to the same model.
TEST(LlavaImages, TheVisionModelInfixOfPublishedFilesLoads) {
  namespace fs = std::filesystem;
  const LlavaFixture f = load_llava_fixture("vision/llava");
  const fs::path dir = fs::path(TACHYON_BINARY_DIR) / "llava_vision_model_infix";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* file : {"config.json", "generation_config.json"})
    fs::copy_file(fs::path(f.dir) / file, dir / file);
  auto ckpt = Checkpoint::open(f.dir);
  NamedTensors renamed;
  int moved = 0;
  for (const std::string& name : ckpt->names()) {
    std::string n = name;
    if (n.rfind("vision_tower.", 0) == 0) {
      n = "vision_tower.vision_model." + n.substr(13);
      ++moved;
    }
    renamed.emplace_back(n, ckpt->get(name));
  }
  ASSERT_GT(moved, 10);
  write_safetensors((dir / "model.safetensors").string(), renamed);
  auto model = load_cpu(dir.string());
  EXPECT_LT(max_abs_diff(model->image_embeddings(*make_image_input(f.images[0])), f.embeds[0]),
            1e-4);
  fs::remove_all(dir);
}

TEST(LlavaImages, TheEmbeddingCacheKeepsTheMostRecentImagesWithinItsBound) {
  const LlavaFixture f = load_llava_fixture("vision/llava");
  const ModelConfig mc = load_model_config(f.dir);
  auto backend = make_cpu_backend();
  auto ckpt = Checkpoint::open(f.dir);
  const auto a = make_image_input(f.images[0]), b = make_image_input(f.images[1]);
  const int64_t one = int64_t{f.tokens_per_image} * mc.hidden_size * 4;  // an image's bytes
  // Room for one image: each switch encodes again.
  ImageEncoder small(
      std::make_unique<VisionTower>(*mc.vision, load_vision_weights(*ckpt, *mc.vision), *backend),
      one);
  for (const auto& img : {a, b, a, a}) small.embeddings(*img);
  EXPECT_EQ(small.misses(), 3);
  EXPECT_EQ(small.hits(), 1);
  EXPECT_EQ(small.cached_images(), 1);
  // Room for two: each image once, and the values are the tower's.
  ImageEncoder big(
      std::make_unique<VisionTower>(*mc.vision, load_vision_weights(*ckpt, *mc.vision), *backend),
      2 * one);
  for (const auto& img : {a, b, a, b}) big.embeddings(*img);
  EXPECT_EQ(big.misses(), 2);
  EXPECT_EQ(big.cached_images(), 2);
  EXPECT_LT(max_abs_diff(big.embeddings(*b), f.embeds[1]), 1e-4);
}

TEST(LlavaImages, BadImagesAreRefusedNamingTheProblem) {
  const LlavaFixture f = load_llava_fixture("vision/llava");
  auto model = load_cpu(f.dir);
  // Wrong size.
  const auto small = make_image_input(Tensor::zeros({3, 28, 28}, DType::kF32));
  EXPECT_THROW(model->check_image(*small), InvalidArgument);
  EXPECT_THROW(model->image_embeddings(*small), InvalidArgument);
  // A value that is not finite.
  Tensor nan = f.images[0].clone();
  nan.data<float>()[5] = NAN;
  EXPECT_THROW(model->image_embeddings(*make_image_input(nan)), InvalidArgument);
  // Not f32 / not 3-d.
  EXPECT_THROW(make_image_input(Tensor::zeros({3, 42, 42}, DType::kBF16)), InvalidArgument);
  EXPECT_THROW(make_image_input(Tensor::zeros({1, 3, 42, 42}, DType::kF32)), InvalidArgument);
  // Nothing was cached by the refusals.
  EXPECT_EQ(dynamic_cast<ModelRunner&>(*model).image_encoder()->cached_images(), 0);
}

TEST(LlavaImages, ATextModelTakesNoImages) {
  auto model = load_cpu(fixture("llama"));
  EXPECT_EQ(model->image_tokens(), 0);
  EXPECT_EQ(model->image_token_id(), -1);
  const auto image = make_image_input(Tensor::zeros({3, 42, 42}, DType::kF32));
  EXPECT_THROW(model->check_image(*image), InvalidArgument);
  EXPECT_THROW(model->image_embeddings(*image), InvalidArgument);
}

TEST(LlavaImages, ExpandImageTokensRepeatsEachPlaceholder) {
  const std::vector<int32_t> ids = {5, 9, 6, 9, 7};
  EXPECT_EQ(expand_image_tokens(ids, 2, 9, 3), (std::vector<int32_t>{5, 9, 9, 9, 6, 9, 9, 9, 7}));
  EXPECT_EQ(expand_image_tokens(std::vector<int32_t>{5, 6}, 0, 9, 3), (std::vector<int32_t>{5, 6}));
  EXPECT_THROW(expand_image_tokens(ids, 1, 9, 3), InvalidArgument);
  EXPECT_THROW(expand_image_tokens(ids, 3, 9, 3), InvalidArgument);
}

TEST(LlavaImages, ImagePromptExpandsPlaceholdersAndChecksImages) {
  const LlavaFixture f = load_llava_fixture("vision/llava");
  auto model = load_cpu(f.dir);
  const LlavaCase& c = f.cases.at(1);  // two images
  std::vector<int32_t> placeholders;   // each image's run of tokens as one
  for (size_t i = 0; i < c.input_ids.size(); ++i)
    if (c.input_ids[i] != f.image_token || i == 0 || c.input_ids[i - 1] != f.image_token)
      placeholders.push_back(c.input_ids[i]);
  const ImagePrompt p = image_prompt(*model, placeholders, {f.images[0], f.images[1]});
  EXPECT_EQ(p.ids, c.input_ids);
  ASSERT_EQ(p.images.size(), 2u);
  EXPECT_EQ(p.images[1]->hash, hash_pixel_values(f.images[1]));
  EXPECT_THROW(image_prompt(*model, placeholders, {f.images[0]}), InvalidArgument);
  EXPECT_THROW(
      image_prompt(*model, placeholders, {f.images[0], Tensor::zeros({3, 14, 14}, DType::kF32)}),
      InvalidArgument);
  auto text = load_cpu(fixture("llama"));
  EXPECT_THROW(image_prompt(*text, placeholders, {f.images[0], f.images[1]}), InvalidArgument);
}

TEST(LlavaImages, TheHashFollowsShapeAndValues) {
  Tensor a = Tensor::zeros({3, 4, 4}, DType::kF32);
  Tensor b = a.clone();
  EXPECT_EQ(hash_pixel_values(a), hash_pixel_values(b));
  b.data<float>()[47] = 1e-30f;
  EXPECT_FALSE(hash_pixel_values(a) == hash_pixel_values(b));
  EXPECT_FALSE(hash_pixel_values(a) == hash_pixel_values(a.reshape({3, 2, 8})));
}

}  // namespace
}  // namespace tachyon::testing_util
