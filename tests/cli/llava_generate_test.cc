// `tachyon generate --image` (and a batch line's "images") on the LLaVA fixture, run as
// the real binary on the CPU: image files are decoded and go through the model folder's
// image processor into the same engine path as pixel_values given directly (the engine
// tests' path); bad images and counts are refused, naming them.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "conformance/llava_model_dir.h"
#include "core/json.h"

namespace tachyon {
namespace {

const std::string kRoot = TACHYON_SOURCE_DIR;
const std::string kBin = std::string(TACHYON_BINARY_DIR) + "/tachyon";
const std::string kImages = kRoot + "/tests/media/fixtures/images/";
constexpr int32_t kNew = 8;

using testing::run_command;

std::vector<int32_t> engine_tokens(const std::string& dir, const std::vector<int32_t>& ids,
                                   const std::vector<std::string>& files) {
  return testing_util::llava_engine_tokens(dir, ids, files, kNew);
}

std::string generate_cmd(const std::string& dir) {
  return kBin + " generate --model " + dir + " --device cpu --temperature 0 --ignore-eos " +
         "--max-new-tokens " + std::to_string(kNew);
}

TEST(CliLlava, ImageFilesGiveTheEngineTheirPixelValues) {
  const std::string dir = testing_util::llava_model_dir();
  // A JPEG resized by the processor and a grayscale PNG, in an order that matters.
  const std::string jpg = kImages + "baseline.jpg", png = kImages + "gray.png";
  const auto [code, out] = run_command(generate_cmd(dir) +
                                       " --json --prompt 'w264 w454 <image> w175 <image> w426' "
                                       "--image " +
                                       jpg + " --image " + png + " 2>/dev/null");
  ASSERT_EQ(code, 0) << out;
  const Json j = Json::parse(out);
  const std::vector<int32_t> want = engine_tokens(dir, {264, 454, 511, 175, 511, 426}, {jpg, png});
  EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(),
            (std::vector<int32_t>{264, 454, 511, 175, 511, 426}));
  // The images matter: in the other order the tokens differ.
  EXPECT_NE(engine_tokens(dir, {264, 454, 511, 175, 511, 426}, {png, jpg}), want);

  // The same through a batch line, beside lines that are refused alone.
  const std::string tmp = ::testing::TempDir();
  const std::string in = tmp + "/llava_in.jsonl", res = tmp + "/llava_out.jsonl";
  const std::string corrupt = tmp + "/corrupt.png";
  {
    const std::string bytes = read_file(png);
    std::ofstream(corrupt, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::ofstream f(in);
    f << Json{{"prompt", "w264 w454 <image> w175 <image> w426"}, {"images", {jpg, png}}}.dump()
      << "\n";
    f << Json{{"prompt", "w264 <image> w175 <image>"}, {"images", {png}}}.dump() << "\n";
    f << Json{{"prompt", "w264 <image> w175"}, {"images", {corrupt}}}.dump() << "\n";
    f << Json{{"prompt_ids", {264, 511, 175}}, {"images", {png}}}.dump() << "\n";
  }
  const auto [bcode, bout] =
      run_command(generate_cmd(dir) + " --input " + in + " --output " + res + " 2>/dev/null");
  EXPECT_EQ(bcode, 1) << bout;
  std::ifstream rf(res);
  std::vector<Json> lines;
  for (std::string l; std::getline(rf, l);) lines.push_back(Json::parse(l));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["output_ids"].get<std::vector<int32_t>>(), want) << lines[0].dump();
  EXPECT_NE(lines[1]["error"].get<std::string>().find("2 image placeholders"), std::string::npos)
      << lines[1].dump();
  EXPECT_NE(lines[2]["error"].get<std::string>().find("images[0]"), std::string::npos)
      << lines[2].dump();
  EXPECT_EQ(lines[3]["output_ids"].get<std::vector<int32_t>>(),
            engine_tokens(dir, {264, 511, 175}, {png}))
      << lines[3].dump();
}

TEST(CliLlava, BadImagesAndCountsAreRefused) {
  const std::string dir = testing_util::llava_model_dir();
  const std::string png = kImages + "rgb.png";
  // More placeholders than images, and fewer.
  auto [code, out] =
      run_command(generate_cmd(dir) + " --prompt 'w5 <image> <image>' --image " + png + " 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--image: the prompt holds 2 image placeholders"), std::string::npos) << out;
  std::tie(code, out) =
      run_command(generate_cmd(dir) + " --prompt 'w5 w6' --image " + png + " 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("holds 0 image placeholders"), std::string::npos) << out;
  // A file that is not an image.
  std::tie(code, out) = run_command(generate_cmd(dir) + " --prompt 'w5 <image>' --image " + kRoot +
                                    "/README.md 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--image[0]"), std::string::npos) << out;
  // A text model takes none.
  std::tie(code, out) =
      run_command(kBin + " generate --model " + kRoot +
                  "/models/tiny-kjv-chat --prompt 'In the' --image " + png + " 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("this model takes no images"), std::string::npos) << out;
  // A vision model's folder without its image processor's config.
  std::tie(code, out) = run_command(generate_cmd(testing_util::llava_model_dir(false)) +
                                    " --prompt 'w5 <image>' --image " + png + " 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("preprocessor_config.json"), std::string::npos) << out;
}

}  // namespace
}  // namespace tachyon
