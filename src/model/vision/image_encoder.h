// A model's images to embeddings: the vision tower on the model's backend and a bounded
// cache of the embeddings computed, least recently used first out, keyed by the image's
// hash, so that an image seen again (the same picture in the next turn of a chat, a
// prompt recomputed after preemption, the next chunk of a prompt) is encoded once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>

#include "model/vision/clip_tower.h"
#include "model/vision/image.h"

namespace tachyon {

class ImageEncoder {
 public:
  // max_bytes: the cache's bound (the embeddings' f32 bytes); at least one image's are
  // always kept.
  static constexpr int64_t kDefaultCacheBytes = int64_t{256} << 20;
  ImageEncoder(std::unique_ptr<VisionTower> tower, int64_t max_bytes = kDefaultCacheBytes);

  const VisionTower& tower() const { return *tower_; }
  VisionTower& tower() { return *tower_; }
  // The image's embeddings [tokens_per_image, text hidden] f32 on the host (never changed
  // afterwards), from the cache or computed now. InvalidArgument for a bad image.
  Tensor embeddings(const ImageInput& image);

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t cached_images() const { return static_cast<int64_t>(entries_.size()); }

 private:
  struct Hasher {
    size_t operator()(const ImageHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi >> 9)); }
  };
  struct Entry {
    ImageHash hash;
    Tensor values;
  };
  std::unique_ptr<VisionTower> tower_;
  int64_t max_bytes_;
  int64_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<ImageHash, std::list<Entry>::iterator, Hasher> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace tachyon
