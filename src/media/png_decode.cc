// PNG through libpng, reading the stored samples (only sub-byte samples unpacked to a
// byte each, and interlacing undone) and narrowing them to RGB as PIL's PNG modes then
// convert("RGB") do: gray of 1, 2 or 4 bits scaled to 0..255; 16-bit gray clipped at
// 255 (PIL reads it as a 16-bit integer image, whose conversion clips); every other
// 16-bit sample its high byte; alpha and tRNS dropped; palette indices looked up (an
// index past the palette is black). No gamma or colour-profile correction (PIL applies
// none).
//
// libpng reports errors through longjmp to the setjmp below; no object of this function
// with a destructor is created after it.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"
#include "media/decoders.h"

namespace tachyon::media::detail {
namespace {

struct Reader {
  const uint8_t* data;
  size_t size;
  size_t at;
  char message[160];
};

void on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (n > r->size - r->at) png_error(png, "the data ends before the image does");
  std::memcpy(out, r->data + r->at, n);
  r->at += n;
}

struct Layout {
  int color_type, depth, width, height;
  const png_color* palette;
  int palette_size;
};

// One decoded row (samples as libpng gives them after unpacking) into RGB.
void to_rgb(const Layout& l, const uint8_t* in, uint8_t* o) {
  const int w = l.width;
  auto hi16 = [&](int i) { return in[2 * i]; };  // big-endian: the high byte first
  switch (l.color_type) {
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_GRAY_ALPHA: {
      const int spp = l.color_type == PNG_COLOR_TYPE_GRAY ? 1 : 2;
      for (int x = 0; x < w; ++x) {
        int v;
        if (l.depth == 16) {
          if (spp == 1) {
            const int v16 = (in[2 * x] << 8) | in[2 * x + 1];
            v = v16 > 255 ? 255 : v16;
          } else {
            v = hi16(2 * x);
          }
        } else if (l.depth == 8) {
          v = in[spp * x];
        } else {
          v = in[x] * 255 / ((1 << l.depth) - 1);
        }
        o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = static_cast<uint8_t>(v);
      }
      break;
    }
    case PNG_COLOR_TYPE_RGB:
    case PNG_COLOR_TYPE_RGB_ALPHA: {
      const int spp = l.color_type == PNG_COLOR_TYPE_RGB ? 3 : 4;
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c)
          o[3 * x + c] = l.depth == 16 ? hi16(spp * x + c) : in[spp * x + c];
      break;
    }
    case PNG_COLOR_TYPE_PALETTE:
      for (int x = 0; x < w; ++x) {
        const int i = in[x];
        if (i < l.palette_size) {
          o[3 * x] = l.palette[i].red;
          o[3 * x + 1] = l.palette[i].green;
          o[3 * x + 2] = l.palette[i].blue;
        } else {
          o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = 0;
        }
      }
      break;
  }
}

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  Reader reader{bytes.data(), bytes.size(), 0, {}};
  RgbImage out;
  std::vector<uint8_t> raw;
  std::vector<png_bytep> rows;
  volatile int refused = 0;
  png_uint_32 width = 0, height = 0;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
  if (!png) raise<Internal>("image: libpng could not start");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    raise<Internal>("image: libpng could not start");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    raise<InvalidArgument>("image: corrupt PNG: {}", reader.message);
  }
  png_set_read_fn(png, &reader, on_read);
  // libpng's own limits are far above ours; ours are checked below.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  width = png_get_image_width(png, info);
  height = png_get_image_height(png, info);
  if (int64_t{width} * int64_t{height} > limits.max_pixels || width == 0 || height == 0)
    refused = 1;
  if (!refused) {
    Layout l{png_get_color_type(png, info),
             png_get_bit_depth(png, info),
             static_cast<int>(width),
             static_cast<int>(height),
             nullptr,
             0};
    if (l.color_type == PNG_COLOR_TYPE_PALETTE) {
      png_colorp palette = nullptr;
      int n = 0;
      if (!png_get_PLTE(png, info, &palette, &n))
        png_error(png, "a palette image without a palette");
      l.palette = palette;
      l.palette_size = n;
    }
    if (l.depth < 8) png_set_packing(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t stride = png_get_rowbytes(png, info);
    raw.resize(stride * height);
    rows.resize(height);
    for (png_uint_32 y = 0; y < height; ++y) rows[y] = raw.data() + stride * y;
    png_read_image(png, rows.data());
    out = RgbImage(l.width, l.height);
    for (int y = 0; y < l.height; ++y) to_rgb(l, rows[y], out.row(y));
  }
  png_destroy_read_struct(&png, &info, nullptr);
  if (refused) check_dimensions("PNG", width, height, limits);
  return out;
}

}  // namespace tachyon::media::detail
