#include "grammar/vocabulary.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace tachyon::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes, std::vector<bool> special,
                                 std::vector<int32_t> eos)
    : bytes_(std::move(bytes)), special_(std::move(special)), eos_(std::move(eos)) {
  if (special_.size() != bytes_.size())
    raise<InvalidArgument>("the vocabulary has {} tokens but {} special flags", bytes_.size(),
                           special_.size());
  for (int32_t e : eos_)
    if (e < 0 || e >= size())
      raise<InvalidArgument>("end-of-sequence token {} is outside the vocabulary of {}", e, size());
  std::sort(eos_.begin(), eos_.end());
  eos_.erase(std::unique(eos_.begin(), eos_.end()), eos_.end());

  uint64_t h = 1469598103934665603ull;  // FNV-1a over (length, bytes, special) per token
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  for (size_t i = 0; i < bytes_.size(); ++i) {
    mix(bytes_[i].size());
    for (unsigned char c : bytes_[i]) mix(c);
    mix(special_[i] ? 1 : 0);
  }
  for (int32_t e : eos_) mix(static_cast<uint64_t>(e) + 7);
  fingerprint_ = h;

  // Tokens sorted by bytes: a trie's preorder is their order, each node opened by the
  // first token whose bytes extend the common prefix with the previous token.
  std::vector<int32_t> order;
  for (int32_t i = 0; i < size(); ++i)
    if (!special_[static_cast<size_t>(i)] && !bytes_[static_cast<size_t>(i)].empty())
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  std::vector<uint32_t> open;  // node index per depth of the current path
  std::string_view prev;
  for (int32_t id : order) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    max_len_ = std::max<uint32_t>(max_len_, static_cast<uint32_t>(s.size()));
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    for (size_t d = open.size(); d > common; --d)
      trie_[open[d - 1]].subtree_end = static_cast<uint32_t>(trie_.size());
    open.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      open.push_back(static_cast<uint32_t>(trie_.size()));
      trie_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint32_t>(d + 1), 0, 0, 0});
    }
    TrieNode& leaf = trie_[open.back()];
    if (leaf.token_begin == leaf.token_end) {
      leaf.token_begin = static_cast<uint32_t>(trie_tokens_.size());
      leaf.token_end = leaf.token_begin;
    }
    trie_tokens_.push_back(id);  // equal bytes are adjacent in the order
    ++leaf.token_end;
    prev = s;
  }
  for (uint32_t n : open) trie_[n].subtree_end = static_cast<uint32_t>(trie_.size());
}

bool TokenVocabulary::is_eos(int32_t id) const {
  return std::binary_search(eos_.begin(), eos_.end(), id);
}

}  // namespace tachyon::grammar
