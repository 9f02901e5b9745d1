// LLaVA's config mapping: llava-hf's short text_config filled with LlamaConfig's
// defaults, the vision side (CLIPVisionConfig's defaults, vision_feature_layer as an
// index or a list, the select strategy), another text family, the refusals; and the
// weight names of both layouts through the text family's own mapping.
#include <gtest/gtest.h>

#include "model/registry.h"
#include "model/vision/vision_config.h"

namespace tachyon {
namespace {

// llava-hf/llava-1.5-7b-hf's config.json, as published (less the fields unread here).
Json llava15_7b() {
  return Json::parse(R"({
    "architectures": ["LlavaForConditionalGeneration"],
    "ignore_index": -100, "image_token_index": 32000, "model_type": "llava",
    "pad_token_id": 32001, "projector_hidden_act": "gelu",
    "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
      "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
      "torch_dtype": "float16", "vocab_size": 32064},
    "tie_word_embeddings": false, "torch_dtype": "float16", "vision_config": {
      "hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064})");
}

ModelConfig map(const Json& j) {
  return map_model_config(HfConfig(j, "config.json"), "");
}

TEST(LlavaConfig, Llava15FillsLlamaAndClipDefaults) {
  const ModelConfig mc = map(llava15_7b());
  EXPECT_EQ(mc.family, "llava");
  EXPECT_EQ(mc.hidden_size, 4096);
  EXPECT_EQ(mc.inter_size, 11008);
  EXPECT_EQ(mc.layer_num, 32);
  EXPECT_EQ(mc.head_num, 32);
  EXPECT_EQ(mc.vocab_size, 32064);
  EXPECT_EQ(mc.max_seq_len, 4096);
  EXPECT_EQ(mc.dtype, DType::kF16);
  ASSERT_NE(mc.vision, nullptr);
  const VisionModelConfig& v = *mc.vision;
  EXPECT_EQ(v.text_family, "llama");
  EXPECT_EQ(v.text_hidden, 4096);
  EXPECT_EQ(v.image_token_id, 32000);
  EXPECT_EQ(v.clip.hidden_size, 1024);
  EXPECT_EQ(v.clip.num_layers, 24);
  EXPECT_EQ(v.clip.act, Activation::kQuickGelu);  // CLIPVisionConfig's default
  EXPECT_EQ(v.tokens_per_image(), 576);
  EXPECT_EQ(v.feature_layers, std::vector<int32_t>{23});
  EXPECT_EQ(v.layers_to_run(), 23);
  EXPECT_EQ(v.feature_dim(), 1024);
  EXPECT_EQ(v.projector_act, Activation::kGelu);
  EXPECT_TRUE(v.projector_mlp);
}

TEST(LlavaConfig, FeatureLayersStrategyAndTextFamily) {
  Json j = llava15_7b();
  j["vision_feature_layer"] = Json::array({-2, -5, 3});
  j["vision_feature_select_strategy"] = "full";
  j.erase("image_token_index");
  j["image_token_id"] = 32001;
  j["text_config"] = Json::parse(R"({"model_type": "mistral", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 32064})");
  const ModelConfig mc = map(j);
  ASSERT_NE(mc.vision, nullptr);
  EXPECT_EQ(mc.vision->text_family, "mistral");
  EXPECT_EQ(mc.vision->feature_layers, (std::vector<int32_t>{23, 20, 3}));
  EXPECT_EQ(mc.vision->feature_dim(), 3 * 1024);
  EXPECT_EQ(mc.vision->tokens_per_image(), 577);
  EXPECT_EQ(mc.vision->image_token_id, 32001);
  EXPECT_EQ(mc.hidden_size, 256);
  EXPECT_GT(mc.sliding_window, 0);  // mistral's own mapping ran
}

TEST(LlavaConfig, BadFieldsAreRefusedNamingThem) {
  auto refused = [](Json j, const std::string& what) {
    try {
      map(j);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Json j = llava15_7b();
  j["vision_feature_layer"] = 25;
  refused(j, "vision_feature_layer");
  j = llava15_7b();
  j["vision_feature_layer"] = Json::array();
  refused(j, "vision_feature_layer");
  j = llava15_7b();
  j["vision_feature_select_strategy"] = "cls";
  refused(j, "vision_feature_select_strategy");
  j = llava15_7b();
  j["vision_config"]["model_type"] = "siglip_vision_model";
  refused(j, "siglip_vision_model");
  j = llava15_7b();
  j["vision_config"]["image_size"] = 330;
  refused(j, "image_size");
  j = llava15_7b();
  j["image_token_index"] = 40000;
  refused(j, "image_token_index");
  j = llava15_7b();
  j.erase("vision_config");
  refused(j, "vision_config");
  j = llava15_7b();
  j["projector_hidden_act"] = "swiglu";
  refused(j, "projector_hidden_act");
}

TEST(LlavaConfig, WeightNamesInBothLayoutsThroughTheTextMapping) {
  const HfConfig cfg(llava15_7b(), "config.json");
  const ModelConfig mc = map_model_config(cfg, "");
  const WeightMap m = find_arch(cfg, "").map_weights(mc);
  const WeightRef& emb = m.at(Slot::kEmbedding);
  EXPECT_EQ(emb.name, "model.language_model.embed_tokens.weight");
  ASSERT_FALSE(emb.alternatives.empty());
  EXPECT_EQ(emb.alternatives[0], "language_model.model.embed_tokens.weight");
  const WeightRef& q = m.at(Slot::kQ);
  EXPECT_EQ(q.name, "model.language_model.layers.{L}.self_attn.q_proj.weight");
  EXPECT_EQ(q.alternatives.at(0), "language_model.model.layers.{L}.self_attn.q_proj.weight");
  const WeightRef& head = m.at(Slot::kLmHead);
  EXPECT_EQ(head.name, "lm_head.weight");
  EXPECT_EQ(head.alternatives.at(0), "language_model.lm_head.weight");
}

}  // namespace
}  // namespace tachyon
