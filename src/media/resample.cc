#include "media/resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace tachyon::media {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution with a = -0.5.
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// For each output position: the first input position and the fixed-point weights of
// the inputs from there on.
struct Kernels {
  int taps = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // [out][taps]
};

Kernels make_kernels(int in_size, int out_size, Resample filter) {
  const double filter_support = filter == Resample::kBicubic ? 2.0 : 1.0;
  double (*f)(double) = filter == Resample::kBicubic ? bicubic : bilinear;
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support * filterscale;
  Kernels k;
  k.taps = int(std::ceil(support)) * 2 + 1;
  k.first.resize(out_size);
  k.count.resize(out_size);
  k.weights.assign(size_t(out_size) * k.taps, 0);
  std::vector<double> w(k.taps);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    int xmin = int(center - support + 0.5);  // truncation, as C's cast
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = f((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      const double fixed = v * (1 << kPrecisionBits);
      k.weights[size_t(xx) * k.taps + x] = int32_t(v < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    k.first[xx] = xmin;
    k.count[xx] = xmax;
  }
  return k;
}

inline uint8_t clip8(int32_t sum) {
  const int32_t v = sum >> kPrecisionBits;  // floor
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

RgbImage horizontal(const RgbImage& in, int width, Resample filter) {
  const Kernels k = make_kernels(in.width, width, filter);
  RgbImage out(width, in.height);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y);
    for (int xx = 0; xx < width; ++xx) {
      const int32_t* w = &k.weights[size_t(xx) * k.taps];
      const uint8_t* s = src + size_t(k.first[xx]) * 3;
      int32_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                        1 << (kPrecisionBits - 1)};
      for (int x = 0; x < k.count[xx]; ++x)
        for (int c = 0; c < 3; ++c) acc[c] += s[3 * x + c] * w[x];
      for (int c = 0; c < 3; ++c) dst[3 * xx + c] = clip8(acc[c]);
    }
  }
  return out;
}

RgbImage vertical(const RgbImage& in, int height, Resample filter) {
  const Kernels k = make_kernels(in.height, height, filter);
  RgbImage out(in.width, height);
  const size_t row = size_t(in.width) * 3;
  std::vector<int32_t> acc(row);
  for (int yy = 0; yy < height; ++yy) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* w = &k.weights[size_t(yy) * k.taps];
    for (int y = 0; y < k.count[yy]; ++y) {
      const uint8_t* s = in.row(k.first[yy] + y);
      for (size_t i = 0; i < row; ++i) acc[i] += s[i] * w[y];
    }
    uint8_t* dst = out.row(yy);
    for (size_t i = 0; i < row; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

}  // namespace

Resample resample_from_pil(int n) {
  switch (n) {
    case 2:
      return Resample::kBilinear;
    case 3:
      return Resample::kBicubic;
    default:
      raise<InvalidArgument>(
          "resample {} is not supported (2 = bilinear and 3 = bicubic are; PIL numbers 0 "
          "nearest, 1 lanczos, 4 box, 5 hamming)",
          n);
  }
}

std::string_view resample_name(Resample r) {
  return r == Resample::kBicubic ? "bicubic" : "bilinear";
}

RgbImage resize(const RgbImage& in, int width, int height, Resample filter) {
  if (width < 1 || height < 1 || in.width < 1 || in.height < 1)
    raise<InvalidArgument>("resize: {}x{} to {}x{}: sizes must be positive", in.width, in.height,
                           width, height);
  RgbImage h = width != in.width ? horizontal(in, width, filter) : in;
  return height != in.height ? vertical(h, height, filter) : h;
}

}  // namespace tachyon::media
