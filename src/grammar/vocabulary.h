// A model's vocabulary as a grammar sees it: each token's bytes, which tokens are
// special (never produced by a grammar: they are not text) and which end the sequence
// (allowed where the grammar may end). The tokens are laid out as a byte trie in
// preorder, so that a mask walk shares the work of tokens with a common prefix and
// skips a whole subtree when its prefix is refused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tachyon::grammar {

class TokenVocabulary {
 public:
  // bytes[id] for every token id; special[id] (same size) marks special tokens; eos
  // lists the end-of-sequence ids (special or not, within range). Throws
  // InvalidArgument on mismatched sizes or out-of-range eos ids.
  TokenVocabulary(std::vector<std::string> bytes, std::vector<bool> special,
                  std::vector<int32_t> eos);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_special(int32_t id) const { return special_[static_cast<size_t>(id)]; }
  bool is_eos(int32_t id) const;
  std::span<const int32_t> eos() const { return eos_; }
  // A hash of the whole table (the compiled-grammar cache's key).
  uint64_t fingerprint() const { return fingerprint_; }

  // The trie in preorder: node i has the byte that leads to it, its depth (1 for the
  // first byte), the index just past its subtree, and the tokens whose bytes end there
  // (trie_tokens[token_begin, token_end)). Special and empty tokens are not in it.
  struct TrieNode {
    uint8_t byte;
    uint32_t depth;
    uint32_t subtree_end;
    uint32_t token_begin, token_end;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  uint32_t max_token_bytes() const { return max_len_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  std::vector<int32_t> eos_;
  uint64_t fingerprint_ = 0;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  uint32_t max_len_ = 0;
};

}  // namespace tachyon::grammar
