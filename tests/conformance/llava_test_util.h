// The LLaVA fixtures (tests/conformance/fixtures/vision): their images, reference
// features and cases, and a prompt run through a model in one step with its images'
// embeddings in place of the image tokens.
#pragma once

#include <string>
#include <vector>

#include "conformance/fixture_dir.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace tachyon::testing_util {

struct LlavaCase {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> images;  // indices into LlavaFixture::images, in prompt order
  std::vector<int32_t> greedy_new_ids;
  Tensor logits;  // [len, vocab] f32
};

struct LlavaFixture {
  std::string dir;  // the materialised checkpoint
  int32_t image_token = 0;
  int32_t tokens_per_image = 0;
  std::vector<Tensor> images;    // pixel_values [3, H, W] f32
  std::vector<Tensor> features;  // [tokens, feature dim] f32
  std::vector<Tensor> embeds;    // [tokens, text hidden] f32
  std::vector<LlavaCase> cases;
};

inline LlavaFixture load_llava_fixture(const std::string& name) {
  LlavaFixture f;
  f.dir = fixture(name);
  const Json ref = load_json_file(fixture_source_dir(name) + "/reference.json");
  auto st = SafetensorsFile::open(fixture_source_dir(name) + "/reference.safetensors");
  f.image_token = ref["image_token_id"].get<int32_t>();
  f.tokens_per_image = ref["tokens_per_image"].get<int32_t>();
  for (int i = 0; st->find("image" + std::to_string(i)) != nullptr; ++i) {
    const std::string k = "image" + std::to_string(i);
    f.images.push_back(st->get(k).clone());
    f.features.push_back(st->get(k + ".features").clone());
    f.embeds.push_back(st->get(k + ".embeds").clone());
  }
  for (size_t i = 0; i < ref["cases"].size(); ++i) {
    const Json& c = ref["cases"][i];
    LlavaCase lc;
    for (const auto& v : c["input_ids"]) lc.input_ids.push_back(v.get<int32_t>());
    for (const auto& v : c["images"]) lc.images.push_back(v.get<int32_t>());
    for (const auto& v : c["greedy_new_ids"]) lc.greedy_new_ids.push_back(v.get<int32_t>());
    lc.logits = st->get("case" + std::to_string(i) + ".logits").clone();
    f.cases.push_back(std::move(lc));
  }
  return f;
}

// The logits of every position of `ids` computed in one step from an empty cache, the
// k-th image token taking row k % per of embeds[k / per] (per: the rows of each).
inline Tensor llava_prompt_logits(Model& model, const std::vector<int32_t>& ids,
                                  const std::vector<Tensor>& embeds) {
  const int32_t n = static_cast<int32_t>(ids.size()), bs = 16, blocks = (n + bs - 1) / bs;
  model.init_kv_cache(blocks, bs);
  ForwardBatch b;
  b.token_ids = ids;
  for (int32_t i = 0; i < n; ++i) {
    b.positions.push_back(i);
    b.logits_rows.push_back(i);
  }
  b.query_start = {0, n};
  b.context_lens = {n};
  for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  b.max_blocks_per_seq = blocks;
  int64_t k = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (ids[static_cast<size_t>(i)] != model.image_token_id()) continue;
    const Tensor& e = embeds.at(static_cast<size_t>(k / model.image_tokens()));
    const int64_t r = k % model.image_tokens();
    b.embeddings.push_back(InjectedEmbeddings{i, e.slice_rows(r, r + 1)});
    ++k;
  }
  return model.forward(b);
}

}  // namespace tachyon::testing_util
