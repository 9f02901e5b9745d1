#include "media/resample.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "media_fixtures.h"

namespace tachyon::media {
namespace {

TEST(MediaResize, EqualsPilResize) {
  int n = 0;
  for (const Json& r : testing::manifest()["resize"]) {
    const std::string expected = r["expected"].get<std::string>();
    SCOPED_TRACE(expected);
    const RgbImage src = testing::decode_fixture(r["source"].get<std::string>());
    const Resample filter =
        r["filter"].get<std::string>() == "bicubic" ? Resample::kBicubic : Resample::kBilinear;
    const RgbImage got = resize(src, r["width"].get<int>(), r["height"].get<int>(), filter);
    const RgbImage want = testing::decode_fixture(expected);
    ASSERT_EQ(got.width, want.width);
    ASSERT_EQ(got.height, want.height);
    EXPECT_EQ(testing::max_abs_diff(got, want), 0);
    ++n;
  }
  EXPECT_EQ(n, 36);
}

TEST(MediaResize, SameSizeIsACopyAndBadSizesAreRefused) {
  const RgbImage src = testing::decode_fixture("decoded/rgb.png.png");
  EXPECT_TRUE(resize(src, src.width, src.height, Resample::kBicubic).pixels == src.pixels);
  EXPECT_THROW(resize(src, 0, 4, Resample::kBicubic), InvalidArgument);
  EXPECT_THROW(resample_from_pil(1), InvalidArgument);
}

}  // namespace
}  // namespace tachyon::media
