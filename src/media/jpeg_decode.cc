// JPEG through libjpeg(-turbo), with PIL's choices: the default (accurate integer) IDCT
// and fancy upsampling; grayscale replicated; CMYK and YCCK read as CMYK, inverted when
// an Adobe marker says the file stores them inverted, then converted as PIL converts
// CMYK to RGB. A file that ends early is refused (PIL's "image file is truncated").
//
// libjpeg reports errors by calling error_exit, which must not return: it longjmps back
// here. Between setjmp and the longjmp only libjpeg's C frames run, and no object of
// this function with a destructor is created after the setjmp.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>

// After <cstdio>: jpeglib.h uses size_t and FILE without declaring them.
#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "media/decoders.h"

namespace tachyon::media::detail {
namespace {

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings are ignored as PIL ignores them, except the end of the data before the end
// of the image, which libjpeg would paper over with grey.
void on_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
    auto* e = reinterpret_cast<JpegError*>(c->err);
    std::snprintf(e->message, sizeof e->message, "the data ends before the image does");
    std::longjmp(e->jump, 1);
  }
}

// round(a * b / 255) for bytes a, b (a * b / 255 is never halfway between integers).
inline int mul_div255(int a, int b) {
  return (2 * a * b + 255) / 510;
}

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  RgbImage out;
  std::vector<uint8_t> row;
  // 0 while fine; 1 for a refused size (the message formatted below).
  volatile int refused = 0;
  long width = 0, height = 0;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = on_error;
  err.mgr.emit_message = on_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    raise<InvalidArgument>("image: corrupt JPEG: {}", err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  width = cinfo.image_width;
  height = cinfo.image_height;
  if (width <= 0 || height <= 0 || int64_t{width} * height > limits.max_pixels) refused = 1;
  if (!refused) {
    const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    const bool gray = cinfo.jpeg_color_space == JCS_GRAYSCALE;
    cinfo.out_color_space = cmyk ? JCS_CMYK : gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const bool inverted = cmyk && cinfo.saw_Adobe_marker;
    out = RgbImage(static_cast<int>(cinfo.output_width), static_cast<int>(cinfo.output_height));
    row.resize(size_t(cinfo.output_width) * size_t(cinfo.output_components));
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW rows[1] = {row.data()};
      const int y = static_cast<int>(cinfo.output_scanline);
      jpeg_read_scanlines(&cinfo, rows, 1);
      uint8_t* o = out.row(y);
      const int w = out.width;
      if (cinfo.out_color_space == JCS_RGB) {
        std::memcpy(o, row.data(), size_t(w) * 3);
      } else if (cinfo.out_color_space == JCS_GRAYSCALE) {
        for (int x = 0; x < w; ++x) o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = row[x];
      } else {
        for (int x = 0; x < w; ++x) {
          int px[4];
          for (int c = 0; c < 4; ++c) px[c] = inverted ? 255 - row[4 * x + c] : row[4 * x + c];
          const int nk = 255 - px[3];
          for (int c = 0; c < 3; ++c)
            o[3 * x + c] = static_cast<uint8_t>(nk - mul_div255(px[c], nk));
        }
      }
    }
    jpeg_finish_decompress(&cinfo);
  }
  jpeg_destroy_decompress(&cinfo);
  if (refused) check_dimensions("JPEG", width, height, limits);
  return out;
}

}  // namespace tachyon::media::detail
