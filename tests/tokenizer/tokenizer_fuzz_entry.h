// The entry point of the tokenizer fuzz target, shared with the corpus replay test so the
// same code runs under libFuzzer (clang) and in the ordinary test binary (g++).
//
// An input is a first byte and text (any bytes, as a request's prompt may hold): the
// first byte picks a tokenizer (byte % count; the bundled model's, then the reference
// tokenizers found in TACHYON_FUZZ_TOKENIZERS or TACHYON_BINARY_DIR/tokenizers, in a fixed
// order) and whether encode adds special tokens (bit 7). Every input runs:
//   - encode; every id in [0, vocab_size), and invalid UTF-8 read as its replacement
//     (encode(x) == encode(sanitize(x)));
//   - decode(encode(x, false)) == expected_roundtrip(x) (the round-trip tests' property),
//     for text that spells no special token and holds no U+2581;
//   - encode with plain ranges (tokenizer.h): the whole text as one gives no special id;
//     a range picked by the input's second and third bytes gives ids in the vocabulary,
//     and an empty one the ids of encode;
//   - the streaming decoder, with and without special tokens, on the encoded ids and on up
//     to 512 ids read from the input's bytes (two bytes an id, any value in the
//     vocabulary): valid UTF-8 pieces that concatenate to decode(ids) unless the stream
//     was cut (IncrementalDecoder::cut(): 64 tokens in a row without text;
//     IncrementalDecoder.CutsCleanly... checks that case).
// A bug, reported by abort() with a message, is a property that fails or any exception
// (a typed Error included: nothing here is bad input). Sanitizer reports are bugs too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/roundtrip_expect.h"

namespace tachyon::fuzz {

[[noreturn]] inline void tokenizer_bug(const std::string& name, const std::string& what) {
  std::fprintf(stderr, "tokenizer fuzz (%s): %s\n", name.c_str(), what.c_str());
  std::fflush(stderr);
  std::abort();
}

struct NamedTokenizer {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
};

inline const std::vector<NamedTokenizer>& fuzz_tokenizers() {
  static const std::vector<NamedTokenizer>* all = [] {
    auto* v = new std::vector<NamedTokenizer>;  // kept for the process
    const char* env = std::getenv("TACHYON_FUZZ_TOKENIZERS");
    const std::string refs = env != nullptr && env[0] != '\0'
                                 ? std::string(env)
                                 : std::string(TACHYON_BINARY_DIR) + "/tokenizers";
    const std::string kjv = std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat";
    for (const char* name :
         {"kjv", "llama3", "qwen3", "gemma3", "llama2", "gpt4o", "deepseek_v3"}) {
      auto t = testing::load_roundtrip_tokenizer(name, kjv, refs);
      if (t != nullptr) v->push_back({name, std::move(t)});
    }
    return v;
  }();
  return *all;
}

inline void check_stream(const NamedTokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  auto inc = t.tok->make_incremental_decoder(skip);
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = inc->step(id);
    if (!utf8::is_valid(piece)) tokenizer_bug(t.name, "a streamed piece is not UTF-8");
    streamed += piece;
  }
  streamed += inc->flush();
  const std::string whole = t.tok->decode(ids, skip);
  if (streamed != whole && !inc->cut())
    tokenizer_bug(t.name, std::string("streamed text differs from decode") +
                              (skip ? " (skipping special tokens)" : "") + ": ids " +
                              Json(ids).dump() + ", streamed " +
                              Json(utf8::sanitize(streamed)).dump() + ", decoded " +
                              Json(utf8::sanitize(whole)).dump());
}

inline bool tokenizer_one(const uint8_t* data, size_t size) {
  const auto& toks = fuzz_tokenizers();
  if (size == 0 || toks.empty()) return false;
  const NamedTokenizer& t = toks[data[0] % toks.size()];
  const bool special = (data[0] & 0x80) != 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const int32_t vocab = t.tok->vocab_size();
    const std::vector<int32_t> ids = t.tok->encode(text, special);
    for (int32_t id : ids)
      if (id < 0 || id >= vocab) tokenizer_bug(t.name, "encode gave id " + std::to_string(id));
    const std::vector<int32_t> plain = t.tok->encode(text, false);
    if (t.tok->encode(utf8::sanitize(text), false) != plain)
      tokenizer_bug(t.name, "invalid UTF-8 is not read as its replacement");
    // (Text that spells a special token is read as it, with the token's own handling of
    // the spaces around it: the property is the plain text's.)
    // Nor for text holding U+2581, the sentencepiece space mark, which decodes as a space
    // (the round-trip tests leave it out of their random text too).
    bool skip_roundtrip = text.find("\xE2\x96\x81") != std::string::npos;
    for (int32_t id : plain) skip_roundtrip = skip_roundtrip || t.tok->is_special(id);
    if (!skip_roundtrip && t.tok->decode(plain, false) != testing::expected_roundtrip(t.name, text))
      tokenizer_bug(t.name, "decode(encode(x)) is not x as normalised");
    const TextRange whole[] = {{0, text.size()}};
    for (int32_t id : t.tok->encode(text, false, whole))
      if (t.tok->is_special(id))
        tokenizer_bug(t.name, "a plain range gave the special id " + std::to_string(id));
    if (size > 3) {
      const size_t n = text.size(), a = data[1] % (n + 1), b = a + data[2] % (n + 1 - a);
      const TextRange some[] = {{a, b}};
      const std::vector<int32_t> part = t.tok->encode(text, false, some);
      for (int32_t id : part)
        if (id < 0 || id >= vocab)
          tokenizer_bug(t.name, "encode with a plain range gave id " + std::to_string(id));
      if (a == b && part != plain) tokenizer_bug(t.name, "an empty plain range changed the ids");
    }
    check_stream(t, ids, false);
    check_stream(t, ids, true);
    std::vector<int32_t> any;
    for (size_t i = 1; i + 1 < size && any.size() < 512; i += 2)
      any.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % vocab));
    check_stream(t, any, false);
    check_stream(t, any, true);
  } catch (const std::exception& e) {
    tokenizer_bug(t.name, std::string("exception: ") + e.what());
  }
  return !text.empty();
}

}  // namespace tachyon::fuzz
