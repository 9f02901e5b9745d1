// LLaVA's vision tower and projector on the GPU against the CPU's and transformers'
// (tests/conformance/fixtures/vision): in f32 the features, the projector's output and
// a prompt's logits as the CPU holds them; in bf16 within the dtype's error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_test_util.h"
#include "conformance/llava_test_util.h"
#include "model/model_runner.h"

namespace tachyon::cuda_test {
namespace {

using testing_util::LlavaFixture;

std::unique_ptr<Model> load_on(const std::string& dir, Device device, DType dtype) {
  LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  return load_model(dir, o);
}

// max |a - b| / max |b|
double rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(double(a.data<float>()[i]) - double(b.data<float>()[i])));
    scale = std::max(scale, std::abs(double(b.data<float>()[i])));
  }
  return diff / std::max(scale, 1e-30);
}

class CudaVision : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaVision, TowerAndProjectorMatchTheCpu) {
  TACHYON_REQUIRE_GPU();
  const LlavaFixture f = testing_util::load_llava_fixture(GetParam());
  auto cpu = load_on(f.dir, Device{}, DType::kF32);
  VisionTower& ref = dynamic_cast<ModelRunner&>(*cpu).image_encoder()->tower();
  const Tensor ref_feats = ref.features(f.images);
  const Tensor ref_embeds = ref.project(ref_feats);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_label(dtype));
    auto gpu = load_on(f.dir, Device{DeviceType::kCUDA, 0}, dtype);
    VisionTower& tower = dynamic_cast<ModelRunner&>(*gpu).image_encoder()->tower();
    const Tensor feats = tower.features(f.images);
    const double bound = dtype == DType::kF32 ? 1e-4 : 3e-2;
    EXPECT_LT(rel_error(feats, ref_feats), bound);
    EXPECT_LT(rel_error(tower.project(ref_feats), ref_embeds), bound);
    EXPECT_LT(rel_error(tower.embed(f.images), ref_embeds), 2 * bound);
  }
}

TEST_P(CudaVision, PromptLogitsInF32MatchTransformers) {
  TACHYON_REQUIRE_GPU();
  const LlavaFixture f = testing_util::load_llava_fixture(GetParam());
  auto gpu = load_on(f.dir, Device{DeviceType::kCUDA, 0}, DType::kF32);
  for (size_t c = 0; c < f.cases.size(); ++c) {
    std::vector<Tensor> embeds;
    for (int32_t i : f.cases[c].images)
      embeds.push_back(gpu->image_embeddings(*make_image_input(f.images[static_cast<size_t>(i)])));
    const Tensor logits = testing_util::llava_prompt_logits(*gpu, f.cases[c].input_ids, embeds);
    EXPECT_LT(rel_error(logits, f.cases[c].logits), 1e-4) << "case " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVision,
                         ::testing::Values("vision/llava", "vision/llava_full"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '/', '_');
                           return n;
                         });

}  // namespace
}  // namespace tachyon::cuda_test
