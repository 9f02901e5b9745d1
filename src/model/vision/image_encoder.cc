#include "model/vision/image_encoder.h"

namespace tachyon {

ImageEncoder::ImageEncoder(std::unique_ptr<VisionTower> tower, int64_t max_bytes)
    : tower_(std::move(tower)), max_bytes_(max_bytes) {}

Tensor ImageEncoder::embeddings(const ImageInput& image) {
  if (auto it = index_.find(image.hash); it != index_.end()) {
    entries_.splice(entries_.begin(), entries_, it->second);
    ++hits_;
    return it->second->values;
  }
  ++misses_;
  Tensor values = tower_->embed(std::span<const Tensor>(&image.pixel_values, 1));
  entries_.push_front(Entry{image.hash, values});
  index_[image.hash] = entries_.begin();
  bytes_ += static_cast<int64_t>(values.nbytes());
  while (bytes_ > max_bytes_ && entries_.size() > 1) {
    bytes_ -= static_cast<int64_t>(entries_.back().values.nbytes());
    index_.erase(entries_.back().hash);
    entries_.pop_back();
  }
  return values;
}

}  // namespace tachyon
