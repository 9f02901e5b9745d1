#include "engine/block_hash.h"

#include <random>

namespace tachyon {
namespace {

// The finalizer of splitmix64: a bijection of 64 bits with full avalanche.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

BlockHashKey BlockHashKey::random() {
  std::random_device rd;
  auto draw = [&] { return (static_cast<uint64_t>(rd()) << 32) ^ rd(); };
  BlockHashKey k;
  k.k0 = draw();
  k.k1 = draw();
  return k;
}

BlockHash hash_block(const BlockHashKey& key, const BlockHash& parent,
                     std::span<const int32_t> tokens, uint64_t salt) {
  // Two lanes, each a chain of keyed bijections over (parent, salt, length, tokens).
  uint64_t a = mix(key.k0 ^ parent.hi) ^ mix(salt + 0x9E3779B97F4A7C15ull);
  uint64_t b = mix(key.k1 ^ parent.lo) ^ mix(salt ^ 0xD6E8FEB86659FD93ull);
  a = mix(a ^ tokens.size());
  b = mix(b + tokens.size());
  for (const int32_t t : tokens) {
    const uint64_t v = static_cast<uint32_t>(t);
    a = mix(a ^ (v | (v << 32)) ^ key.k1);
    b = mix(b + v + key.k0);
  }
  return BlockHash{mix(a ^ key.k0), mix(b ^ key.k1 ^ a)};
}

}  // namespace tachyon
