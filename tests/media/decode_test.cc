#include "media/decode.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "media_fixtures.h"

namespace tachyon::media {
namespace {

using testing::decode_fixture;
using testing::manifest;
using testing::read_fixture;

TEST(MediaDecode, EveryFormatAndModeEqualsPil) {
  int n = 0;
  for (const Json& d : manifest()["decode"]) {
    const std::string file = d["file"].get<std::string>();
    SCOPED_TRACE(file + " (PIL mode " + d["mode"].get<std::string>() + ")");
    const RgbImage got = decode_image(read_fixture("images/" + file));
    const RgbImage want = decode_fixture("decoded/" + file + ".png");
    ASSERT_EQ(got.width, d["width"].get<int>());
    ASSERT_EQ(got.height, d["height"].get<int>());
    ASSERT_EQ(want.width, got.width);
    ASSERT_EQ(want.height, got.height);
    EXPECT_EQ(testing::max_abs_diff(got, want), 0);
    EXPECT_TRUE(got.pixels == want.pixels);
    ++n;
  }
  EXPECT_GE(n, 27);
}

TEST(MediaDecode, FormatFromTheBytes) {
  EXPECT_EQ(detect_image_format(read_fixture("images/baseline.jpg")), ImageFormat::kJpeg);
  EXPECT_EQ(detect_image_format(read_fixture("images/rgb.png")), ImageFormat::kPng);
  EXPECT_EQ(detect_image_format(read_fixture("images/lossy.webp")), ImageFormat::kWebp);
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_EQ(detect_image_format(text), ImageFormat::kUnknown);
}

TEST(MediaDecode, UnsupportedFormatsAreNamed) {
  int n = 0;
  for (const Json& u : manifest()["unsupported"]) {
    const std::string file = u["file"].get<std::string>();
    const std::string fmt = u["format"].get<std::string>();
    try {
      decode_image(read_fixture("images/" + file));
      ADD_FAILURE() << file << " decoded";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fmt), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
    }
    ++n;
  }
  EXPECT_EQ(n, 3);
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_THROW(decode_image(text), InvalidArgument);
  EXPECT_THROW(decode_image({}), InvalidArgument);
}

TEST(MediaDecode, TruncatedImagesAreRefused) {
  for (const Json& d : manifest()["decode"]) {
    const std::string file = d["file"].get<std::string>();
    const std::vector<uint8_t> bytes = read_fixture("images/" + file);
    for (double frac : {0.05, 0.3, 0.6, 0.85}) {
      SCOPED_TRACE(file + " cut at " + std::to_string(frac));
      const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + size_t(bytes.size() * frac));
      EXPECT_THROW(decode_image(cut), InvalidArgument);
    }
  }
}

TEST(MediaDecode, CorruptBytesNeverCrash) {
  // Flipped bytes either decode to an image of the header's size or are refused.
  for (const Json& d : manifest()["decode"]) {
    const std::string file = d["file"].get<std::string>();
    const std::vector<uint8_t> bytes = read_fixture("images/" + file);
    for (size_t step : {7u, 13u, 31u}) {
      std::vector<uint8_t> bad = bytes;
      for (size_t i = 16; i < bad.size(); i += step) bad[i] ^= 0x5A;
      try {
        const RgbImage img = decode_image(bad);
        EXPECT_EQ(img.pixels.size(), size_t(img.width) * img.height * 3);
      } catch (const InvalidArgument&) {
      }
    }
  }
}

TEST(MediaDecode, LimitsAreCheckedFirst) {
  const std::vector<uint8_t> jpg = read_fixture("images/baseline.jpg");  // 37x23
  DecodeLimits limits;
  limits.max_pixels = 37 * 23;
  EXPECT_EQ(decode_image(jpg, limits).width, 37);
  limits.max_pixels = 37 * 23 - 1;
  for (const char* f : {"images/baseline.jpg", "images/rgb.png", "images/lossy.webp"}) {
    try {
      decode_image(read_fixture(f), limits);
      ADD_FAILURE() << f << " decoded over the pixel limit";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("over the limit"), std::string::npos) << e.what();
    }
  }
  DecodeLimits bytes_limit;
  bytes_limit.max_bytes = int64_t(jpg.size()) - 1;
  EXPECT_THROW(decode_image(jpg, bytes_limit), InvalidArgument);
  bytes_limit.max_bytes = int64_t(jpg.size());
  EXPECT_NO_THROW(decode_image(jpg, bytes_limit));
}

TEST(MediaDecode, HugeDimensionsInAHeaderAreRefusedBeforeDecoding) {
  // A PNG header claiming 100000 x 100000 pixels, with no image data at all.
  std::vector<uint8_t> png = read_fixture("images/rgb.png");
  png[16] = 0, png[17] = 1, png[18] = 0x86, png[19] = 0xA0;  // width 100000
  png[20] = 0, png[21] = 1, png[22] = 0x86, png[23] = 0xA0;  // height 100000
  png.resize(33);
  try {
    decode_image(png);
    ADD_FAILURE() << "decoded";
  } catch (const InvalidArgument& e) {
    // libpng checks the header's CRC first; either refusal names the problem.
    const std::string what = e.what();
    EXPECT_TRUE(what.find("over the limit") != std::string::npos ||
                what.find("CRC") != std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace tachyon::media
