// Base64 (core/base64.h) against RFC 4648's test vectors, and what the decoder refuses.
#include "core/base64.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace tachyon {
namespace {

const std::pair<const char*, const char*> kVectors[] = {{"", ""},
                                                        {"f", "Zg=="},
                                                        {"fo", "Zm8="},
                                                        {"foo", "Zm9v"},
                                                        {"foob", "Zm9vYg=="},
                                                        {"fooba", "Zm9vYmE="},
                                                        {"foobar", "Zm9vYmFy"}};

TEST(Base64, Rfc4648Vectors) {
  for (const auto& [plain, encoded] : kVectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded, "t"), plain);
    std::string unpadded = encoded;
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    EXPECT_EQ(base64_decode(unpadded, "t"), plain) << unpadded;
  }
}

TEST(Base64, EveryByteAndWrappedText) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  std::string enc = base64_encode(all);
  EXPECT_EQ(base64_decode(enc, "t"), all);
  for (size_t i = 76; i < enc.size(); i += 78) enc.insert(i, "\r\n");
  EXPECT_EQ(base64_decode(enc, "t"), all);
  EXPECT_EQ(base64_decode(" Zm9v\tYmFy \n", "t"), "foobar");
}

TEST(Base64, RefusesWhatNoEncodingGives) {
  for (const char* bad : {"Zm9v!mFy", "Z", "Zm9vY", "Zg=", "Zm9=v", "-_-_"}) {
    try {
      base64_decode(bad, "field.x");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("field.x: bad base64"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tachyon
