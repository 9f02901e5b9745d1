// Qwen2-VL's smart_resize, exposed for the model side (the number of image tokens
// follows from the grid).
#pragma once

#include <cstdint>
#include <utility>

namespace tachyon::media {

// {height, width}: the nearest multiples of `factor` (Python's round), scaled down to at
// most max_pixels (floor) or up to at least min_pixels (ceil), aspect ratio kept.
// Throws InvalidArgument for an aspect ratio over 200.
std::pair<int64_t, int64_t> qwen2vl_smart_resize(int64_t height, int64_t width, int64_t factor,
                                                 int64_t min_pixels, int64_t max_pixels);

}  // namespace tachyon::media
