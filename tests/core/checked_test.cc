#include "core/checked.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.h"

namespace tachyon {
namespace {

TEST(Checked, DetectsOverflow) {
  EXPECT_FALSE(checked_add<uint64_t>(~uint64_t{0}, 1).has_value());
  EXPECT_EQ(checked_mul<int64_t>(3, 4), 12);
  EXPECT_THROW(mul_or_throw<uint32_t>(1u << 20, 1u << 20, "x"), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
