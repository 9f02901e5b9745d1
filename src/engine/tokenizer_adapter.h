// The engine's view (TextTokenizer) of a loaded Tokenizer.
#pragma once

#include <memory>
#include <vector>

#include "engine/text.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

// Wraps a tokenizer for AsyncModel: its streaming decoder gives the text pieces, and
// eos_ids (or, when empty, the tokenizer's EOS) end sequences.
std::shared_ptr<const TextTokenizer> make_text_tokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                                         std::vector<int32_t> eos_ids = {});

}  // namespace tachyon
