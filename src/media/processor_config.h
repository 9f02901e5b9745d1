// Reading the fields image processor configs share (media/image_processor.h), and the
// two processors' constructors.
#pragma once

#include <memory>
#include <string>

#include "core/json.h"
#include "media/image_ops.h"
#include "media/image_processor.h"
#include "media/resample.h"

namespace tachyon::media::detail {

// Field readers: the default when the key is absent or null; InvalidArgument naming
// the key for a value of the wrong type or range.
bool config_bool(const Json& c, const char* key, bool def);
double config_number(const Json& c, const char* key, double def);
int64_t config_int(const Json& c, const char* key, int64_t def, int64_t lo, int64_t hi);
std::array<float, 3> config_triple(const Json& c, const char* key, std::array<float, 3> def);
// do_rescale, rescale_factor, do_normalize, image_mean, image_std.
Normalization config_normalization(const Json& c);
Resample config_resample(const Json& c);

std::unique_ptr<ImageProcessor> make_clip_processor(const Json& c, bool pad_to_square);
std::unique_ptr<ImageProcessor> make_qwen2vl_processor(const Json& c);
std::unique_ptr<ImageProcessor> make_llava_next_processor(const Json& c);

}  // namespace tachyon::media::detail
