#include "media/image_processor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/safetensors.h"
#include "media/qwen2vl_processor.h"
#include "media_fixtures.h"

namespace tachyon::media {
namespace {

// Every processor fixture: the config transformers saved, the image, and its output.
TEST(MediaImageProcessor, EqualsTransformers) {
  int n = 0;
  for (const Json& p : testing::manifest()["processors"]) {
    const std::string expected = p["expected"].get<std::string>();
    SCOPED_TRACE(expected);
    Json config = load_json_file(testing::fixture_path(p["config"].get<std::string>()).string());
    if (p["pad"].get<bool>()) {  // LLaVA's pad-to-square, as LlavaImageProcessor's do_pad
      config["image_processor_type"] = "LlavaImageProcessor";
      config["do_pad"] = true;
    }
    const auto proc = make_image_processor(config);
    const ProcessedImage got =
        proc->process(testing::decode_fixture(p["image"].get<std::string>()));
    const auto file = SafetensorsFile::open(testing::fixture_path(expected).string());
    const Tensor want = file->get("pixel_values");
    ASSERT_EQ(got.pixel_values.numel(), want.numel());
    const float* a = got.pixel_values.data<float>();
    const float* b = want.data<float>();
    const auto& ws = want.shape();
    const auto& gs = got.pixel_values.shape();
    const std::string kind = p["kind"].get<std::string>();
    if (kind == "qwen2vl") {
      ASSERT_EQ(gs, ws);
      const Tensor grid = file->get("image_grid_thw");
      const int64_t* g = grid.data<int64_t>();
      EXPECT_EQ(got.grid_thw[0], g[0]);
      EXPECT_EQ(got.grid_thw[1], g[1]);
      EXPECT_EQ(got.grid_thw[2], g[2]);
    } else if (kind == "llava_next") {
      ASSERT_EQ(ws.size(), 5u);  // [1, views, 3, H, W]
      ASSERT_EQ(gs, (Shape{ws[1], ws[2], ws[3], ws[4]}));
      const Tensor sizes = file->get("image_sizes");
      EXPECT_EQ(got.image_size[0], sizes.data<int64_t>()[0]);
      EXPECT_EQ(got.image_size[1], sizes.data<int64_t>()[1]);
    } else {
      ASSERT_EQ(ws.size(), 4u);  // [1, 3, H, W]
      ASSERT_EQ(gs, (Shape{ws[1], ws[2], ws[3]}));
    }
    // Within one level of the 8-bit input in normalised units: 1/255 / std.
    double worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    EXPECT_LE(worst, 1.0 / 255.0 / 0.2757771);
    // The resize is exact, so the difference is float rounding only.
    int64_t off = 0;
    for (int64_t i = 0; i < want.numel(); ++i) off += std::fabs(a[i] - b[i]) > 1e-5;
    EXPECT_LE(worst, 1e-5) << "largest difference " << worst << " at " << off << " of "
                           << want.numel();
    ++n;
  }
  EXPECT_EQ(n, 15);
}

TEST(MediaImageProcessor, SmartResizeFollowsPythonRounding) {
  // round() halves to even: 36/8 = 4.5 -> 4, 44/8 = 5.5 -> 6.
  EXPECT_EQ(qwen2vl_smart_resize(36, 44, 8, 1, 1 << 20), (std::pair<int64_t, int64_t>{32, 48}));
  // Over max_pixels: floor of the scaled sides.
  EXPECT_EQ(qwen2vl_smart_resize(1000, 500, 28, 56 * 56, 28 * 28 * 16),
            (std::pair<int64_t, int64_t>{140, 56}));
  // Under min_pixels: ceil.
  EXPECT_EQ(qwen2vl_smart_resize(10, 10, 28, 56 * 56, 1 << 20),
            (std::pair<int64_t, int64_t>{56, 56}));
  EXPECT_THROW(qwen2vl_smart_resize(1, 300, 28, 56 * 56, 1 << 20), InvalidArgument);
}

TEST(MediaImageProcessor, LlavaNextBestResolution) {
  const std::vector<std::pair<int64_t, int64_t>> pins = {{336, 672}, {672, 336}, {672, 672}};
  // A wide image: the wide grid keeps all of it.
  EXPECT_EQ(llava_next_best_resolution(300, 600, pins), (std::pair<int64_t, int64_t>{336, 672}));
  // Equal kept areas: the least wasted wins.
  EXPECT_EQ(llava_next_best_resolution(41, 24, {{32, 64}, {64, 32}, {48, 48}}),
            (std::pair<int64_t, int64_t>{64, 32}));
}

TEST(MediaImageProcessor, BadConfigsAreRefused) {
  EXPECT_THROW(
      make_image_processor(Json::parse(R"({"image_processor_type": "SiglipImageProcessor"})")),
      InvalidArgument);
  EXPECT_THROW(make_image_processor(Json::parse(R"({})")), InvalidArgument);
  EXPECT_THROW(make_image_processor(
                   Json::parse(R"({"image_processor_type": "CLIPImageProcessor", "resample": 1})")),
               InvalidArgument);
  EXPECT_THROW(make_image_processor(Json::parse(
                   R"({"image_processor_type": "CLIPImageProcessor", "image_std": [1, 0, 1]})")),
               InvalidArgument);
  EXPECT_THROW(make_image_processor(
                   Json::parse(R"({"image_processor_type": "CLIPImageProcessor", "size": "big"})")),
               InvalidArgument);
  EXPECT_THROW(
      make_image_processor(Json::parse(
          R"({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 100, "max_pixels": 10})")),
      InvalidArgument);
}

TEST(MediaImageProcessor, LoadsFromAModelDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "tachyon_media_proc_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_THROW(load_image_processor(dir), NotFound);
  // The newer layout: processor_config.json's "image_processor".
  std::ofstream(dir / "processor_config.json")
      << R"({"image_processor": {"image_processor_type": "Qwen2VLImageProcessorFast"}})";
  EXPECT_EQ(load_image_processor(dir)->name(), "Qwen2VLImageProcessor");
  std::ofstream(dir / "preprocessor_config.json")
      << R"({"image_processor_type": "CLIPImageProcessor"})";
  EXPECT_EQ(load_image_processor(dir)->name(), "CLIPImageProcessor");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::media
