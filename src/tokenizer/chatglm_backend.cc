// ChatGLM2 / ChatGLM3's tokenizer (tokenizer_class "ChatGLMTokenizer", their own
// tokenization_chatglm.py over a SentencePiece tokenizer.model), as transformers runs it:
//   - the SentencePiece vocabulary keeps its ids; the wrapper's nine special tokens
//     [MASK] [gMASK] [sMASK] sop eop <|system|> <|user|> <|assistant|> <|observation|>
//     are numbered after it, in that order;
//   - the text is first split on the added tokens (tokenizer_config.json's
//     added_tokens_decoder and the special tokens it names), each remaining piece goes
//     through SentencePiece, and a produced piece whose text is one of the nine names
//     becomes that special token (convert_token_to_id looks the names up first);
//   - with special tokens, [gMASK] sop is prepended (no BOS);
//   - decoding drops the SentencePiece BOS/EOS/pad pieces (convert_id_to_token gives
//     "" for them) and writes the nine names as text.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/backend.h"

namespace tachyon::tok {
namespace {

constexpr std::array<const char*, 9> kChatGLMSpecials = {
    "[MASK]",   "[gMASK]",       "[sMASK]",        "sop", "eop", "<|system|>",
    "<|user|>", "<|assistant|>", "<|observation|>"};

class ChatGLMBackend : public Backend {
 public:
  ChatGLMBackend(const std::string& path, const std::vector<AddedToken>& added) {
    auto status = sp_.Load(path);
    if (!status.ok())
      raise<InvalidArgument>("{}: not a SentencePiece model: {}", path, status.ToString());
    base_ = sp_.GetPieceSize();
    for (const AddedToken& a : added) {
      if (a.id < 0 || a.id >= vocab_size() || id_to_token(a.id) != a.content)
        raise<InvalidArgument>(
            "{}: added token '{}' has id {}, but the ChatGLM vocabulary has '{}' there", path,
            a.content, a.id, id_to_token(a.id).value_or("?"));
      AddedToken raw = a;
      raw.normalized = false;  // the slow tokenizer matches them on the raw text
      added_.add(raw);
      if (a.special) special_.push_back(a.id);
    }
    added_.build(nullptr);
  }

  std::vector<int32_t> encode(std::string_view input, bool add_special_tokens,
                              std::span<const TextRange> plain) const override {
    std::string text;
    std::vector<TextRange> ranges;
    sanitize_ranges(input, plain, text, ranges);
    std::vector<int32_t> ids;
    if (add_special_tokens) ids = {base_ + 1, base_ + 3};  // [gMASK], sop
    std::vector<AddedVocabulary::Segment> segments;
    // As transformers' slow tokenizers with split_special_tokens: no added token is
    // matched in the plain ranges.
    added_.split(text, false, segments, ranges, /*all_plain=*/true);
    for (const auto& seg : segments) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      std::vector<std::string> pieces;
      auto status =
          sp_.Encode(std::string_view(text).substr(seg.begin, seg.end - seg.begin), &pieces);
      if (!status.ok()) raise<InvalidArgument>("sentencepiece: {}", status.ToString());
      for (const std::string& p : pieces) {
        const int32_t special = special_index(p);
        ids.push_back(special >= 0 ? base_ + special : sp_.PieceToId(p));
      }
    }
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string s;
      sp_.Decode(run, &s);
      out += s;
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) continue;
      if (skip_special_tokens && is_special(id)) continue;
      if (id >= base_) {
        flush();
        out += kChatGLMSpecials[static_cast<size_t>(id - base_)];
      } else if (id == sp_.bos_id() || id == sp_.eos_id() || id == sp_.unk_id()) {
        continue;  // convert_id_to_token gives "" for BOS, EOS and the pad (unk) id
      } else {
        run.push_back(id);
      }
    }
    flush();
    return utf8::sanitize(out);
  }

  int32_t vocab_size() const override {
    return base_ + static_cast<int32_t>(kChatGLMSpecials.size());
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (const int32_t s = special_index(token); s >= 0) return base_ + s;
    const int id = sp_.PieceToId(token);
    if (id == sp_.unk_id() && token != sp_.IdToPiece(id)) return std::nullopt;
    return id;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return std::nullopt;
    if (id >= base_) return std::string(kChatGLMSpecials[static_cast<size_t>(id - base_)]);
    return sp_.IdToPiece(id);
  }
  bool is_special(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return false;
    if (id < base_ && (sp_.IsControl(id) || sp_.IsUnknown(id))) return true;
    return std::find(special_.begin(), special_.end(), id) != special_.end();
  }
  int32_t add_special_token(std::string_view content) override {
    auto id = token_to_id(content);
    if (!id)
      raise<InvalidArgument>("ChatGLM tokenizer: special token '{}' is not in the vocabulary",
                             content);
    if (!added_.find(content)) {
      added_.add({std::string(content), *id, true, false, false, false, false});
      added_.build(nullptr);
    }
    special_.push_back(*id);
    return *id;
  }

 private:
  static int32_t special_index(std::string_view piece) {
    for (size_t i = 0; i < kChatGLMSpecials.size(); ++i)
      if (piece == kChatGLMSpecials[i]) return static_cast<int32_t>(i);
    return -1;
  }

  sentencepiece::SentencePieceProcessor sp_;
  int32_t base_ = 0;  // the SentencePiece vocabulary size: the first special id
  AddedVocabulary added_;
  std::vector<int32_t> special_;
};

}  // namespace

std::unique_ptr<Backend> make_chatglm_backend(const std::string& model_path,
                                              const std::vector<AddedToken>& added) {
  return std::make_unique<ChatGLMBackend>(model_path, added);
}

}  // namespace tachyon::tok
