// API keys (auth.cc): bearer tokens checked against every configured key.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "core/error.h"
#include "server/auth.h"

namespace tachyon::server {
namespace {

TEST(ApiKeys, ChecksBearerTokensAgainstEveryKey) {
  ApiKeys none;
  EXPECT_TRUE(none.allows(nullptr));
  ApiKeys keys({"alpha", "beta-key"});
  auto allows = [&](std::string_view v) { return keys.allows(&v); };
  EXPECT_FALSE(keys.allows(nullptr));
  EXPECT_TRUE(allows("Bearer alpha"));
  EXPECT_TRUE(allows("bearer beta-key"));
  EXPECT_TRUE(allows("Bearer alpha  "));
  EXPECT_FALSE(allows("Bearer alph"));
  EXPECT_FALSE(allows("Bearer alphaa"));
  EXPECT_FALSE(allows("Bearer "));
  EXPECT_FALSE(allows("alpha"));
  EXPECT_FALSE(allows("Basic alpha"));
  EXPECT_FALSE(allows("Bearer " + std::string(1000, 'a')));
  EXPECT_THROW(ApiKeys({""}), InvalidArgument);
  EXPECT_THROW(ApiKeys({std::string(300, 'k')}), InvalidArgument);
}

TEST(ApiKeys, EqualityIsExact) {
  EXPECT_TRUE(ApiKeys::equal("abc", "abc"));
  EXPECT_FALSE(ApiKeys::equal("abc", "abd"));
  EXPECT_FALSE(ApiKeys::equal("ab", "abc"));
  EXPECT_FALSE(ApiKeys::equal(std::string_view("abc\0", 4), "abc"));
  EXPECT_FALSE(ApiKeys::equal("", "a"));
}

}  // namespace
}  // namespace tachyon::server
