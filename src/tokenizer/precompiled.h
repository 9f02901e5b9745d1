// The SentencePiece "precompiled charsmap" normalizer (T5, ALBERT, XLNet, mBART...):
// a darts-clone double-array trie mapping UTF-8 sequences to replacement strings,
// applied per grapheme cluster as `tokenizers` does.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pipeline.h"

namespace tachyon::tok {

class PrecompiledCharsmap {
 public:
  // Parses the raw blob: u32 trie size in bytes, the trie units, then the
  // NUL-separated replacement strings. Throws InvalidArgument naming `what`.
  PrecompiledCharsmap(std::string blob, const std::string& what);
  // The replacement of the shortest trie key that prefixes `chunk`, if any.
  std::optional<std::string_view> transform(std::string_view chunk) const;
  void apply(std::string& s) const;

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;
};

std::unique_ptr<Normalizer> make_precompiled_normalizer(const std::string& base64_charsmap,
                                                        const std::string& what);

// Byte <-> printable-character mapping of GPT-2's byte-level BPE.
std::string byte_level_encode(std::string_view bytes);
// Maps each character back to its byte; a character outside the table keeps its UTF-8
// bytes. Returns false when some character was outside the table.
bool byte_level_decode(std::string_view text, std::string& out);
// True when `s` consists only of byte-level characters (used by the ByteLevel decoder).

}  // namespace tachyon::tok
