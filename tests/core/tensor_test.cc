#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tachyon {
namespace {

TEST(Tensor, ShapeAndViews) {
  Tensor t = Tensor::zeros({4, 3}, DType::kF32);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.dim(-1), 3);
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.data<float>()[0], 3.0f);
  Tensor r = t.reshape({2, -1});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_THROW(t.reshape({5, -1}), Internal);
  EXPECT_EQ(t.str(), "f32[4, 3]");
}

TEST(Tensor, ConvertsDtypes) {
  Tensor t = Tensor::empty({3}, DType::kF32);
  t.data<float>()[0] = 1.5f;
  t.data<float>()[1] = -0.25f;
  t.data<float>()[2] = 3.0f;
  Tensor b = t.to(DType::kBF16).to(DType::kF32);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.data<float>()[i], t.data<float>()[i]);
}

TEST(Tensor, RejectsBadShapes) {
  EXPECT_THROW(Tensor::empty({-1, 2}, DType::kF32), InvalidArgument);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}, DType::kF32), InvalidArgument);
}

}  // namespace
}  // namespace tachyon
