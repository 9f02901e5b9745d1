#include "core/json.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace tachyon {
namespace {

TEST(ParseJson, ParsesAndNamesWhatFailed) {
  EXPECT_EQ(parse_json(R"({"a": [1, 2.5, "x"]})", "body")["a"][1].get<double>(), 2.5);
  try {
    parse_json("{\"a\": ", "request body");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("request body: invalid JSON"), std::string::npos)
        << e.what();
  }
}

// A number too large for a double is valid syntax that the parser refuses with its own
// exception type (not a parse error): a clear InvalidArgument, as for any bad text.
TEST(ParseJson, NumberOverflowIsInvalidArgument) {
  EXPECT_THROW(parse_json(R"({"max_tokens": 1e400})", "body"), InvalidArgument);
  EXPECT_THROW(parse_json("[-" + std::string(400, '9') + ".0]", "body"), InvalidArgument);
  // Large integers that fit a double are numbers, not errors.
  EXPECT_TRUE(parse_json("[" + std::string(30, '9') + "]", "body")[0].is_number_float());
}

TEST(ParseJson, RefusesDeepNesting) {
  EXPECT_THROW(parse_json(std::string(300, '[') + std::string(300, ']'), "body"), InvalidArgument);
  EXPECT_NO_THROW(parse_json(std::string(10, '[') + std::string(10, ']'), "body", 16));
  EXPECT_THROW(parse_json(std::string(17, '[') + std::string(17, ']'), "body", 16),
               InvalidArgument);
}

TEST(Json, ParsesAndLimitsDepth) {
  EXPECT_EQ(parse_json(R"({"a": [1, 2]})", "t")["a"][1], 2);
  EXPECT_THROW(parse_json("{", "t"), InvalidArgument);
  std::string deep(1000, '[');
  EXPECT_THROW(parse_json(deep + std::string(1000, ']'), "t", 100), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
