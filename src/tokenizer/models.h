// Tokenization models of tokenizer.json: BPE, WordPiece, WordLevel and Unigram. Each is
// built from plain data (the loader extracts it from the JSON) and is immutable and
// thread-safe afterwards (BPE's word cache is internally locked).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/pipeline.h"
#include "tokenizer/string_map.h"

namespace tachyon::tok {

// id <-> token for a vocabulary with possibly sparse ids. The token bytes are stored
// once, in the hash table's key arena; ids index (offset, length) pairs into it.
class Vocab {
 public:
  // Throws InvalidArgument naming `what` for a negative or huge id.
  void add(std::string_view token, int32_t id, const std::string& what) {
    add(token, hash_bytes(token), id, what);
  }
  // add() with the token's hash_bytes() computed by the caller, who may prefetch() it.
  void add(std::string_view token, uint64_t hash, int32_t id, const std::string& what);
  void prefetch(uint64_t hash) const { map_.prefetch(hash); }
  void reserve(size_t n) {
    map_.reserve(n);
    entries_.reserve(n);
  }
  std::optional<int32_t> find(std::string_view token) const { return map_.find(token); }
  // find() for n <= kMax tokens at once (faster than one by one): ids[i] = -1 if absent.
  template <size_t kMax>
  void find_batch(const std::string_view* tokens, size_t n, int32_t* ids) const {
    map_.find_batch<kMax>(tokens, n, ids);
  }
  std::optional<std::string_view> token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= entries_.size() || entries_[id].len == kAbsent) {
      return std::nullopt;
    }
    return map_.key_at(entries_[id].offset, entries_[id].len);
  }
  int32_t size() const { return static_cast<int32_t>(entries_.size()); }
  size_t count() const { return map_.size(); }

 private:
  static constexpr uint32_t kAbsent = 0xFFFFFFFFu;
  struct Entry {
    uint32_t offset;
    uint32_t len;  // kAbsent: no token has this id
  };
  StringIdMap map_;
  std::vector<Entry> entries_;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // empty: none
  std::string end_of_word_suffix;         // empty: none
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel : public Model {
 public:
  // `merges` are token pairs in rank order. Throws InvalidArgument naming `path` when a
  // merge names a token missing from the vocabulary.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
           BpeOptions options, const std::string& path);
  // Merges given directly as (left id, right id) -> (rank, merged id), e.g. from ranks.
  BpeModel(Vocab vocab, PairMap merges, BpeOptions options);

  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    return vocab_.find(token);
  }
  std::optional<std::string_view> id_to_token(int32_t id) const override {
    return vocab_.token(id);
  }
  int32_t vocab_size() const override { return vocab_.size(); }
  const BpeOptions& options() const { return options_; }

 private:
  void init_char_table();
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  void tokenize_cached(std::string_view word, std::vector<int32_t>& out) const;
  void build_inner_pairs() const;
  Vocab vocab_;
  PairMap merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  // Ids of single characters below U+0800 as the first symbol of a word (-1: not in the
  // vocabulary, -2: needs the slow path). Only used without prefix/suffix.
  std::vector<int32_t> char_ids_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> tokens for byte fallback, -1 if absent

  // Word cache, sharded to keep lock contention low across server threads.
  static constexpr size_t kShards = 64;
  static constexpr size_t kShardCapacity = 4096;
  static constexpr size_t kMaxCachedWord = 96;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  mutable std::unique_ptr<Shard[]> cache_;
  // Adjacent character pairs found inside vocabulary tokens, built on first use.
  mutable std::once_flag inner_pairs_once_;
  mutable PairMap inner_pairs_;
};

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  size_t max_input_chars_per_word = 100;
};

class WordPieceModel : public Model {
 public:
  WordPieceModel(Vocab vocab, WordPieceOptions options, const std::string& path);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string_view> id_to_token(int32_t id) const override {
    return vocab_.token(id);
  }
  int32_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  WordPieceOptions options_;
  int32_t unk_id_;
};

class WordLevelModel : public Model {
 public:
  WordLevelModel(Vocab vocab, std::string unk_token, const std::string& path);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string_view> id_to_token(int32_t id) const override {
    return vocab_.token(id);
  }
  int32_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  int32_t unk_id_;
};

class UnigramModel : public Model {
 public:
  // `pieces[i]` is token i with its log-probability score.
  UnigramModel(std::vector<std::pair<std::string, double>> pieces, std::optional<int32_t> unk_id,
               bool byte_fallback, const std::string& path);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view t) const override { return vocab_.find(t); }
  std::optional<std::string_view> id_to_token(int32_t id) const override {
    return vocab_.token(id);
  }
  int32_t vocab_size() const override { return vocab_.size(); }

 private:
  // A byte trie over the pieces: children of node n are child_keys_/child_nodes_ in
  // [first_child_[n], first_child_[n+1]); token_[n] is the piece ending there or -1.
  void build_trie();
  Vocab vocab_;
  std::vector<double> scores_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_;
  double min_score_ = 0;
  std::vector<uint32_t> first_child_;
  std::vector<uint8_t> child_keys_;
  std::vector<uint32_t> child_nodes_;
  std::vector<int32_t> node_token_;
};

}  // namespace tachyon::tok
