// A SentencePiece model (tokenizer.model) through libsentencepiece, used when a
// checkpoint ships no tokenizer.json. Behaves like transformers' slow (legacy)
// sentencepiece tokenizers: special tokens are split off first, each remaining chunk is
// encoded on its own, BOS/EOS follow add_bos_token / add_eos_token.
#include <sentencepiece_processor.h>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/backend.h"

namespace tachyon::tok {
namespace {

class SentencePieceBackend : public Backend {
 public:
  SentencePieceBackend(const std::string& path, bool add_bos, bool add_eos,
                       const std::vector<std::string>& specials)
      : add_bos_(add_bos), add_eos_(add_eos) {
    auto status = sp_.Load(path);
    if (!status.ok())
      raise<InvalidArgument>("{}: not a SentencePiece model: {}", path, status.ToString());
    for (const auto& s : specials) {
      int id = sp_.PieceToId(s);
      bool known = id != sp_.unk_id() || s == sp_.IdToPiece(sp_.unk_id());
      if (known) add(s, id);
    }
  }

  std::vector<int32_t> encode(std::string_view input, bool add_special_tokens,
                              std::span<const TextRange> plain) const override {
    std::string text;
    std::vector<TextRange> ranges;
    sanitize_ranges(input, plain, text, ranges);
    const Regions regions(ranges, text.size());
    std::vector<int32_t> ids;
    if (add_special_tokens && add_bos_ && sp_.bos_id() >= 0) ids.push_back(sp_.bos_id());
    size_t start = 0;
    auto encode_chunk = [&](size_t b, size_t e) {
      if (e <= b) return;
      std::vector<int> chunk;
      auto status = sp_.Encode(std::string_view(text).substr(b, e - b), &chunk);
      if (!status.ok()) raise<InvalidArgument>("sentencepiece: {}", status.ToString());
      ids.insert(ids.end(), chunk.begin(), chunk.end());
    };
    for (size_t pos = 0; pos < text.size();) {
      // Special tokens are matched only outside the plain ranges, never across their edges.
      const Regions::Region region =
          ranges.empty() ? Regions::Region{0, text.size(), false} : regions.at(pos);
      if (region.plain) {
        pos = region.end;
        continue;
      }
      size_t best_len = 0;
      int32_t best = -1;
      for (const auto& [s, id] : specials_) {
        if (s.size() > best_len && s.size() <= region.end - pos &&
            text.compare(pos, s.size(), s) == 0) {
          best_len = s.size();
          best = id;
        }
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      encode_chunk(start, pos);
      ids.push_back(best);
      pos += best_len;
      start = pos;
    }
    encode_chunk(start, text.size());
    if (add_special_tokens && add_eos_ && sp_.eos_id() >= 0) ids.push_back(sp_.eos_id());
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string s;
      sp_.Decode(run, &s);
      out.append(s);
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= sp_.GetPieceSize()) continue;
      if (is_special(id)) {
        flush();
        if (!skip_special_tokens) out.append(sp_.IdToPiece(id));
        continue;
      }
      run.push_back(id);
    }
    flush();
    return utf8::sanitize(out);
  }

  int32_t vocab_size() const override { return sp_.GetPieceSize(); }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    int id = sp_.PieceToId(token);
    if (id == sp_.unk_id() && token != sp_.IdToPiece(id)) return std::nullopt;
    return id;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id < 0 || id >= sp_.GetPieceSize()) return std::nullopt;
    return sp_.IdToPiece(id);
  }
  bool is_special(int32_t id) const override {
    if (id < 0 || id >= sp_.GetPieceSize()) return false;
    if (sp_.IsControl(id) || sp_.IsUnknown(id)) return true;
    for (const auto& [s, sid] : specials_) {
      if (sid == id) return true;
    }
    return false;
  }
  int32_t add_special_token(std::string_view content) override {
    auto id = token_to_id(content);
    if (!id)
      raise<InvalidArgument>("sentencepiece: special token '{}' is not in the model", content);
    add(std::string(content), *id);
    return *id;
  }

 private:
  void add(const std::string& s, int32_t id) {
    for (const auto& [c, i] : specials_) {
      if (c == s) return;
    }
    specials_.push_back({s, id});
  }
  sentencepiece::SentencePieceProcessor sp_;
  bool add_bos_, add_eos_;
  std::vector<std::pair<std::string, int32_t>> specials_;
};

}  // namespace

std::unique_ptr<Backend> make_sentencepiece_backend(const std::string& model_path, bool add_bos,
                                                    bool add_eos,
                                                    const std::vector<std::string>& specials) {
  return std::make_unique<SentencePieceBackend>(model_path, add_bos, add_eos, specials);
}

}  // namespace tachyon::tok
