// The media fixtures (tests/media/fixtures, made by scripts/make_media_fixtures.py with
// PIL and transformers): their manifest and files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "media/decode.h"

namespace tachyon::media::testing {

inline std::filesystem::path fixture_path(const std::string& name) {
  return std::filesystem::path(TACHYON_SOURCE_DIR) / "tests/media/fixtures" / name;
}

inline std::vector<uint8_t> read_fixture(const std::string& name) {
  std::ifstream f(fixture_path(name), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  return std::vector<uint8_t>(s.begin(), s.end());
}

inline const Json& manifest() {
  static const Json m = load_json_file(fixture_path("manifest.json").string());
  return m;
}

// A fixture image decoded (the references are 8-bit RGB PNGs).
inline RgbImage decode_fixture(const std::string& name) {
  return decode_image(read_fixture(name));
}

// The largest difference between two images of the same size.
inline int max_abs_diff(const RgbImage& a, const RgbImage& b) {
  int m = 0;
  for (size_t i = 0; i < a.pixels.size() && i < b.pixels.size(); ++i)
    m = std::max(m, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return m;
}

}  // namespace tachyon::media::testing
