// quantization_config parsing: each method's fields, the modules each quantizes, and
// every bad field refused with its name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/quant_config.h"
#include "model/registry.h"

namespace tachyon {
namespace {

QuantConfig parse(const char* text) {
  return parse_quant_config(Json::parse(text), "config.json");
}

// The parse fails with a message that contains `needle`.
void refused(const char* text, const std::string& needle) {
  try {
    parse(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << e.what() << " (expected '" << needle << "')";
  }
}

TEST(QuantConfig, Gptq) {
  QuantConfig q = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
    "desc_act": true, "sym": false, "checkpoint_format": "gptq_v2", "lm_head": true})");
  EXPECT_EQ(q.method, QuantMethod::kGptq);
  EXPECT_EQ(q.bits, 4);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_TRUE(q.desc_act);
  EXPECT_FALSE(q.sym);
  EXPECT_FALSE(q.gptq_v1);
  EXPECT_TRUE(q.quantizes("lm_head", true));
  q = parse(R"({"quant_method": "gptq", "bits": 8, "group_size": -1})");
  EXPECT_TRUE(q.gptq_v1);
  EXPECT_EQ(q.group_size, -1);
  EXPECT_FALSE(q.quantizes("lm_head", true));
  EXPECT_TRUE(q.quantizes("model.layers.0.mlp.down_proj", false));
}

TEST(QuantConfig, AwqAndFp8) {
  QuantConfig q = parse(R"({"quant_method": "awq", "bits": 4, "group_size": 64,
    "zero_point": true, "version": "GEMV", "modules_to_not_convert": ["visual", "mlp.gate"]})");
  EXPECT_EQ(q.method, QuantMethod::kAwq);
  EXPECT_TRUE(q.awq_gemv);
  EXPECT_FALSE(q.quantizes("model.layers.0.mlp.gate", false));
  EXPECT_TRUE(q.quantizes("model.layers.0.self_attn.q_proj", false));
  q = parse(R"({"quant_method": "fp8", "activation_scheme": "dynamic",
    "weight_block_size": [128, 64]})");
  EXPECT_EQ(q.method, QuantMethod::kFp8);
  EXPECT_EQ(q.block_n, 128);
  EXPECT_EQ(q.block_k, 64);
  EXPECT_EQ(q.str(), "fp8 block 128x64");
  q = parse(R"({"quant_method": "fp8", "activation_scheme": "static"})");
  EXPECT_EQ(q.block_n, 0);
  EXPECT_FALSE(q.dynamic_activations);
}

TEST(QuantConfig, CompressedTensors) {
  QuantConfig q = parse(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4,
      "type": "int", "strategy": "group", "group_size": 32, "symmetric": false}}},
    "ignore": ["lm_head", "re:.*mlp\\.gate$"]})");
  EXPECT_EQ(q.ct_format, CtFormat::kPackQuantized);
  ASSERT_EQ(q.ct_schemes.size(), 1u);
  EXPECT_EQ(q.ct_schemes[0].strategy, CtStrategy::kGroup);
  EXPECT_EQ(q.ct_schemes[0].group_size, 32);
  EXPECT_FALSE(q.ct_schemes[0].symmetric);
  EXPECT_TRUE(q.quantizes("model.layers.0.mlp.up_proj", false));
  EXPECT_FALSE(q.quantizes("lm_head", true));
  EXPECT_FALSE(q.quantizes("model.layers.3.mlp.gate", false));
  q = parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"g": {"targets": ["re:.*proj$"], "weights": {"num_bits": 8,
      "type": "float", "strategy": "block", "block_structure": [128, 128]}}}})");
  EXPECT_EQ(q.ct_schemes[0].strategy, CtStrategy::kBlock);
  EXPECT_TRUE(q.quantizes("model.layers.0.self_attn.o_proj", false));
  EXPECT_FALSE(q.quantizes("model.layers.0.mlp.gate", false));
}

TEST(QuantConfig, BadFieldsAreNamed) {
  refused(R"({"bits": 4})", "'quant_method'");
  refused(R"({"quant_method": "exl2"})", "'quant_method'");
  refused(R"({"quant_method": "gptq", "bits": 3})", "bits 3 is not supported");
  refused(R"({"quant_method": "gptq", "bits": "4"})", "'bits'");
  refused(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})", "'group_size'");
  refused(R"({"quant_method": "gptq", "bits": 4, "group_size": "128"})", "'group_size'");
  refused(R"({"quant_method": "gptq", "bits": 4, "desc_act": 1})", "'desc_act'");
  refused(R"({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"})",
          "'checkpoint_format'");
  refused(R"({"quant_method": "awq", "bits": 8})", "'bits'");
  refused(R"({"quant_method": "awq", "bits": 4, "version": "exllama"})", "'version'");
  refused(R"({"quant_method": "awq", "bits": 4, "modules_to_not_convert": "visual"})",
          "'modules_to_not_convert'");
  refused(R"({"quant_method": "fp8", "weight_block_size": [128]})", "'weight_block_size'");
  refused(R"({"quant_method": "fp8", "weight_block_size": [0, 128]})", "'weight_block_size'");
  refused(R"({"quant_method": "fp8", "activation_scheme": 1})", "'activation_scheme'");
  refused(R"({"quant_method": "compressed-tensors", "format": "marlin-24",
    "config_groups": {}})",
          "'format'");
  refused(R"({"quant_method": "compressed-tensors", "format": "pack-quantized"})",
          "'config_groups'");
  refused(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": "Linear", "weights": {"num_bits": 4}}}})",
          "'targets'");
  refused(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4,
      "strategy": "tensor_group"}}}})",
          "'strategy'");
  refused(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 2}}}})",
          "bits 2 is not supported");
  refused(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})",
          "format is 'float-quantized'");
  refused(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}},
    "ignore": ["re:(("]})",
          "'ignore'");
}

TEST(QuantConfig, FromTheModelConfigAndQuantizeConfigJson) {
  const Json base = Json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8,
    "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
    "vocab_size": 10, "max_position_embeddings": 32})");
  Json with = base;
  with["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 32}};
  ModelConfig mc = map_model_config(HfConfig(with, "config.json"), "");
  EXPECT_EQ(mc.quant.method, QuantMethod::kGptq);
  EXPECT_EQ(mc.quant.bits, 8);
  with["quantization_config"] = "gptq";
  EXPECT_THROW(map_model_config(HfConfig(with, "config.json"), ""), InvalidArgument);

  // quantize_config.json (no quant_method) beside a config without quantization_config.
  const auto path = std::filesystem::temp_directory_path() /
                    ("tachyon_quantize_config_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"bits": 4, "group_size": 128, "desc_act": false})";
  mc = map_model_config(HfConfig(base, "config.json"), "", "", path.string());
  EXPECT_EQ(mc.quant.method, QuantMethod::kGptq);
  EXPECT_EQ(mc.quant.group_size, 128);
  EXPECT_FALSE(map_model_config(HfConfig(base, "config.json"), "").quant.enabled());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tachyon
